//! Headless Chromium driven through chromedriver's WebDriver protocol (plain HTTP), for
//! the page's tests: open a URL, run a script in the page, take a screenshot.

use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::wait_for;

/// Debian's chromium and chromium-driver, when installed.
pub fn available() -> Option<(PathBuf, PathBuf)> {
    let find = |names: &[&str]| names.iter().map(PathBuf::from).find(|p| p.is_file());
    Some((
        find(&["/usr/bin/chromium", "/usr/bin/chromium-browser"])?,
        find(&["/usr/bin/chromedriver"])?,
    ))
}

pub struct Browser {
    driver: Child,
    base: String,
    session: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    pub fn start(chromium: &std::path::Path, chromedriver: &std::path::Path) -> Browser {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let base = format!("http://127.0.0.1:{port}");
        wait_for("chromedriver", Duration::from_secs(30), || {
            ureq::get(&format!("{base}/status")).call().is_ok()
        });
        let profile = tempfile::tempdir().unwrap();
        // The flags that keep Chromium off the network here (no background services).
        let args = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1280,1000",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([format!("--user-data-dir={}", profile.path().display())])
        .collect::<Vec<_>>();
        let caps = json!({"capabilities": {"alwaysMatch": {"browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium, "args": args}}}});
        let r: Value = ureq::post(&format!("{base}/session"))
            .send_json(caps)
            .expect("a chromedriver session")
            .into_json()
            .unwrap();
        let session = r["value"]["sessionId"].as_str().unwrap().to_string();
        Browser {
            driver,
            base,
            session,
            _profile: profile,
        }
    }

    fn call(&self, path: &str, body: Value) -> Value {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let r: Value = ureq::post(&url)
            .send_json(body)
            .unwrap_or_else(|e| panic!("webdriver {path}: {e}"))
            .into_json()
            .unwrap();
        r["value"].clone()
    }

    pub fn open(&self, url: &str) {
        self.call("/url", json!({ "url": url }));
    }

    /// Run `script` (a function body; `arguments` holds `args`) in the page; its return value.
    pub fn eval(&self, script: &str, args: Value) -> Value {
        self.call("/execute/sync", json!({ "script": script, "args": args }))
    }

    /// A PNG of the window.
    pub fn screenshot(&self) -> Vec<u8> {
        use base64::Engine as _;
        let url = format!("{}/session/{}/screenshot", self.base, self.session);
        let r: Value = ureq::get(&url).call().unwrap().into_json().unwrap();
        base64::engine::general_purpose::STANDARD
            .decode(r["value"].as_str().unwrap())
            .unwrap()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = ureq::delete(&format!("{}/session/{}", self.base, self.session)).call();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
