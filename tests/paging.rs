//! End to end: paged runs are bit-identical to unpaged ones, stay within their budget,
//! and never populate the model at load.

mod common;

use common::*;
use std::path::Path;
use std::time::Duration;

const PROMPT: &str = "The quick brown fox jumps over the lazy dog, and the pager reads each expert";

fn generate(model: &Path, dir: &Path, tag: &str, mode: &[&str], n: &str) -> (Vec<u8>, Snapshot) {
    common::generate(model, dir, tag, PROMPT, n, mode)
}

/// A tiny model of 64 experts per layer in `dir`, and its minimum budget at a 1024-token
/// context in MiB: enough experts that the budget keeps only some.
fn tiny_at_its_minimum(dir: &Path) -> (std::path::PathBuf, u64) {
    let model = synth(dir, "tiny", &["--experts", "64"]);
    let min_mb = plan(&model, &["-c", "1024"])["min_budget_bytes"]
        .as_u64()
        .unwrap()
        .div_ceil(MIB);
    (model, min_mb)
}

/// A paged run's promises: nothing of the model cached outside the budget at exit, and
/// its peak RSS within the budget.
fn assert_within_budget(s: &Snapshot) {
    assert_eq!(s.experts.stray_cache_bytes_at_exit, 0);
    assert!(s.memory.peak_rss_bytes <= s.budget_bytes, "{:?}", s.memory);
}

#[test]
fn paged_output_is_bit_identical_at_three_budgets() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "tiny", &["--experts", "64"]);
    let plan = plan(&model, &["-c", "1024"]);
    let min_mb = plan["min_budget_bytes"].as_u64().unwrap().div_ceil(MIB);

    let (ref_logits, ref_stats) = generate(&model, dir.path(), "ref", &["--no-pager"], "48");
    let n_vocab = 1024;
    assert_eq!(
        ref_logits.len(),
        48 * n_vocab * 4,
        "one f32 row per sampled position"
    );
    let ref_ids = ref_stats.tokens.generated_ids.clone();
    // Unpaged, each graph starts ggml's threads, as upstream's does.
    assert_eq!(ref_stats.hook.pool_threads, 0);
    let two_cores = epm_sys::proc::compute_cores() > 1;
    let distinct: std::collections::HashSet<_> = ref_ids.iter().collect();
    assert!(
        distinct.len() * 2 >= ref_ids.len(),
        "greedy output degenerate: {ref_ids:?}"
    );

    for (i, budget) in [min_mb, min_mb + 24, 4096].into_iter().enumerate() {
        let b = budget.to_string();
        let (logits, stats) = generate(
            &model,
            dir.path(),
            &format!("b{budget}"),
            &["--ram-budget-mb", &b],
            "48",
        );
        assert_eq!(
            stats.tokens.generated_ids, ref_ids,
            "tokens differ at {budget} MiB"
        );
        assert!(logits == ref_logits, "logits differ at {budget} MiB");
        // Paged, the same logits come from a pool of the run's two compute threads kept
        // across the graph's splits.
        assert_eq!(stats.hook.pool_threads, 2, "{budget} MiB");
        if i < 2 {
            assert!(
                stats.experts.evictions > 0,
                "expected evictions at {budget} MiB, stats: {stats:?}"
            );
            if two_cores {
                assert_steps_timed_both_ways(&stats.io);
            }
        }
        assert!(stats.memory.peak_rss_bytes <= budget * MIB);
        assert!(!stats.hook.panicked);
    }

    // Every step shared, as asked: the same logits.
    if two_cores {
        let b = min_mb.to_string();
        let (logits, stats) = generate(
            &model,
            dir.path(),
            "always",
            &["--ram-budget-mb", &b, "--assist-thread"],
            "48",
        );
        assert!(logits == ref_logits, "logits differ with every step shared");
        assert!(stats.io.assist_steps_shared > 0, "{:?}", stats.io);
        assert_eq!(stats.io.assist_steps_alone, 0);
    }
}

/// With a second core the hook times its steps shared and alone from the start, as many
/// of each until both have their warm-up (`epm_core::assist`, invariant 2).
fn assert_steps_timed_both_ways(io: &epm_core::stats::IoSection) {
    let (shared, alone) = (io.assist_steps_shared, io.assist_steps_alone);
    assert!(shared + alone >= 2, "no step of two calls: {io:?}");
    let warmup = u64::from(epm_core::assist::WARMUP_STEPS);
    assert!(
        shared.min(alone) >= warmup.min((shared + alone) / 2),
        "shared {shared}, alone {alone}"
    );
}

