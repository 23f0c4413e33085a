//! The A/B harness: a real `ab` run on a tiny model, a cap that must kill a child that
//! exceeds it, cleanup of every cgroup, and the routing trace.

mod common;

use common::*;
use epm_core::pager::Phase;
use epm_core::trace::Trace;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

fn our_cgroups(pid: u32) -> Vec<String> {
    let prefix = format!("epm-{pid}-");
    ["/sys/fs/cgroup/memory", "/sys/fs/cgroup"]
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&prefix))
        .collect()
}

#[test]
fn ab_on_a_tiny_model_with_two_budgets() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "tiny", &["--experts", "64"]);
    let plan = plan(&model, &["-c", "1024"]);
    let min_mb = plan["min_budget_bytes"].as_u64().unwrap().div_ceil(MIB);
    let out = dir.path().join("ab.json");
    let png = dir.path().join("ab.png");
    let (b1, b2) = (min_mb.to_string(), (min_mb + 40).to_string());
    let child = Command::new(bin())
        .args([
            "ab",
            "-m",
            model.to_str().unwrap(),
            "--budget-mb",
            &b1,
            "--budget-mb",
            &b2,
        ])
        .args([
            "-n",
            "16",
            "-c",
            "1024",
            "--out",
            out.to_str().unwrap(),
            "--plot",
            png.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    ok(&child.wait_with_output().unwrap());
    assert!(
        our_cgroups(pid).is_empty(),
        "cgroups left: {:?}",
        our_cgroups(pid)
    );
    let report = json(&out);
    assert_eq!(report["all_passed"], true, "{report}");
    for k in ["cpu", "cores", "mem_total_bytes", "kernel"] {
        assert!(report["machine"].get(k).is_some(), "machine.{k}");
    }
    assert!(report["command"].as_str().unwrap().contains("ab"));
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 6, "3 configurations x 2 budgets");
    let real_caps = ["cgroup-v1", "cgroup-v2", "rlimit+sampler"];
    for r in rows {
        for k in [
            "rep",
            "budget_mb",
            "config",
            "cap",
            "read_ahead_kb",
            "outcome",
            "child",
            "prefill_tok_s",
            "decode_tok_s",
            "command",
        ] {
            assert!(r.get(k).is_some(), "row.{k} missing: {r}");
        }
        assert_eq!(r["outcome"]["kind"], "ok", "{r}");
        assert!(r["child"]["time_to_first_output_s"].as_f64().is_some());
        assert!(
            r["cold_cache_resident_bytes"].as_u64().unwrap() < 1 << 20,
            "cache not cold: {r}"
        );
        match r["config"].as_str().unwrap() {
            "reference" => assert_eq!(r["cap"], "none"),
            config => {
                assert!(real_caps.contains(&r["cap"].as_str().unwrap()), "{r}");
                assert_eq!(r["tokens_match"], true, "{config}: {r}");
                assert_eq!(r["logits_match"], true, "{config}: {r}");
            }
        }
        if r["config"] == "epm" {
            assert_eq!(r["within_budget"], true, "{r}");
            let budget = r["budget_mb"].as_u64().unwrap() * MIB;
            assert!(r["child"]["peak_rss_bytes"].as_u64().unwrap() <= budget);
            assert!(r["decode_cache_hit_rate"].as_f64().is_some());
            let s: Snapshot = serde_json::from_value(r["stats"].clone()).unwrap();
            assert!(s.pager_enabled && s.experts.evictions > 0);
        }
    }
    let png_bytes = std::fs::read(&png).unwrap();
    assert_eq!(&png_bytes[1..4], b"PNG");
}

