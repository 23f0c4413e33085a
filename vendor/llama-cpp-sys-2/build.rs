//! Builds llama.cpp's CPU backend with the `cc` crate: no cmake, no libclang.
//!
//! EPM's patch replaces upstream's CMake-and-bindgen build script. It compiles the same
//! sources with the same definitions and optimization flags as upstream's CMake build did
//! for EPM (RelWithDebInfo, CPU backend only, `GGML_LLAMAFILE` on, OpenMP and
//! `GGML_CPU_REPACK` off, `-march=native` when `target-cpu=native`), and takes the Rust
//! bindings from `src/bindings/`, generated ahead of time by EPM's `tools/gen-bindings.sh`
//! (which checks that x86_64 and aarch64 Linux yield the same file). The `common`
//! wrapper is not built: llama-cpp-2's `common` feature must stay off.

use std::env;
use std::path::{Path, PathBuf};

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let out = PathBuf::from(env::var("OUT_DIR").expect("set by cargo"));
    let target = env::var("TARGET").expect("set by cargo");
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let llama = manifest.join("llama.cpp");
    let ggml = llama.join("ggml/src");

    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/bindings");
    println!("cargo:rerun-if-changed=llama.cpp/src");
    println!("cargo:rerun-if-changed=llama.cpp/ggml");
    println!("cargo:rerun-if-changed=llama.cpp/include");
    for var in ["GGML_CPU_REPACK", "CARGO_ENCODED_RUSTFLAGS", "CC", "CXX"] {
        println!("cargo:rerun-if-env-changed={var}");
    }

    for feature in ["CUDA", "METAL", "VULKAN", "ROCM", "OPENCL", "WEBGPU", "MTMD", "OPENMP", "MKL", "SYSTEM_GGML", "DYNAMIC_LINK"] {
        if env::var_os(format!("CARGO_FEATURE_{feature}")).is_some() {
            fail(&format!(
                "this llama-cpp-sys-2 builds the CPU backend without OpenMP only; turn off its `{}` feature",
                feature.to_lowercase().replace('_', "-")
            ));
        }
    }

    // Bindings: generated ahead of time, so no libclang is needed.
    let bindings = match target.as_str() {
        "x86_64-unknown-linux-gnu" | "aarch64-unknown-linux-gnu" => {
            manifest.join("src/bindings/linux-lp64.rs")
        }
        _ => fail(&format!(
            "llama-cpp-sys-2 has pre-generated bindings for x86_64 and aarch64 Linux only, not {target}; add them with tools/gen-bindings.sh (needs libclang)"
        )),
    };
    std::fs::copy(&bindings, out.join("bindings.rs"))
        .unwrap_or_else(|e| fail(&format!("copying {}: {e}", bindings.display())));

    check_compilers();

    // Upstream's CMake writes these two headers from templates, with the version numbers
    // its CMakeLists.txt set.
    configure(
        &llama.join("src/llama-version.h.in"),
        &out.join("llama-version.h"),
        &[
            ("LLAMA_VERSION", format!("{}-dev", cmake_version(&llama.join("CMakeLists.txt"), "LLAMA"))),
            ("LLAMA_BUILD_COMMIT", "unknown".into()),
        ],
    );
    configure(
        &ggml.join("ggml-version.h.in"),
        &out.join("ggml-version.h"),
        &[
            ("GGML_VERSION", cmake_version(&llama.join("ggml/CMakeLists.txt"), "GGML")),
            ("GGML_BUILD_COMMIT", "unknown".into()),
        ],
    );

    let native = env::var("CARGO_ENCODED_RUSTFLAGS")
        .unwrap_or_default()
        .split('\x1f')
        .any(|f| f == "target-cpu=native" || f.ends_with("target-cpu=native"));
    let (arch_flags, arch_defines) = arch_flags(&arch, native);
    let repack = env::var("GGML_CPU_REPACK").map_or(true, |v| !matches!(v.as_str(), "OFF" | "0" | "off"));

    // The three ggml libraries of upstream's CMake, with their own definitions.
    let common_defines: &[(&str, Option<&str>)] = &[
        ("GGML_SCHED_MAX_COPIES", Some("4")),
        ("_GNU_SOURCE", None),
        ("_XOPEN_SOURCE", Some("600")),
    ];
    let base = [
        "ggml.c",
        "ggml.cpp",
        "ggml-alloc.c",
        "ggml-backend.cpp",
        "ggml-backend-meta.cpp",
        "ggml-opt.cpp",
        "ggml-threading.cpp",
        "ggml-quants.c",
        "gguf.cpp",
    ];
    compile(
        "ggml-base",
        &base.map(|f| ggml.join(f)),
        &[&ggml, &out, &llama.join("ggml/include")],
        common_defines,
        &[],
    );
    let mut cpu_defines = common_defines.to_vec();
    cpu_defines.push(("GGML_USE_LLAMAFILE", None));
    if repack {
        cpu_defines.push(("GGML_USE_CPU_REPACK", None));
    }
    cpu_defines.extend(arch_defines.iter().map(|d| (d.as_str(), None)));
    let mut cpu: Vec<PathBuf> = [
        "ggml-cpu.c",
        "ggml-cpu.cpp",
        "repack.cpp",
        "hbm.cpp",
        "quants.c",
        "traits.cpp",
        "amx/amx.cpp",
        "amx/mmq.cpp",
        "tiled/tiled.cpp",
        "tiled/tiled-kernel.cpp",
        "binary-ops.cpp",
        "unary-ops.cpp",
        "vec.cpp",
        "ops.cpp",
        "llamafile/sgemm.cpp",
    ]
    .iter()
    .map(|f| ggml.join("ggml-cpu").join(f))
    .collect();
    match arch.as_str() {
        "x86_64" => cpu.extend(["arch/x86/quants.c", "arch/x86/repack.cpp"].map(|f| ggml.join("ggml-cpu").join(f))),
        "aarch64" => cpu.extend(["arch/arm/quants.c", "arch/arm/repack.cpp"].map(|f| ggml.join("ggml-cpu").join(f))),
        other => fail(&format!("the CPU backend is built for x86_64 and aarch64 here, not {other}")),
    }
    compile(
        "ggml-cpu",
        &cpu,
        &[
            &llama.join("ggml"),
            &ggml,
            &ggml.join("ggml-cpu"),
            &llama.join("ggml/include"),
        ],
        &cpu_defines,
        &arch_flags,
    );
    let mut reg_defines = common_defines.to_vec();
    reg_defines.push(("GGML_USE_CPU", None));
    compile(
        "ggml",
        &["ggml-backend-dl.cpp", "ggml-backend-reg.cpp"].map(|f| ggml.join(f)),
        &[&llama.join("ggml/include")],
        &reg_defines,
        &[],
    );

    // libllama: the core sources one by one and the model builders in batches of 16, as
    // upstream's CMake unity build does (fewer compiler runs over the same headers).
    let src = llama.join("src");
    let mut sources: Vec<PathBuf> = Vec::new();
    let mut models: Vec<PathBuf> = std::fs::read_dir(src.join("models"))
        .unwrap_or_else(|e| fail(&format!("reading llama.cpp/src/models: {e}")))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "cpp"))
        .collect();
    models.sort();
    for entry in std::fs::read_dir(&src).unwrap_or_else(|e| fail(&format!("reading llama.cpp/src: {e}"))) {
        let p = entry.map(|e| e.path()).unwrap_or_default();
        if p.extension().is_some_and(|x| x == "cpp") {
            sources.push(p);
        }
    }
    sources.sort();
    for (i, batch) in models.chunks(16).enumerate() {
        let unity = out.join(format!("llama-models-{i}.cpp"));
        let text: String = batch
            .iter()
            .map(|p| format!("#include \"{}\"\n", p.display()))
            .collect();
        std::fs::write(&unity, text).unwrap_or_else(|e| fail(&format!("writing {}: {e}", unity.display())));
        sources.push(unity);
    }
    compile(
        "llama",
        &sources,
        &[&src, &out, &llama.join("include"), &llama.join("ggml/include")],
        &[("GGML_USE_CPU", None)],
        &[],
    );

    // Static libraries are linked in dependency order, then the C++ runtime.
    for lib in ["llama", "ggml", "ggml-cpu", "ggml-base"] {
        println!("cargo:rustc-link-lib=static={lib}");
    }
    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=dylib=stdc++");
    println!("cargo:rustc-link-lib=dylib=pthread");
    println!("cargo:rustc-link-lib=dylib=m");
}