#[test]
fn minimum_budget_holds_under_a_hard_cap() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "tiny", &["--experts", "64"]);
    let plan = plan(&model, &["-c", "1024"]);
    let budget = plan["min_budget_bytes"].as_u64().unwrap().div_ceil(MIB) * MIB;
    let stats_path = dir.path().join("min.json");
    let mut args = generate_args(&model, PROMPT, "32", &stats_path);
    args.extend(["--ram-budget-mb".to_string(), (budget / MIB).to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let cap = Cap::hard(budget);
    let out = match &cap {
        Some(cap) => cap
            .command(Path::new(bin()), &strings(&args))
            .output()
            .unwrap(),
        None => {
            eprintln!("note: no writable cgroup memory controller; checking RSS only");
            epm(&args)
        }
    };
    ok(&out);
    let stats = stats(&stats_path);
    let peak = stats.memory.peak_rss_bytes;
    assert!(peak <= budget, "peak RSS {peak} over budget {budget}");
    assert!(stats.experts.evictions > 0);
    assert_eq!(stats.memory.swap_bytes, 0);
    if let Some(cap) = &cap {
        let facts = cap.facts();
        assert_eq!(facts.oom_kills, 0, "OOM kill under the cap");
        assert!(facts.max_usage_bytes.unwrap() <= budget);
        check_kernel_memory_under_the_cap(&stats, cap, budget);
    }
    // The model's page cache holds no more than the expert budget plus non-expert bytes.
    // Prediction is on by default where the kernel shows reads in flight, and its wrong
    // guesses, evicted while still being read, are dropped again.
    if epm_sys::cache::file_sees_reads_in_flight(&model) {
        assert!(stats.prefetch.decode.issued > 0);
        assert_eq!(stats.experts.stray_cache_bytes_at_exit, 0);
    }
    let cached = epm_sys::cache::file_cache_resident_bytes(&model).unwrap();
    let expert_budget = stats.expert_budget_bytes;
    let non_expert = plan["non_expert_bytes"].as_u64().unwrap();
    assert!(
        cached <= expert_budget + non_expert,
        "page cache {cached} > expert budget {expert_budget} + non-expert {non_expert}"
    );
}

/// The run found the cap's cgroup (a child of the hierarchy's root, which has no limit)
/// from `/proc/self/cgroup`, read the kernel memory charged to it, and, with the limit
/// equal to the budget, gave all of it up from the expert cache.
fn check_kernel_memory_under_the_cap(stats: &Snapshot, cap: &Cap, budget: u64) {
    let m = &stats.memory;
    assert_eq!(
        m.cgroup_limit_bytes, budget,
        "the binding limit is the cap's"
    );
    // v2 says `kernel` in `memory.stat` from kernel 5.18 on; v1 always counts it.
    if cap.kind == CapKind::CgroupV1 {
        assert!(
            m.cgroup_kernel_peak_bytes > 0,
            "no kernel memory read: {m:?}"
        );
    }
    assert_eq!(
        m.cgroup_deduction_peak_bytes, m.cgroup_kernel_peak_bytes,
        "a limit equal to the budget leaves no room for kernel memory"
    );
    // v1 keeps the kernel counter's peak; v2 only its present value, which the run's end
    // has lowered.
    let kernel_max =
        std::fs::read_to_string(cap.dir().unwrap().join("memory.kmem.max_usage_in_bytes"));
    if let Some(kernel_max) = kernel_max.ok().and_then(|t| t.trim().parse::<u64>().ok()) {
        assert!(
            m.cgroup_kernel_peak_bytes <= kernel_max,
            "read {} of kernel memory, the cgroup's peak is {kernel_max}",
            m.cgroup_kernel_peak_bytes
        );
    }
}

/// Without `--ram-budget-mb`, the budget is 80% of the limit of the cgroup the run is in,
/// when that is below available memory.
#[test]
fn the_default_budget_follows_the_cgroup_limit_that_binds() {
    let _serial = serial();
    let Some(cap) = Cap::hard(768 * MIB) else {
        eprintln!("note: no writable cgroup memory controller; nothing to check");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "tiny", &["--experts", "64"]);
    let stats_path = dir.path().join("default.json");
    let args = generate_args(&model, PROMPT, "4", &stats_path);
    let out = cap.command(Path::new(bin()), &args).output().unwrap();
    ok(&out);
    let stats = stats(&stats_path);
    let available = epm_sys::proc::meminfo("MemAvailable").unwrap();
    assert!(
        available > 768 * MIB,
        "this test needs more than 768 MiB available"
    );
    assert_eq!(stats.budget_bytes, 768 * MIB / 5 * 4);
    assert_eq!(stats.memory.cgroup_limit_bytes, 768 * MIB);
    assert!(stats.memory.peak_rss_bytes <= stats.budget_bytes);
}

#[test]
fn expert_ranges_are_not_populated_at_load() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "tiny", &[]);
    let size = std::fs::metadata(&model).unwrap().len();
    let (_, paged) = generate(
        &model,
        dir.path(),
        "paged",
        &["--ram-budget-mb", "2048"],
        "1",
    );
    let after_load = paged.memory.model_mapping_rss_after_load_bytes;
    assert!(
        after_load < size / 20,
        "{after_load} of {size} bytes mapped right after load"
    );
    // The same figure for upstream's MAP_POPULATE shows the check can fail.
    let (_, upstream) = generate(&model, dir.path(), "upstream", &["--upstream-mmap"], "1");
    let populated = upstream.memory.model_mapping_rss_after_load_bytes;
    assert!(
        populated > size / 10 * 9,
        "upstream mapped only {populated} of {size}"
    );
}

#[test]
fn dense_model_runs_unpaged_with_a_notice() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "tiny-dense", &[]);
    let out = epm(&[
        "generate",
        "-m",
        model.to_str().unwrap(),
        "-p",
        PROMPT,
        "-n",
        "8",
        "--ram-budget-mb",
        "512",
    ]);
    ok(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no routed experts"), "stderr: {err}");
}

#[test]
fn populate_prefetch_is_bit_identical_too() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "tiny", &["--experts", "64"]);
    let plan = plan(&model, &["-c", "1024"]);
    let min_mb = plan["min_budget_bytes"]
        .as_u64()
        .unwrap()
        .div_ceil(MIB)
        .to_string();
    let (ref_logits, ref_stats) = generate(&model, dir.path(), "ref", &["--no-pager"], "32");
    let (logits, stats) = generate(
        &model,
        dir.path(),
        "populate",
        &[
            "--ram-budget-mb",
            &min_mb,
            "--prefetch",
            "populate",
            "--io-threads",
            "3",
        ],
        "32",
    );
    assert_eq!(stats.tokens.generated_ids, ref_stats.tokens.generated_ids);
    assert!(
        logits == ref_logits,
        "logits differ with --prefetch populate"
    );
    assert!(stats.experts.evictions > 0);
    assert!(
        stats.memory.peak_rss_bytes
            <= plan["min_budget_bytes"].as_u64().unwrap().div_ceil(MIB) * MIB
    );
}

