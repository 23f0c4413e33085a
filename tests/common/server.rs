//! A real `epm-run serve` on an ephemeral loopback port for the tests, stopped by SIGTERM
//! when dropped.

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{bin, sse_events, wait_for};

/// A running server; SIGTERM and a wait on drop (SIGKILL if it does not stop).
pub struct Server {
    child: Option<Child>,
    /// A prompt store of its own where the test names none: the store outlives a server,
    /// and a test's servers must not take up each other's prefixes (nor fill the user's
    /// cache folder) unless the test asks for it.
    _store: Option<tempfile::TempDir>,
    pub base: String,
    pub stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Server {
    pub fn start(model: &Path, extra: &[&str]) -> Server {
        Server::spawn(Command::new(bin()), model, extra)
    }

    /// Started inside `cap`'s cgroups (its memory limit, and its read limit if it has one).
    pub fn start_in(cap: &super::Cap, model: &Path, extra: &[&str]) -> Server {
        Server::spawn(cap.command(Path::new(bin()), &[]), model, extra)
    }

    fn spawn(mut command: Command, model: &Path, extra: &[&str]) -> Server {
        let ctx: &[&str] = if extra.contains(&"-c") {
            &[]
        } else {
            &["-c", "1024"]
        };
        // Always a folder of the test's own: the prompt store and the expert heat of a warm
        // start stay out of the user's cache folder.
        let names_store = extra.contains(&"--prompt-cache-dir");
        // On a disk, as the store requires (a temp folder may be in memory).
        let store = (!names_store)
            .then(|| tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("a store folder"));
        let store_args: Vec<&std::ffi::OsStr> = match &store {
            Some(dir) => vec!["--prompt-cache-dir".as_ref(), dir.path().as_os_str()],
            None => Vec::new(),
        };
        let mut child = command
            .args([
                "serve",
                "-m",
                model.to_str().unwrap(),
                "--port",
                "0",
                "-t",
                "2",
            ])
            .args(ctx)
            .args(extra)
            .args(store_args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn epm-run serve");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let log2 = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix("listening on ") {
                    let addr = rest.split_whitespace().next().unwrap_or("").to_string();
                    let _ = tx.send(addr);
                }
                log2.lock().unwrap().push_str(&(line + "\n"));
            }
        });
        let base = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("the server did not start: {}", log.lock().unwrap()));
        let server = Server {
            child: Some(child),
            _store: store,
            base,
            stderr: log,
        };
        wait_for(
            "the model to load (/health 200)",
            Duration::from_secs(120),
            || ureq::get(&server.url("/health")).call().is_ok(),
        );
        server
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    pub fn post(&self, path: &str, body: &Value) -> Result<Value, (u16, Value, Option<String>)> {
        match ureq::post(&self.url(path)).send_json(body.clone()) {
            Ok(r) => Ok(r.into_json().unwrap()),
            Err(ureq::Error::Status(code, r)) => {
                let retry = r.header("retry-after").map(String::from);
                Err((code, r.into_json().unwrap_or(Value::Null), retry))
            }
            Err(e) => panic!("transport error: {e}"),
        }
    }

    pub fn chat(&self, body: &Value) -> Value {
        self.post("/v1/chat/completions", body)
            .unwrap_or_else(|e| panic!("chat failed: {e:?}"))
    }

    /// The value of an unlabelled series in `/metrics`.
    pub fn metric(&self, name: &str) -> f64 {
        let text = ureq::get(&self.url("/metrics"))
            .call()
            .unwrap()
            .into_string()
            .unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("{name} is not in /metrics"))
    }

    /// A streaming request's events (the JSON of each `data:` line, `[DONE]` as a string).
    pub fn stream(&self, path: &str, body: &Value) -> Vec<Value> {
        let r = ureq::post(&self.url(path))
            .send_json(body.clone())
            .unwrap_or_else(|e| panic!("stream failed: {e}"));
        assert!(r.content_type().starts_with("text/event-stream"));
        sse_events(r.into_reader())
    }

    /// The exit status once the server exits by itself (it must within 60 s).
    pub fn try_status(&mut self) -> Option<std::process::ExitStatus> {
        let child = self.child.as_mut()?;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                self.child = None;
                return Some(s);
            }
            assert!(Instant::now() < deadline, "the server did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then the exit status (SIGKILL after 30 s).
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().unwrap();
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                return s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!(
                    "the server did not stop on SIGTERM: {}",
                    self.stderr.lock().unwrap()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Server {
    /// SIGKILL, as the OOM killer or a crash ends a server: nothing runs at its exit.
    pub fn kill(&mut self) {
        let mut child = self.child.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.stop();
        }
    }
}

/// A server on a freshly made `qwen3-30b-a3b-mini` in `dir` whose chat template opens the
/// reasoning block in the generation prompt ([`super::template_opening_the_block`]), with
/// `extra` flags; the model's and the template's paths come back too.
pub fn thinking_mini(
    dir: &Path,
    extra: &[&str],
) -> (std::path::PathBuf, std::path::PathBuf, Server) {
    let model = super::synth(dir, "qwen3-30b-a3b-mini", &[]);
    let template = super::template_opening_the_block(dir);
    let mut flags = vec!["--chat-template-file", template.to_str().unwrap()];
    flags.extend_from_slice(extra);
    let server = Server::start(&model, &flags);
    (model, template, server)
}
