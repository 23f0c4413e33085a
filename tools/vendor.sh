#!/usr/bin/env bash
# Rebuild vendor/ from the pristine crates.io sources plus patches/*.patch.
#
#   tools/vendor.sh                  rewrite vendor/ in place
#   tools/vendor.sh --check          rebuild into a temp dir and fail (exit 1) if vendor/ differs
#   tools/vendor.sh --pristine DIR   write the pristine crates (trimmed, no patches) to DIR
#
# The pristine .crate files come from cargo's own cache; when they are missing a
# throwaway manifest is fetched with `cargo fetch`, so only the crates.io registry is used.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CRATES=("llama-cpp-2 0.1.160" "llama-cpp-sys-2 0.1.161")
# Non-CPU ggml backends: never built here (their CMake subdirectories are only added
# when GGML_<BACKEND>=ON), and they are most of the crate's size.
TRIM_SYS=(cann cuda et hip metal musa sycl vulkan webgpu opencl hexagon openvino virtgpu zdnn zendnn)

mode=write
case "${1:-}" in
  --check) mode=check ;;
  --pristine) mode=pristine; pristine_dir=${2:?--pristine needs a directory} ;;
esac

cargo_home=${CARGO_HOME:-$HOME/.cargo}
find_crate() { ls "$cargo_home"/registry/cache/*/"$1-$2.crate" 2>/dev/null | head -n1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

need_fetch=0
for c in "${CRATES[@]}"; do
  set -- $c
  [ -n "$(find_crate "$1" "$2")" ] || need_fetch=1
done
if [ $need_fetch = 1 ]; then
  mkdir -p "$work/fetch/src"
  printf '[package]\nname = "epm-vendor-fetch"\nversion = "0.0.0"\nedition = "2021"\n[dependencies]\n' > "$work/fetch/Cargo.toml"
  for c in "${CRATES[@]}"; do
    set -- $c
    printf '%s = { version = "=%s", default-features = false }\n' "$1" "$2" >> "$work/fetch/Cargo.toml"
  done
  : > "$work/fetch/src/lib.rs"
  (cd "$work/fetch" && cargo fetch -q)
fi

out="$work/vendor"
mkdir -p "$out"
for c in "${CRATES[@]}"; do
  set -- $c
  crate=$(find_crate "$1" "$2")
  [ -n "$crate" ] || { echo "vendor.sh: $1-$2.crate not found after cargo fetch" >&2; exit 1; }
  tar -xzf "$crate" -C "$out"
  mv "$out/$1-$2" "$out/$1"
  rm -f "$out/$1/.cargo_vcs_info.json" "$out/$1/Cargo.lock"
done
for b in "${TRIM_SYS[@]}"; do
  rm -rf "$out/llama-cpp-sys-2/llama.cpp/ggml/src/ggml-$b"
done
# A test fixture of llama-cpp-2's own tests (we never run them); no .gguf is committed here.
rm -f "$out/llama-cpp-2/src/gguf/ggml-vocab-bert-bge.gguf"
if [ $mode = pristine ]; then
  mkdir -p "$pristine_dir"
  cp -a "$out"/. "$pristine_dir"/
  exit 0
fi
for p in "$ROOT"/patches/*.patch; do
  (cd "$out" && patch -s -p1 --no-backup-if-mismatch < "$p") || { echo "vendor.sh: $p does not apply" >&2; exit 1; }
done

if [ $mode = check ]; then
  if diff -r -q "$out" "$ROOT/vendor" >/dev/null; then
    echo "vendor.sh: vendor/ matches pristine crates + patches/"
  else
    echo "vendor.sh: vendor/ has drifted from pristine crates + patches/:" >&2
    diff -r -q "$out" "$ROOT/vendor" >&2 || true
    exit 1
  fi
else
  rm -rf "$ROOT/vendor"
  mv "$out" "$ROOT/vendor"
  echo "vendor.sh: vendor/ rebuilt"
fi