#[test]
fn cross_layer_prediction_is_bit_identical_and_stays_within_budget() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "tiny", &["--experts", "64"]);
    let plan = plan(&model, &["-c", "1024"]);
    let budget_mb = plan["min_budget_bytes"].as_u64().unwrap().div_ceil(MIB);
    let (ref_logits, ref_stats) = generate(&model, dir.path(), "ref", &["--no-pager"], "48");
    let budget = budget_mb.to_string();
    let mut accuracy_by_depth = Vec::new();
    let mut issued_bytes = Vec::new();
    let mut per_token = Vec::new();
    let mut predicted = Vec::new();
    let mut rank_accuracy = Vec::new();
    // Depth 1 and 3 with the guesses advised by the hook, depth 1 again with them on the
    // readahead thread, depth 1 predicting in prefill too, depth 1 reading every expert
    // each guess names (not only its best-scored three quarters), and depth 1 reading the
    // ranks measured right often enough.
    for (depth, thread, prefill, reads) in [
        ("1", false, "0", "confident"),
        ("3", false, "0", "confident"),
        ("1", true, "0", "confident"),
        ("1", false, "16", "confident"),
        ("1", false, "0", "all"),
        ("1", false, "0", "measured"),
    ] {
        let mut args = vec![
            "--ram-budget-mb",
            &budget,
            "--predict",
            "--predict-depth",
            depth,
            "--prefill-predict-tokens",
            prefill,
            "--predict-reads",
            reads,
        ];
        if thread {
            args.push("--ahead-thread");
        }
        let (logits, stats) = generate(
            &model,
            dir.path(),
            &format!("predict{depth}{thread}{prefill}{reads}"),
            &args,
            "48",
        );
        per_token.push(stats.prediction.experts_per_token);
        predicted.push(stats.prediction.decode.predicted);
        rank_accuracy.push(stats.prediction.rank_accuracy.clone());
        let (pre, dec) = (&stats.prefetch.prompt, &stats.prefetch.decode);
        issued_bytes.push(pre.issued_bytes + dec.issued_bytes);
        // Decode's own speculative bytes: all of them without prefill prediction, a part
        // with it.
        if prefill == "0" {
            assert_eq!(pre.issued_bytes, 0);
        } else {
            assert!(pre.issued_bytes > 0 && dec.issued_bytes > 0);
        }
        assert_eq!(
            stats.tokens.generated_ids, ref_stats.tokens.generated_ids,
            "tokens differ at depth {depth}"
        );
        assert!(
            logits == ref_logits,
            "logits differ with --predict-depth {depth} --predict-reads {reads}"
        );
        let issued = pre.issued + dec.issued;
        assert!(issued > 0, "no speculative reads: {:?}", stats.prefetch);
        assert!(pre.useful + dec.useful <= issued);
        // Selections resident only because a guess read them in are prefetch hits, not
        // cache hits; every decode selection is one of the three.
        let d = &stats.experts.decode;
        assert!(d.prefetch_hits > 0, "{d:?}");
        assert_eq!(d.cache_hits + d.prefetch_hits + d.misses, d.selected);
        let ahead_reads = stats.io.ahead_reads;
        let ahead_cancelled = stats.io.ahead_cancelled;
        if thread {
            assert!(ahead_reads > 0, "no reads on the readahead thread");
            let ranges = issued * 3; // gate, up and down of each guessed expert
            assert!(
                ahead_reads + ahead_cancelled <= ranges,
                "{ahead_reads} + {ahead_cancelled} thread reads for {ranges} ranges"
            );
        } else {
            assert_eq!(ahead_reads, 0);
        }
        // Coverage: the share of decode selections that had been predicted.
        let coverage = stats.prediction.decode.coverage;
        accuracy_by_depth.push(coverage);
        assert!(coverage > 0.0 && coverage <= 1.0, "coverage {coverage}");
        let acc = stats.prediction.decode.accuracy;
        assert!(acc > 0.0 && acc <= 1.0, "accuracy {acc}");
        assert_eq!(stats.prediction.per_layer.len(), 4);
        // Speculative reads count against the budget: total RSS stays under it.
        assert!(stats.memory.peak_rss_bytes <= budget_mb * MIB);
        // The pager holds its budget plus what the token table still lends, at most all
        // of the table's pages (lent and taken).
        let m = &stats.memory;
        let table_pages = m.token_table_lent_bytes + m.token_table_taken_bytes;
        assert!(stats.experts.resident_peak_bytes <= stats.expert_budget_bytes + table_pages);
        // Wrong guesses leave no pages behind in the page cache.
        if epm_sys::cache::file_sees_reads_in_flight(&model) {
            assert_eq!(stats.experts.stray_cache_bytes_at_exit, 0);
        }
        // The hook's own time and the advisor's system calls are measured.
        assert!(stats.hook.decode_busy_us > 0);
        assert!(stats.hook.busy_us >= stats.hook.decode_busy_us);
        assert!(stats.io.will_need_us > 0);
        assert!(stats.io.willneed_chunk_bytes >= 4096);
    }
    // Depth 3 predicts each layer from the same hidden state as depth 1 and from earlier
    // ones too: its predicted sets are supersets, so it covers at least as many selections.
    assert!(
        accuracy_by_depth[1] >= accuracy_by_depth[0],
        "accuracy by depth: {accuracy_by_depth:?}"
    );
    // Where the guesses are advised changes what is resident when, never what is guessed.
    assert_eq!(accuracy_by_depth[2], accuracy_by_depth[0]);
    // `all` reads every expert a guess names, `confident` (the default) the best-scored
    // three quarters of them, rounded up: a subset of each token's guess.
    let n_used = per_token[4];
    assert!(n_used >= 4, "tiny routes {n_used} experts per token");
    assert_eq!(per_token[0], (3 * n_used).div_ceil(4), "{per_token:?}");
    assert!(per_token[..4].iter().all(|&n| n == per_token[0]));
    assert!(
        predicted[4] > predicted[0] && accuracy_by_depth[4] >= accuracy_by_depth[0],
        "decode guesses {predicted:?}, coverage {accuracy_by_depth:?}"
    );
    // `measured` scores every rank of each decode guess and reads the best ranks up to
    // the first right less than 4 times in 5 (47 decode steps of 3 predicted layers: past
    // the 64 scores a rank needs, and short of the window that would fade them, so the
    // run's own shares decide). The other ways score nothing.
    assert!(
        rank_accuracy[..5].iter().all(Vec::is_empty),
        "{rank_accuracy:?}"
    );
    let ranks = &rank_accuracy[5];
    assert_eq!(ranks.len() as u64, n_used, "{ranks:?}");
    assert!(ranks.iter().all(|a| (0.0..=1.0).contains(a)), "{ranks:?}");
    let worth = ranks.iter().take_while(|&&a| a >= 0.8).count() as u64;
    assert_eq!(per_token[5], worth, "ranks {ranks:?}");
    assert!(
        ranks[0] >= ranks[ranks.len() - 1],
        "the best-scored guesses are right at least as often as the last: {ranks:?}"
    );
    // Prefill guesses come on top of the decode ones.
    assert!(
        issued_bytes[3] > issued_bytes[0],
        "speculative bytes without and with prefill prediction: {issued_bytes:?}"
    );
}

