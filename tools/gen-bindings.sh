#!/usr/bin/env bash
# The llama.cpp bindings of vendor/llama-cpp-sys-2 are generated ahead of time, so that a
# build needs no libclang. This regenerates them with bindgen for every target we build
# (x86_64 and aarch64 Linux, which must give the same file), or checks the committed file.
#
#   tools/gen-bindings.sh          regenerate src/bindings/linux-lp64.rs and patch 0004
#   tools/gen-bindings.sh --check  fail (exit 1) if fresh bindings differ from the committed
#
# Needs libclang (Debian: libclang-dev) and the aarch64 C headers (libc6-dev-arm64-cross).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SYS="$ROOT/vendor/llama-cpp-sys-2"
COMMITTED="$SYS/src/bindings/linux-lp64.rs"
PATCH="$ROOT/patches/0004-sys-cc-build.patch"
TARGETS=(x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu)

mode=write
[ "${1:-}" = "--check" ] && mode=check

cargo build --release -q --manifest-path "$ROOT/tools/gen-bindings/Cargo.toml"
gen="$ROOT/tools/gen-bindings/target/release/epm-gen-bindings"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for t in "${TARGETS[@]}"; do
  "$gen" "$SYS" "$t" "$work/$t.rs"
done
for t in "${TARGETS[@]:1}"; do
  if ! cmp -s "$work/${TARGETS[0]}.rs" "$work/$t.rs"; then
    echo "gen-bindings.sh: bindings for $t differ from ${TARGETS[0]}'s; they can no longer share one file" >&2
    diff "$work/${TARGETS[0]}.rs" "$work/$t.rs" | head -20 >&2
    exit 1
  fi
done

if [ $mode = check ]; then
  if cmp -s "$work/${TARGETS[0]}.rs" "$COMMITTED"; then
    echo "gen-bindings.sh: committed bindings match the vendored headers (${TARGETS[*]})"
  else
    echo "gen-bindings.sh: committed bindings differ from freshly generated ones; run tools/gen-bindings.sh" >&2
    diff "$COMMITTED" "$work/${TARGETS[0]}.rs" | head -20 >&2
    exit 1
  fi
  exit 0
fi

cp "$work/${TARGETS[0]}.rs" "$COMMITTED"
# Patch 0004 owns build.rs, Cargo.toml and src/bindings of the sys crate: rewrite it from
# the pristine crate and vendor/, keeping its explanation (everything before the diff).
"$ROOT/tools/vendor.sh" --pristine "$work/pristine"
mkdir -p "$work/p/pristine/llama-cpp-sys-2" "$work/p/mod/llama-cpp-sys-2/src"
cp "$work/pristine/llama-cpp-sys-2/build.rs" "$work/pristine/llama-cpp-sys-2/Cargo.toml" "$work/p/pristine/llama-cpp-sys-2/"
cp "$SYS/build.rs" "$SYS/Cargo.toml" "$work/p/mod/llama-cpp-sys-2/"
cp -r "$SYS/src/bindings" "$work/p/mod/llama-cpp-sys-2/src/"
{
  sed '/^diff -ruN /,$d' "$PATCH"
  (cd "$work/p" && diff -ruN pristine mod) || true
} > "$work/patch"
mv "$work/patch" "$PATCH"
"$ROOT/tools/vendor.sh" --check
echo "gen-bindings.sh: wrote $COMMITTED and $PATCH"