/// Compile `files` into `lib<name>.a` with upstream's flags for a RelWithDebInfo build
/// (`-O2 -g -DNDEBUG`, C11 and C++17 with GNU extensions).
fn compile(
    name: &str,
    files: &[PathBuf],
    includes: &[&Path],
    defines: &[(&str, Option<&str>)],
    flags: &[String],
) {
    let (c, cpp): (Vec<&PathBuf>, Vec<&PathBuf>) = files
        .iter()
        .partition(|f| f.extension().is_some_and(|x| x == "c"));
    let mut objects = Vec::new();
    for (files, is_cpp) in [(c, false), (cpp, true)] {
        if files.is_empty() {
            continue;
        }
        let mut b = cc::Build::new();
        b.cpp(is_cpp)
            .opt_level(2)
            .debug(true)
            .force_frame_pointer(false)
            .warnings(false)
            .extra_warnings(false)
            .flag("-w")
            .define("NDEBUG", None)
            .flag(if is_cpp { "-std=gnu++17" } else { "-std=gnu11" })
            .cargo_metadata(false)
            .files(files);
        for i in includes {
            b.include(i);
        }
        for (k, v) in defines {
            b.define(k, *v);
        }
        for f in flags {
            b.flag(f);
        }
        match b.try_compile_intermediates() {
            Ok(o) => objects.extend(o),
            Err(e) => fail(&format!("compiling {name}: {e}")),
        }
    }
    let mut archive = cc::Build::new();
    archive.cargo_metadata(false).objects(objects);
    if let Err(e) = archive.try_compile(name) {
        fail(&format!("archiving {name}: {e}"));
    }
}