/// `-t auto` decodes on as many threads as an unpaged run at every budget. llama.cpp's
/// decode at a long context depends on its thread count (the attention's work is split
/// across threads), so a paged decode on fewer threads than upstream's, as `auto` once
/// chose below a third of the experts, gave other logits than upstream's default run.
#[test]
fn auto_threads_decode_as_an_unpaged_run_does_below_a_third_of_the_experts() {
    let _serial = serial();
    if epm_sys::proc::compute_cores() < 2 {
        eprintln!("skipped: one core, where `-t auto` is one thread");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (model, min_mb) = tiny_at_its_minimum(dir.path());
    let budget = min_mb.to_string();
    // `common::generate`'s context, 1024, and the minimum budget's ubatch.
    let ubatch = ["-ub", "128"];
    let at_budget = plan(
        &model,
        &[&["-c", "1024"], &ubatch[..], &["--ram-budget-mb", &budget]].concat(),
    );
    let (cache, experts) = (
        at_budget["expert_budget_bytes"].as_u64().unwrap(),
        at_budget["expert_bytes"].as_u64().unwrap(),
    );
    assert!(cache * 3 < experts, "{cache} of {experts} expert bytes");
    // A context long enough that the thread count shows in decode's logits.
    let prompt = "The quick brown fox jumps over the lazy dog, and the reader should know that \
                  routing changes from token to token. "
        .repeat(14);
    let run = |tag: &str, extra: &[&str]| {
        common::generate(
            &model,
            dir.path(),
            tag,
            &prompt,
            "4",
            &[&ubatch[..], extra].concat(),
        )
    };
    let (reference, ref_stats) = run("ref", &["--no-pager", "-t", "auto"]);
    assert!(ref_stats.tokens.prompt > 600, "{:?}", ref_stats.tokens);
    let (one_thread, _) = run("one", &["--no-pager", "-t", "1"]);
    assert!(
        one_thread != reference,
        "this context is too short for the thread count to change decode's logits"
    );
    let (paged, stats) = run("paged", &["--ram-budget-mb", &budget, "-t", "auto"]);
    assert_eq!(stats.tokens.generated_ids, ref_stats.tokens.generated_ids);
    assert!(paged == reference, "paged -t auto decoded other logits");
    assert!(stats.experts.evictions > 0, "{:?}", stats.experts);
    assert_within_budget(&stats);
}

/// `-ub auto` picks the largest ubatch the context allows (1024 at `-c 1024`) when every
/// expert fits and 128 at the plan's minimum, and a paged run with its pick (no larger than
/// the prompt needs) is byte-identical to an unpaged run at the same ubatch.
#[test]
fn auto_ubatch_follows_the_budget_and_stays_bit_identical() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "tiny", &["--experts", "64"]);
    let pick = |mb: &str| {
        plan(
            &model,
            &["-c", "1024", "--ram-budget-mb", mb, "-ub", "auto"],
        )["n_ubatch"]
            .as_u64()
            .unwrap()
    };
    let min_mb = plan(&model, &["-c", "1024"])["min_budget_bytes"]
        .as_u64()
        .unwrap()
        .div_ceil(MIB);
    assert_eq!(pick("4096"), 1024);
    assert_eq!(pick(&min_mb.to_string()), 128);
    // A prompt longer than one small ubatch, so the ubatch size matters.
    let prompt = "The quick brown fox jumps over the lazy dog, and the reader should know that \
                  routing changes from token to token. "
        .repeat(8);
    let (ref_logits, ref_stats) = common::generate(
        &model,
        dir.path(),
        "ref",
        &prompt,
        "8",
        &["--no-pager", "-ub", "512"],
    );
    assert!(ref_stats.tokens.prompt > 256);
    let (logits, stats) = common::generate(
        &model,
        dir.path(),
        "auto",
        &prompt,
        "8",
        &["--ram-budget-mb", "4096", "-ub", "auto"],
    );
    assert_eq!(stats.tokens.generated_ids, ref_stats.tokens.generated_ids);
    assert!(logits == ref_logits, "logits differ with -ub auto");
}

#[test]
fn a_warm_file_that_fits_is_not_reported_as_stray_cache() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "qwen3-30b-a3b-mini", &[]);
    // Read the whole file, as a user's `cat` or a copy would: its pages are cached.
    let bytes = std::fs::read(&model).unwrap();
    assert!(!bytes.is_empty());
    let stats_path = dir.path().join("warm.json");
    let mut args = generate_args(&model, PROMPT, "8", &stats_path);
    // Every expert of the mini fits in 4 GiB: attach keeps the warm pages by design.
    args.extend(strings(&["--ram-budget-mb", "4096"]));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = epm(&refs);
    ok(&out);
    let s = stats(&stats_path);
    assert!(s.pager_enabled);
    assert_eq!(s.experts.evictions, 0);
    assert_eq!(s.experts.stray_cache_bytes_at_exit, 0);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("still in the page cache"), "stderr: {err}");
}