#[test]
fn variants_alternate_with_the_configurations_and_are_checked_like_them() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "tiny", &["--experts", "64"]);
    let min_mb = min_budget_mb(&model, &["-c", "1024"]).to_string();
    let out = dir.path().join("ab.json");
    let model_arg = model.to_str().unwrap();
    let args = [
        "ab",
        "-m",
        model_arg,
        "--budget-mb",
        &min_mb,
        "-n",
        "8",
        "-c",
        "1024",
        "--runs",
        "2",
        "--configs",
        "epm",
        "--epm-arg=--no-predict",
        "--out",
        out.to_str().unwrap(),
        "--variant",
        "populate-2=--prefetch populate --io-threads 2",
        "--variant",
        "predict=--predict",
    ];
    ok(&epm(&args));
    let report = json(&out);
    assert_eq!(report["all_passed"], true, "{report}");
    let rows = report["rows"].as_array().unwrap();
    let labels: Vec<&str> = rows.iter().map(|r| r["label"].as_str().unwrap()).collect();
    // Each repetition runs the configuration, then every variant, in order.
    assert_eq!(
        labels,
        [
            "epm",
            "populate-2",
            "predict",
            "epm",
            "populate-2",
            "predict"
        ]
    );
    for r in rows.iter().filter(|r| r["label"] != "epm") {
        assert_eq!(r["config"], "epm");
        // Compared with the first run of their set: the same tokens and logits.
        assert_eq!(r["tokens_match"], true, "{r}");
        assert_eq!(r["logits_match"], true, "{r}");
        assert_eq!(r["within_budget"], true, "{r}");
        let cmd = r["command"].as_str().unwrap();
        assert!(cmd.contains("--no-predict"), "{cmd}");
    }
    let populate = rows.iter().find(|r| r["label"] == "populate-2").unwrap();
    assert!(populate["command"]
        .as_str()
        .unwrap()
        .ends_with("--prefetch populate --io-threads 2"));
    let summary = &report["summary"][0]["variants"];
    assert_eq!(summary.as_array().unwrap().len(), 2);
    assert_eq!(summary[0]["label"], "populate-2");
    assert_eq!(summary[0]["decode_over_first"]["n"], 2);
    // A variant must not take a configuration's name and needs LABEL=FLAGS; a queue setting
    // must be one ab knows.
    for (flag, bad, says) in [
        ("--variant", "epm=--no-predict", "names a configuration"),
        ("--variant", "no-label", "LABEL=FLAGS"),
        (
            "--device-queue",
            "nr_requests=4",
            "read_ahead_kb or max_sectors_kb",
        ),
    ] {
        let e = epm(&["ab", "-m", model_arg, "--budget-mb", &min_mb, flag, bad]);
        assert_eq!(e.status.code(), Some(2), "{bad}");
        assert!(String::from_utf8_lossy(&e.stderr).contains(says), "{bad}");
    }
}

#[test]
fn a_disk_limit_throttles_the_capped_runs_reads() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "tiny", &["--experts", "64"]);
    let min_mb = min_budget_mb(&model, &["-c", "1024"]).to_string();
    let out = dir.path().join("ab.json");
    let limit_mbps = 40.0;
    let args = [
        "ab",
        "-m",
        model.to_str().unwrap(),
        "--budget-mb",
        &min_mb,
        "-n",
        "16",
        "-c",
        "1024",
        "--configs",
        "epm",
        "--disk-limit-mbps",
        "40",
        "--out",
        out.to_str().unwrap(),
    ];
    let o = epm(&args);
    let blkio = std::path::Path::new("/sys/fs/cgroup/blkio/cgroup.procs").exists();
    let on_disk = epm_sys::proc::disk_device(&model).is_some();
    if !blkio || !on_disk {
        // This machine cannot throttle these reads: refused as bad input, saying why.
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(
            err.contains("cannot throttle") || err.contains("not on a block device"),
            "{err}"
        );
        return;
    }
    ok(&o);
    let report = json(&out);
    assert_eq!(report["all_passed"], true, "{report}");
    assert_eq!(report["disk_limit_mbps"], 40);
    let child = &report["rows"][0]["child"];
    let read = child["read_bytes"].as_f64().unwrap();
    let wall = child["wall_s"].as_f64().unwrap();
    // The whole run, load included, read at most the limit (a little slack for the
    // throttle's accounting granularity).
    assert!(read > 50e6, "the cold run read only {read} bytes");
    assert!(
        read / wall <= limit_mbps * 1e6 * 1.15,
        "{} MB/s over a 40 MB/s limit",
        read / wall / 1e6
    );
    let left: Vec<_> = std::fs::read_dir("/sys/fs/cgroup/blkio")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("epm-"))
        .collect();
    assert!(left.is_empty(), "blkio cgroups left behind: {left:?}");
}

