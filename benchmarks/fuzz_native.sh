#!/usr/bin/env bash
# The native engine's fuzz targets (fuzz/, cargo fuzz on the nightly toolchain), longer than CI's
# 30-second runs: SECONDS_EACH per target (default 600). A crash leaves its input in
# fuzz/artifacts/<target>/; replay it with `cargo +nightly fuzz run <target> <file>`.
#   cargo install cargo-fuzz --locked   # once
#   benchmarks/fuzz_native.sh [SECONDS_EACH]
set -euo pipefail
cd "$(dirname "$0")/.."
each=${1:-600}
for target in regular_index cfg_engine lark_tokens; do
  echo "== $target, $each s"
  cargo +nightly fuzz run "$target" -- -max_total_time="$each" 2>&1 | grep -E "^Done|SUMMARY|panicked" || true
done