#[test]
fn generate_says_whether_decode_was_disk_bound() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "tiny", &["--experts", "64"]);
    let plan = plan(&model, &["-c", "1024"]);
    let budget_mb = plan["min_budget_bytes"].as_u64().unwrap().div_ceil(MIB);
    let run = |probe_mb_per_s: f64| {
        let probe = dir.path().join("probe.json");
        std::fs::write(
            &probe,
            format!(r#"{{"results": [{{"mb_per_s": {probe_mb_per_s}}}, {{"pattern": "none"}}]}}"#),
        )
        .unwrap();
        epm_sys::cache::drop_file_cache(&model).unwrap();
        let out = epm(&[
            "generate",
            "-m",
            model.to_str().unwrap(),
            "-p",
            PROMPT,
            "-n",
            "24",
            "-c",
            "1024",
            "-v",
            "--ram-budget-mb",
            &budget_mb.to_string(),
            "--disk-probe",
            probe.to_str().unwrap(),
        ]);
        ok(&out);
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // A disk probed at 0.01 MB/s cannot have delivered what decode read in less time than
    // that: reading it is the whole of decode.
    let slow = run(0.01);
    assert!(
        slow.contains("decode is disk-bound") && slow.contains("--ram-budget-mb"),
        "{slow}"
    );
    let fast = run(1e9);
    assert!(fast.contains("decode is not disk-bound"), "{fast}");
    let bad = epm(&[
        "generate",
        "-m",
        model.to_str().unwrap(),
        "-p",
        "x",
        "--disk-probe",
        "/nonexistent.json",
    ]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--disk-probe /nonexistent.json"));
}

/// `probe-paging` reads the asked experts in both ways, maps them, drops them in both ways,
/// and reports per-MiB CPU figures for each; a dense model is refused as bad input.
#[test]
fn probe_paging_measures_both_read_and_drop_paths_and_drops_what_it_read() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "tiny", &[]);
    let out = dir.path().join("cost.json");
    ok(&epm(&[
        "probe-paging",
        "-m",
        model.to_str().unwrap(),
        "--experts",
        "16",
        "--runs",
        "1",
        "--out",
        out.to_str().unwrap(),
    ]));
    let report = json(&out);
    let index =
        epm_core::model::ModelIndex::build(&epm_gguf::GgufModel::open(&model).unwrap()).unwrap();
    let per_expert = index.layers[0].bytes_per_expert();
    let runs = report["runs"].as_array().unwrap();
    let paths: Vec<&str> = runs
        .iter()
        .map(|r| r["read_path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        [
            "will-need",
            "will-need",
            "huge-populate",
            "populate",
            "populate-sequential",
            "buffered-read"
        ]
    );
    let evicts: Vec<&str> = runs
        .iter()
        .map(|r| r["evict_path"].as_str().unwrap())
        .collect();
    assert_eq!(evicts[1], "pageout");
    assert!(
        evicts
            .iter()
            .enumerate()
            .all(|(i, e)| i == 1 || *e == "unmap-then-drop"),
        "{evicts:?}"
    );
    for r in runs {
        assert_eq!(r["ranges"], 16 * 3, "{r}");
        assert_eq!(r["bytes"].as_u64().unwrap(), 16 * per_expert, "{r}");
        for k in [
            "read_cpu_ms_per_mib",
            "map_cpu_ms_per_mib",
            "populate_map_cpu_ms_per_mib",
            "touch_after_populate_cpu_ms_per_mib",
            "evict_cpu_ms_per_mib",
            "read_wall_s",
        ] {
            assert!(r[k].as_f64().is_some_and(|v| v >= 0.0), "{k}: {r}");
        }
        assert!(r["cached_outside_ranges_bytes"].is_u64(), "{r}");
        assert!(
            r["large_folio_bytes"].is_u64() || r["large_folio_bytes"].is_null(),
            "{r}"
        );
    }
    // `MADV_WILLNEED` reads exactly the ranges, into single pages (where frames can be read).
    let page = epm_sys::page_size() as u64;
    assert!(
        runs[0]["cached_outside_ranges_bytes"].as_u64().unwrap() <= 16 * 3 * page,
        "{}",
        runs[0]
    );
    assert!(
        matches!(runs[0]["large_folio_bytes"].as_u64(), None | Some(0)),
        "{}",
        runs[0]
    );
    // Where the kernel made PMD-sized folios for `MADV_HUGEPAGE` (`FileHugePages` grew),
    // the frames say the ranges' pages are in large folios too: two counts that agree.
    let huge = &runs[2];
    if huge["file_huge_pages_bytes"].as_u64().unwrap() > 0 {
        if let Some(large) = huge["large_folio_bytes"].as_u64() {
            assert!(large > 0, "{huge}");
        }
    }
    // With 4 KiB folios the pager's drop leaves at most the two edge pages each range
    // shares with a neighbour. `MADV_PAGEOUT` skips the folios the kernel cannot isolate at
    // that moment (those still in a CPU's batch of pages waiting to join an LRU list, which
    // `POSIX_FADV_DONTNEED` drains first; 5% of them once in this suite): most go.
    if epm_sys::cache::file_sees_reads_in_flight(&model) {
        let left = |r: &serde_json::Value| r["cached_after_evict_bytes"].as_u64().unwrap();
        assert!(
            left(&runs[0]) <= 16 * 3 * 2 * page,
            "{} bytes stayed cached: {}",
            left(&runs[0]),
            runs[0]
        );
        assert!(
            left(&runs[1]) < runs[1]["bytes"].as_u64().unwrap() / 2,
            "{} bytes stayed cached: {}",
            left(&runs[1]),
            runs[1]
        );
    }

    // `--whole-layers`: each of a layer's expert tensors read and dropped whole, one range.
    ok(&epm(&[
        "probe-paging",
        "-m",
        model.to_str().unwrap(),
        "--whole-layers",
        "1",
        "--runs",
        "1",
        "--idle-s",
        "1",
        "--out",
        out.to_str().unwrap(),
    ]));
    let report = json(&out);
    assert_eq!(report["whole_layers"], 1);
    assert_eq!(report["idle_s"], 1);
    let whole: u64 = index.layers[0]
        .tensors
        .iter()
        .map(|t| t.bytes_per_expert * index.n_expert as u64)
        .sum();
    for r in report["runs"].as_array().unwrap() {
        assert_eq!(r["ranges"], index.layers[0].tensors.len(), "{r}");
        assert_eq!(r["bytes"].as_u64().unwrap(), whole, "{r}");
    }
    let bad = epm(&[
        "probe-paging",
        "-m",
        model.to_str().unwrap(),
        "--whole-layers",
        "0",
    ]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--whole-layers must be at least 1"));

    let dense = synth(dir.path(), "tiny-dense", &[]);
    let out = epm(&["probe-paging", "-m", dense.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no routed experts"));
}

/// A run finds the experts an earlier run of the model left in the page cache and keeps
/// them as resident (within its budget) rather than reading them again; outputs do not
/// change, and nothing else of the model stays cached. `--no-warm-start` drops them.
#[test]
fn experts_an_earlier_run_left_in_the_page_cache_are_kept_not_read_again() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let (model, min_mb) = tiny_at_its_minimum(dir.path());
    let b = (min_mb + 24).to_string();
    let (ref_logits, _) = generate(&model, dir.path(), "ref", &["--no-pager"], "24");
    // Cold by request: the file's pages from synth and the reference run are dropped.
    let cold_flags = ["--ram-budget-mb", b.as_str(), "--no-warm-start"];
    let (logits, cold) = generate(&model, dir.path(), "cold", &cold_flags, "24");
    assert!(logits == ref_logits);
    assert_eq!(cold.experts.warm_start.adopted, 0);
    assert!(cold.experts.prompt.misses > 0);

    // The next run keeps what the cold one left resident.
    let (logits, kept) = generate(&model, dir.path(), "kept", &["--ram-budget-mb", &b], "24");
    assert!(logits == ref_logits, "logits differ with adopted experts");
    let w = &kept.experts.warm_start;
    assert!(w.adopted > 0 && w.hits > 0 && w.hits <= w.adopted, "{w:?}");
    assert_eq!(w.experts, 0, "nothing read by a warm start");
    assert!(
        kept.experts.prompt.misses < cold.experts.prompt.misses,
        "{:?} against {:?}",
        kept.experts.prompt,
        cold.experts.prompt
    );
    assert_eq!(kept.experts.stray_cache_bytes_at_exit, 0);
    assert!(kept.memory.peak_rss_bytes <= (min_mb + 24) * MIB);

    // The whole file cached (a copy, `cat`): as many as the budget holds, the rest dropped.
    assert!(!std::fs::read(&model).unwrap().is_empty());
    let min = min_mb.to_string();
    let (logits, full) = generate(&model, dir.path(), "full", &["--ram-budget-mb", &min], "24");
    assert!(logits == ref_logits);
    let w = &full.experts.warm_start;
    // The pager's budget at start: the expert budget and the token table's loan.
    let m = &full.memory;
    let lent = m.token_table_lent_bytes + m.token_table_taken_bytes;
    assert!(w.adopted > 0, "{w:?}");
    assert!(
        w.adopted_bytes <= full.expert_budget_bytes + lent,
        "{w:?} {m:?}"
    );
    assert_eq!(full.experts.stray_cache_bytes_at_exit, 0);
    assert!(full.memory.peak_rss_bytes <= min_mb * MIB);

    // Cold again: nothing adopted though the last run left its experts.
    let (_, cold) = generate(&model, dir.path(), "cold2", &cold_flags, "24");
    assert_eq!(cold.experts.warm_start.adopted, 0);

    // A file just written 16 KiB at a time and not synced, as a download tool may leave it:
    // its pages are dirty (the kernel drops them only once written back), and ext4 caches it
    // in 16 KiB folios, which straddle neighbouring experts and are dropped only whole. The
    // run waits for the write-back, and the folios at each kept expert's ends are split
    // into single pages, so that each kept expert can be evicted alone: kept, with nothing
    // read again and nothing left cached outside the budget.
    let written = dir.path().join("written.gguf");
    {
        use std::io::Write;
        let bytes = std::fs::read(&model).unwrap();
        let mut f = std::fs::File::create(&written).unwrap();
        for chunk in bytes.chunks(16 << 10) {
            f.write_all(chunk).unwrap();
        }
    }
    // A run of the copy at the minimum budget: the reference's logits, the cached experts
    // kept with nothing read again, evictions, and no stray cache at exit.
    let kept_as_cached = |tag: &str| {
        let (logits, s) = generate(&written, dir.path(), tag, &["--ram-budget-mb", &min], "24");
        assert!(logits == ref_logits, "{tag}: logits differ");
        let w = &s.experts.warm_start;
        assert!(w.adopted > 0 && w.hits > 0, "{tag}: {w:?}");
        assert_eq!(w.adopted_reread_bytes, 0, "{tag}: {w:?}");
        assert!(s.experts.evictions > 0, "{tag}");
        assert_eq!(s.experts.stray_cache_bytes_at_exit, 0, "{tag}");
        assert!(s.memory.peak_rss_bytes <= min_mb * MIB, "{tag}");
    };
    kept_as_cached("written");

    // The same file read whole from the disk, as `cat` or a checksum reads a download:
    // readahead caches it in folios of up to 2 MiB, each holding several experts' slices.
    // Split likewise: kept, nothing read again, nothing left cached outside the budget.
    read_whole(&written);
    kept_as_cached("read");
}

/// `generate` keeps the expert heat as a server does: a run adds its selections to the
/// model's heat file, and where more of the model is cached at start than the budget holds
/// (read whole, as `cat` or a checksum leaves it), the experts kept are those past runs
/// selected most, so the prompt finds more of them than when they are kept by number.
/// Outputs do not change; `--no-warm-start` neither reads nor writes the file.
#[test]
fn generate_keeps_first_the_cached_experts_past_runs_selected_most() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let (model, min_mb) = tiny_at_its_minimum(dir.path());
    let min = min_mb.to_string();
    let heat = dir.path().join("heat");
    let none = dir.path().join("no-heat");
    let with = |d: &Path| {
        [
            "--ram-budget-mb".to_string(),
            min.clone(),
            "--heat-dir".to_string(),
            d.to_str().unwrap().to_string(),
        ]
    };
    let run = |tag: &str, flags: &[String]| {
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        generate(&model, dir.path(), tag, &flags, "24")
    };
    let (ref_logits, _) = generate(&model, dir.path(), "ref", &["--no-pager"], "24");

    // Cold by request: no heat read or written.
    let mut cold_flags = with(&heat).to_vec();
    cold_flags.push("--no-warm-start".into());
    let (logits, _) = run("cold", &cold_flags);
    assert!(logits == ref_logits);
    assert!(heat_files(&heat).is_empty(), "{:?}", heat_files(&heat));

    // Two runs leave the heat of their selections.
    for tag in ["seed1", "seed2"] {
        let (logits, _) = run(tag, &with(&heat));
        assert!(logits == ref_logits, "{tag}: logits differ");
    }
    let files = heat_files(&heat);
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(std::fs::read(&files[0]).unwrap().starts_with(b"EPMHEAT\0"));

    // The model read whole: kept by number (no heat yet in that folder), then by heat.
    read_whole(&model);
    let (logits, by_number) = run("by-number", &with(&none));
    assert!(logits == ref_logits);
    read_whole(&model);
    let (logits, by_heat) = run("by-heat", &with(&heat));
    assert!(logits == ref_logits);
    let (n, h) = (&by_number.experts.warm_start, &by_heat.experts.warm_start);
    assert!(n.adopted > 0 && h.adopted > 0, "{n:?} {h:?}");
    assert!(
        h.hits > n.hits,
        "kept by heat: {h:?}; kept by number: {n:?}"
    );
    assert!(
        by_heat.experts.prompt.misses < by_number.experts.prompt.misses,
        "{:?} against {:?}",
        by_heat.experts.prompt,
        by_number.experts.prompt
    );
    assert_within_budget(&by_number);
    assert_within_budget(&by_heat);
    // The folder without heat got its first file.
    assert_eq!(heat_files(&none).len(), 1);
}

/// `generate --chat` warms its expert cache while the user types, as a server does between
/// requests: with the model's heat from an earlier run and a page cache that lost the
/// model, the experts past runs selected most are read in before the first line arrives,
/// and the first turn finds them resident. The reply is the cold chat's; nothing stays
/// cached outside the budget.
#[test]
fn generate_chat_warms_the_expert_cache_while_the_user_types() {
    use std::io::Write;
    use std::process::Command;
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let (model, min_mb) = tiny_at_its_minimum(dir.path());
    let min = min_mb.to_string();
    let heat = dir.path().join("heat");
    let stats_path = dir.path().join("chat.json");
    let line = "Name three rivers of Europe.";
    // An earlier run leaves the heat.
    let seed = ["--ram-budget-mb", min.as_str(), "--heat-dir"];
    let mut seed = seed.to_vec();
    seed.push(heat.to_str().unwrap());
    generate(&model, dir.path(), "seed", &seed, "16");
    // A chat after the page cache lost the model (`warm` reads the heat; `cold` does not).
    let chat = |warm: bool| -> (String, Snapshot) {
        epm_sys::cache::drop_file_cache(&model).unwrap();
        let mut flags = vec!["--stats-file", stats_path.to_str().unwrap()];
        flags.extend(if warm {
            vec!["--heat-dir", heat.to_str().unwrap()]
        } else {
            vec!["--no-warm-start"]
        });
        // Started once the model is loaded and the chat waits for a line.
        let mut child = start_chat(&model, &min, &flags);
        if warm {
            // The stats on SIGUSR2: the warm start under way before anything was typed.
            let pid = child.id().to_string();
            wait_for("the warm start", Duration::from_secs(30), || {
                let _ = std::fs::remove_file(&stats_path);
                let sent = Command::new("kill").args(["-USR2", &pid]).status();
                assert!(sent.unwrap().success());
                wait_for("the stats", Duration::from_secs(10), || stats_path.exists());
                stats(&stats_path).experts.warm_start.experts > 0
            });
        }
        let mut stdin = child.stdin.take().unwrap();
        writeln!(stdin, "{line}").unwrap();
        drop(stdin);
        let out = ok(&child.wait_with_output().unwrap());
        (out, stats(&stats_path))
    };
    let (cold_out, cold) = chat(false);
    assert_eq!(cold.experts.warm_start.experts, 0);
    let (warm_out, warm) = chat(true);
    assert_eq!(warm_out, cold_out, "the same reply");
    let w = &warm.experts.warm_start;
    assert!(w.experts > 0 && w.hits > 0 && w.hits <= w.experts, "{w:?}");
    assert!(
        warm.experts.prompt.misses < cold.experts.prompt.misses,
        "{:?} against {:?}",
        warm.experts.prompt,
        cold.experts.prompt
    );
    assert_within_budget(&cold);
    assert_within_budget(&warm);
}

/// The heat at `path` of `model`, decoded with the model's own MoE layers and experts.
fn heat_in(path: &Path, model: &Path) -> epm_core::heat::ExpertHeat {
    let index =
        epm_core::model::ModelIndex::build(&epm_gguf::GgufModel::open(model).unwrap()).unwrap();
    let layers: Vec<u32> = index.layers.iter().map(|l| l.layer).collect();
    epm_core::heat::ExpertHeat::decode(&std::fs::read(path).unwrap(), &layers, index.n_expert)
        .unwrap()
}

/// `generate --chat` on `model` at `budget_mb` with `extra` flags, once it asks for its
/// first line (stdin, stdout and stderr piped).
fn start_chat(model: &Path, budget_mb: &str, extra: &[&str]) -> std::process::Child {
    use std::io::Read;
    use std::process::{Command, Stdio};
    let mut child = Command::new(bin())
        .args(["generate", "--chat", "-m", model.to_str().unwrap()])
        .args([
            "-n",
            "8",
            "-c",
            "1024",
            "-t",
            "2",
            "--ram-budget-mb",
            budget_mb,
        ])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut prompt = [0u8; 2];
    child
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut prompt)
        .unwrap();
    assert_eq!(&prompt, b"> ");
    child
}