/// Flags and definitions that pick the CPU backend's kernels: `-march=native` when Rust
/// itself builds for the native CPU (`target-cpu=native`), else the target's features.
fn arch_flags(arch: &str, native: bool) -> (Vec<String>, Vec<String>) {
    let features: Vec<String> = env::var("CARGO_CFG_TARGET_FEATURE")
        .unwrap_or_default()
        .split(',')
        .map(str::to_string)
        .collect();
    let has = |f: &str| features.iter().any(|x| x == f);
    let mut flags = Vec::new();
    let mut defines = Vec::new();
    match (arch, native) {
        ("x86_64", true) => flags.push("-march=native".to_string()),
        ("aarch64", true) => flags.push("-mcpu=native".to_string()),
        ("x86_64", false) => {
            for (feature, flag, define) in [
                ("sse4.2", "-msse4.2", "GGML_SSE42"),
                ("f16c", "-mf16c", "GGML_F16C"),
                ("fma", "-mfma", "GGML_FMA"),
                ("bmi2", "-mbmi2", "GGML_BMI2"),
                ("avx", "-mavx", "GGML_AVX"),
                ("avx2", "-mavx2", "GGML_AVX2"),
                ("avxvnni", "-mavxvnni", "GGML_AVX_VNNI"),
                ("avx512vbmi", "-mavx512vbmi", "GGML_AVX512_VBMI"),
                ("avx512vnni", "-mavx512vnni", "GGML_AVX512_VNNI"),
                ("avx512bf16", "-mavx512bf16", "GGML_AVX512_BF16"),
            ] {
                if has(feature) {
                    flags.push(flag.to_string());
                    defines.push(define.to_string());
                }
            }
            if ["avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"]
                .iter()
                .all(|f| has(f))
            {
                for f in ["-mavx512f", "-mavx512cd", "-mavx512vl", "-mavx512dq", "-mavx512bw"] {
                    flags.push(f.to_string());
                }
                defines.push("GGML_AVX512".to_string());
            }
        }
        ("aarch64", false) => {
            let mut march = String::from("-march=armv8-a");
            for (feature, ext) in [("dotprod", "+dotprod"), ("fp16", "+fp16"), ("i8mm", "+i8mm"), ("sve", "+sve")] {
                if has(feature) {
                    march.push_str(ext);
                }
            }
            flags.push(march);
        }
        _ => {}
    }
    (flags, defines)
}

/// `MAJOR.MINOR.PATCH` from the `set(<PREFIX>_VERSION_MAJOR n)` lines of a CMakeLists.txt.
fn cmake_version(cmakelists: &Path, prefix: &str) -> String {
    let text = std::fs::read_to_string(cmakelists)
        .unwrap_or_else(|e| fail(&format!("reading {}: {e}", cmakelists.display())));
    let part = |name: &str| {
        let key = format!("set({prefix}_VERSION_{name} ");
        text.lines()
            .find_map(|l| l.trim().strip_prefix(&key)?.strip_suffix(')').map(str::trim))
            .unwrap_or("0")
            .to_string()
    };
    format!("{}.{}.{}", part("MAJOR"), part("MINOR"), part("PATCH"))
}

/// Write `template` to `out` with each `@KEY@` replaced, as CMake's `configure_file`.
fn configure(template: &Path, out: &Path, values: &[(&str, String)]) {
    let mut text = std::fs::read_to_string(template)
        .unwrap_or_else(|e| fail(&format!("reading {}: {e}", template.display())));
    for (k, v) in values {
        text = text.replace(&format!("@{k}@"), v);
    }
    std::fs::write(out, text).unwrap_or_else(|e| fail(&format!("writing {}: {e}", out.display())));
}

/// A C and a C++ compiler must run: say what to install instead of a backtrace.
fn check_compilers() {
    for cpp in [false, true] {
        let tool = cc::Build::new().cpp(cpp).cargo_metadata(false).try_get_compiler();
        let works = tool.as_ref().is_ok_and(|t| {
            t.to_command()
                .arg("--version")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        });
        if !works {
            let which = if cpp { "C++" } else { "C" };
            fail(&format!(
                "llama.cpp needs a {which} compiler and none was found: install one (Debian/Ubuntu: apt-get install g++; Fedora: dnf install gcc-c++; macOS: xcode-select --install), or point CC/CXX at one"
            ));
        }
    }
}

/// One line saying what is wrong and what to do; no backtrace.
fn fail(message: &str) -> ! {
    eprintln!("error: {message}");
    std::process::exit(1);
}