#[test]
fn a_child_over_the_cap_is_killed_and_reported_as_oom() {
    let _serial = serial();
    let cap = Cap::new(64 * MIB);
    if cap.kind == CapKind::RlimitSampler {
        eprintln!("note: no writable cgroup; testing the sampler cap");
    }
    let script = "b = bytearray(b'x' * (512 << 20)); print(len(b))";
    let cmd = cap.command(
        Path::new("/usr/bin/env"),
        &["python3".into(), "-c".into(), script.into()],
    );
    let report =
        epm_bench::harness::child::run_child(cmd, Some(&cap), &AtomicBool::new(false)).unwrap();
    let facts = cap.facts();
    assert_eq!(report.signal, Some(9), "the child survived: {report:?}");
    assert!(
        facts.oom_kills > 0 || report.killed_by_sampler,
        "not reported as OOM: {facts:?}"
    );
    assert!(report.stdout.is_empty(), "the allocation completed");
    drop(cap);
    assert!(
        our_cgroups(std::process::id()).is_empty(),
        "cgroup left behind"
    );
}

#[test]
fn interrupted_ab_leaves_no_cgroup_behind() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "tiny", &[]);
    let out = dir.path().join("ab.json");
    let child = Command::new(bin())
        .args([
            "ab",
            "-m",
            model.to_str().unwrap(),
            "--budget-mb",
            "1024",
            "--runs",
            "50",
        ])
        .args(["-n", "400", "-c", "1024", "--out", out.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    // Signal while a capped run is going, so that there is a cgroup to clean up: the
    // reference runs uncapped first, then the kernel configuration inside a cgroup.
    if Cap::hard(MIB << 10).is_some() {
        wait_for("the capped run's cgroup", Duration::from_secs(120), || {
            !our_cgroups(pid).is_empty()
        });
    } else {
        eprintln!("note: no writable cgroup here; interrupting without one to clean up");
    }
    assert!(Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    let result = child.wait_with_output().unwrap();
    assert!(!result.status.success());
    let err = String::from_utf8_lossy(&result.stderr);
    assert!(err.contains("interrupted"), "{err}");
    assert!(
        our_cgroups(pid).is_empty(),
        "cgroups left: {:?}",
        our_cgroups(pid)
    );
    assert!(!out.exists(), "no report is written for an interrupted run");
}

#[test]
fn routing_trace_has_one_record_per_layer_and_ubatch() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "tiny", &[]);
    let trace = dir.path().join("t.bin");
    let trace_arg = trace.to_str().unwrap();
    let extra = ["--ram-budget-mb", "1024", "--trace-file", trace_arg];
    let (_, s) = common::generate(&model, dir.path(), "s", "hello world", "5", &extra);
    // Written past the page cache, which a cgroup limit would charge (read before the
    // parse below brings it in).
    let cached = epm_sys::cache::file_cache_resident_bytes(&trace).unwrap();
    assert_eq!(cached, 0, "the trace left {cached} bytes in the page cache");
    let b = std::fs::read(&trace).unwrap();
    assert_eq!(&b[..8], b"EPMTRC02");
    let t = Trace::parse(&b).unwrap();
    assert_eq!((t.n_expert, t.n_used), (32, 4));
    let records = t.records.len();
    let tokens_layer0: u32 = t
        .records
        .iter()
        .filter(|r| r.layer == 0)
        .map(|r| r.n_tokens)
        .sum();
    // The prompt's ubatches come first, then one decode step per generated token.
    let decode = t
        .records
        .iter()
        .filter(|r| r.phase == Phase::Decode)
        .count();
    assert!(t.records[0].phase == Phase::Prompt && decode > 0);
    assert!(t
        .ubatches()
        .iter()
        .all(|u| u.iter().all(|r| r.phase == u[0].phase)));
    assert_eq!(records as u64, s.hook.calls);
    let (prompt, generated) = (s.tokens.prompt, s.tokens.generated);
    // Every prompt token, then each generated token but the last (its logits end the run).
    assert_eq!(u64::from(tokens_layer0), prompt + generated - 1);
}