/// Two processes of one model at once: a chat saves its heat at its end on top of what a
/// `generate` run saved while the chat was open, rather than over it.
#[test]
fn a_process_saves_its_heat_on_top_of_another_s_saved_meanwhile() {
    use std::io::Write;
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let (model, min_mb) = tiny_at_its_minimum(dir.path());
    let min = min_mb.to_string();
    let heat_dir = dir.path().join("heat");
    let heat_dir_arg = heat_dir.to_str().unwrap();
    let heat_file = || {
        let files = heat_files(&heat_dir);
        assert_eq!(files.len(), 1, "one heat file per model: {files:?}");
        files[0].clone()
    };
    // A chat of one line; `meanwhile` runs once the chat has read the heat.
    let chat = |meanwhile: &dyn Fn()| {
        let mut child = start_chat(&model, &min, &["--temp", "0", "--heat-dir", heat_dir_arg]);
        meanwhile();
        let mut stdin = child.stdin.take().unwrap();
        writeln!(stdin, "Name three rivers of Europe.").unwrap();
        drop(stdin);
        ok(&child.wait_with_output().unwrap());
        heat_in(&heat_file(), &model)
    };
    // The chat alone.
    let alone = chat(&|| {});
    std::fs::remove_file(heat_file()).unwrap();
    // The chat, with a one-shot run of another prompt started and ended while it is open.
    let other = std::cell::RefCell::new(None);
    let together = chat(&|| {
        let args = ["--ram-budget-mb", min.as_str(), "--heat-dir", heat_dir_arg];
        common::generate(
            &model,
            dir.path(),
            "other",
            "A list of prime numbers:",
            "8",
            &args,
        );
        *other.borrow_mut() = Some(heat_in(&heat_file(), &model));
    });
    let other = other.into_inner().unwrap();
    assert!(together != alone, "the other run's heat is kept");
    // Every expert either run made hot is in the heat the chat saved.
    let hot = |h: &epm_core::heat::ExpertHeat| -> std::collections::BTreeSet<(u32, u32)> {
        h.hottest().into_iter().collect()
    };
    let mut both = hot(&alone);
    both.extend(hot(&other));
    assert_eq!(hot(&together), both);
}

