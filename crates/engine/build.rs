//! Compiles `ffi/context_memory.cpp`, the C ABI over llama.cpp's C++ memory breakdown,
//! against the vendored llama.cpp headers (the library itself comes from llama-cpp-sys-2).

use std::path::PathBuf;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let llama = manifest.join("../../vendor/llama-cpp-sys-2/llama.cpp");
    let source = manifest.join("ffi/context_memory.cpp");
    println!("cargo:rerun-if-changed={}", source.display());
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .include(llama.join("include"))
        .include(llama.join("src"))
        .include(llama.join("ggml/include"))
        .file(&source)
        .compile("epm_context_memory");
}
