#!/usr/bin/env bash
# Runs every fuzz target (the `fuzz_*` property tests: frames, request fields, ids, bodies,
# sync tokens, bus payloads) with many more cases than the test suite gives them.
#
#   scripts/fuzz.sh            # 100,000 cases per target
#   scripts/fuzz.sh 1000000    # longer
#
# A failure prints the smallest failing input and saves its seed under the crate's
# `proptest-regressions/`, which is replayed first on every later run: commit that file with
# the fix.
set -euo pipefail
cd "$(dirname "$0")/.."

readonly CASES_DEFAULT=100000
export PROPTEST_CASES="${1:-$CASES_DEFAULT}"
export PARLEY_TEST_DATABASE_URL="${PARLEY_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
printf '==> fuzz targets, %s cases each\n' "$PROPTEST_CASES"
cargo nextest run --workspace --release --no-fail-fast -E 'test(/::fuzz_/)'