/// `--prompt-reads whole-layers` on a model whose layers' expert tensors lie in runs long
/// enough for a read-around (qwen3-30b-a3b's shapes, 4 layers: 348 MiB of experts a layer),
/// at the plan's minimum budget, which holds about two layers' experts (with the token
/// table's loan) of the three a prompt routes in full (llama.cpp keeps only the output rows
/// in the last): the logits of an unpaged run at the same ubatch, within the budget, layers
/// read whole and evicted again, and none of the pages the read-around brings in, nor any
/// left by the folios its drops split, cached outside the pager's count at exit.
#[test]
fn whole_layer_prompt_reads_are_bit_identical_and_leave_no_stray_cache() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "qwen3-30b-a3b", &["--layers", "4"]);
    // About 800 tokens in two ubatches of 512: each misses most of a layer's experts.
    let prompt = PROMPT.repeat(20);
    let run = |tag: &str, flags: &[&str]| {
        // Every run reads the experts from the disk: none adopted from the page cache.
        epm_sys::cache::drop_file_cache(&model).unwrap();
        let mut flags = flags.to_vec();
        flags.extend(["-ub", "512"]);
        common::generate(&model, dir.path(), tag, &prompt, "8", &flags)
    };
    let (ref_logits, ref_stats) = run("ref", &["--no-pager"]);
    let budget = min_budget_mb(&model, &["-c", "1024", "-ub", "512"]).to_string();
    let read_around = epm_sys::proc::read_ahead_kb(&model).is_some();
    for (tag, extra) in [
        ("whole", &[][..]),
        ("whole-no-predict", &["--no-predict"][..]),
    ] {
        let mut flags = vec!["--ram-budget-mb", &budget, "--prompt-reads", "whole-layers"];
        flags.extend_from_slice(extra);
        let (logits, stats) = run(tag, &flags);
        assert_eq!(stats.tokens.generated_ids, ref_stats.tokens.generated_ids);
        assert!(logits == ref_logits, "{tag}: logits differ");
        assert_within_budget(&stats);
        assert!(
            stats.experts.evictions > 0,
            "{tag}: nothing evicted at {budget} MiB"
        );
        assert_eq!(stats.experts.stray_cache_bytes_at_exit, 0, "{tag}");
        if read_around {
            // The three layers a prompt routes in full, at least once each over the
            // two ubatches: at their routing, or ahead of it on the guesses made while
            // the layer before computes.
            assert!(
                stats.experts.whole_layer_reads >= 3,
                "{tag}: {:?}",
                stats.experts
            );
            assert!(stats.experts.whole_layer_unselected_bytes > 0);
            assert!(stats.io.whole_read_us > 0);
        } else {
            eprintln!("note: no readahead window here (not a block device): layers read by expert");
            assert_eq!(stats.experts.whole_layer_reads, 0);
        }
    }
}

