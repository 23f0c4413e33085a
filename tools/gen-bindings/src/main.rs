//! Writes llama.cpp's Rust bindings for one target triple, with the settings upstream
//! llama-cpp-sys-2 0.1.161 passed to bindgen at build time (minus the `common` wrapper,
//! which EPM does not build). The vendored crate then needs no libclang to build.
//!
//!     epm-gen-bindings <llama-cpp-sys-2 dir> <target triple> <output file>

use std::path::PathBuf;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, sys_dir, target, out] = args.as_slice() else {
        eprintln!("usage: epm-gen-bindings <llama-cpp-sys-2 dir> <target triple> <output file>");
        std::process::exit(2);
    };
    let sys_dir = PathBuf::from(sys_dir);
    let llama = sys_dir.join("llama.cpp");
    let mut builder = bindgen::Builder::default()
        .header(sys_dir.join("wrapper.h").display().to_string())
        .clang_arg(format!("--target={target}"))
        .clang_arg(format!("-I{}", llama.join("include").display()))
        .clang_arg(format!("-I{}", llama.join("ggml/include").display()))
        .derive_partialeq(true)
        .allowlist_item("ggml_.*")
        .allowlist_item("gguf_.*")
        .allowlist_item("llama_.*")
        // As upstream: a cross-platform `FILE` rather than a libc dependency.
        .allowlist_recursively(false)
        .raw_line("type FILE = ::std::os::raw::c_void;")
        .prepend_enum_name(false);
    // A cross target's C library headers (Debian: libc6-dev-arm64-cross).
    let cross = PathBuf::from(format!(
        "/usr/{}/include",
        target.replace("-unknown-", "-")
    ));
    if cross.is_dir() {
        builder = builder.clang_arg(format!("-isystem{}", cross.display()));
    }
    let bindings = builder.generate().unwrap_or_else(|e| {
        eprintln!("bindgen failed for {target}: {e}");
        std::process::exit(1);
    });
    bindings.write_to_file(out).unwrap_or_else(|e| {
        eprintln!("cannot write {out}: {e}");
        std::process::exit(1);
    });
}