/// `--prompt-reads whole-layers` on a model whose expert tensors are too short for the
/// read-around (the qwen3 mini's: a few MiB a layer): the run says so, reads by expert,
/// and gives the default's logits.
#[test]
fn whole_layer_reads_on_short_tensors_say_so_and_read_by_expert() {
    let dir = tempfile::tempdir().unwrap();
    let model = synth(dir.path(), "qwen3-30b-a3b-mini", &[]);
    let budget = (min_budget_mb(&model, &["-c", "1024"]) + 8).to_string();
    let stats = dir.path().join("whole.json");
    let mut args = generate_args(&model, PROMPT, "4", &stats);
    args.extend(["--ram-budget-mb", &budget, "--prompt-reads", "whole-layers"].map(String::from));
    let out = epm(&args.iter().map(String::as_str).collect::<Vec<_>>());
    ok(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let said = if epm_sys::proc::read_ahead_kb(&model).is_some() {
        "so every layer is read by expert"
    } else {
        "its layers are read by expert"
    };
    assert!(stderr.contains(said), "{stderr}");
    let whole = common::stats(&stats);
    assert_eq!(whole.experts.whole_layer_reads, 0);
    let (_, default) = generate(
        &model,
        dir.path(),
        "default",
        &["--ram-budget-mb", &budget],
        "4",
    );
    assert_eq!(whole.tokens.generated_ids, default.tokens.generated_ids);
}
