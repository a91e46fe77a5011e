#!/usr/bin/env bash
# Runs every check of the workspace: formatting, lints, then every test against a real
# PostgreSQL and the embedded SQLite store. The store contract has one runner per store, and
# each HTTP, WebSocket and SDK integration test runs once per store (`<test>::postgres`,
# `<test>::sqlite`) in the same nextest run, so one summary counts both. A missing PostgreSQL
# fails the run; tests are never skipped for lack of one.
#
# Phases, in the order they run (README, "Run every test"):
#   fmt, clippy, setup (PostgreSQL, NATS, nginx, nftables), build (every test binary and the
#   `parley` binary, once), doc tests, nextest, cluster smoke (scripts/cluster_smoke.sh),
#   chaos (scripts/chaos.sh), then verify (scripts/verify.sh) and browser (scripts/browser.sh)
#   one after the other beside schemathesis (scripts/schemathesis.sh).
# Every script after the tests runs the `parley` binary of the build phase (PARLEY_BIN), so
# `parley` is compiled once. The timing-sensitive suites (nextest, the cluster smoke, chaos)
# run alone; the last three start servers of their own and run on two lanes at once, each
# into a log file under target/test-run/ that is printed when its phase fails. A table of
# every phase's start and wall time ends every run, a failed one too; the first failed phase
# stops the run (the doc tests and nextest both run before that is judged, as do all three
# of the last phases).
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

# The machine's own PostgreSQL unless PARLEY_TEST_DATABASE_URL names another server.
readonly PG_URL_DEFAULT="postgres://postgres@127.0.0.1:5432/postgres"
readonly PG_START_WAIT_S=30
readonly NATS_HOST=127.0.0.1
readonly NATS_PORT=4222
readonly NATS_START_WAIT_S=5
# Cases per fuzz target (`fuzz_*` property tests) in this run: a few seconds in all.
# `scripts/fuzz.sh` runs the same targets far longer.
readonly FUZZ_CASES_DEFAULT=5000
export PROPTEST_CASES="${PROPTEST_CASES:-$FUZZ_CASES_DEFAULT}"

# Succeeds when the server at $1 accepts a query (psql) or at least connections (pg_isready).
pg_answers() {
  if command -v psql >/dev/null 2>&1; then
    PGCONNECT_TIMEOUT=3 psql "$1" -Atqc 'SELECT 1' >/dev/null 2>&1
  elif command -v pg_isready >/dev/null 2>&1; then
    pg_isready -q -t 3 -d "$1"
  else
    die "neither psql nor pg_isready is installed; install the PostgreSQL client (apt-get install postgresql-client)"
  fi
}

ensure_postgres() {
  if [[ -n "${PARLEY_TEST_DATABASE_URL:-}" ]]; then
    pg_answers "$PARLEY_TEST_DATABASE_URL" \
      || die "PostgreSQL at PARLEY_TEST_DATABASE_URL does not answer; the tests need it"
    return
  fi
  export PARLEY_TEST_DATABASE_URL="$PG_URL_DEFAULT"
  pg_answers "$PARLEY_TEST_DATABASE_URL" && return

  say "PostgreSQL is not answering on 127.0.0.1:5432; starting the local cluster"
  local version
  version=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1 || true)
  [[ -n "$version" ]] && command -v pg_ctlcluster >/dev/null 2>&1 \
    || die "PostgreSQL is required: nothing answers on 127.0.0.1:5432 and no local cluster is installed (/etc/postgresql, pg_ctlcluster). Start one or set PARLEY_TEST_DATABASE_URL."
  pg_ctlcluster --skip-systemctl-redirect "$version" main start \
    || warn "pg_ctlcluster $version main start failed; waiting in case it is starting anyway"
  local waited_s=0
  until pg_answers "$PARLEY_TEST_DATABASE_URL"; do
    (( waited_s >= PG_START_WAIT_S )) \
      && die "PostgreSQL $version did not answer on 127.0.0.1:5432 within ${PG_START_WAIT_S} s; the tests need it"
    sleep 1
    waited_s=$((waited_s + 1))
  done
}

# The NATS bus tests need the machine's NATS server and the nats-server binary (one test starts
# a server of its own to restart it): a missing one is fatal, never a skipped test.
check_nats() {
  [[ -x /usr/sbin/nats-server ]] \
    || die "/usr/sbin/nats-server is missing; install it (apt-get install nats-server)"
  tcp_open "$NATS_HOST" "$NATS_PORT" && return
  if command -v start-stop-daemon >/dev/null 2>&1; then
    say "NATS is not listening on $NATS_HOST:$NATS_PORT; starting it"
    start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- \
      -a "$NATS_HOST" -p "$NATS_PORT" -js -sd /var/lib/nats-server -l /var/log/nats-server.log \
      || true
    local waited_s=0
    until tcp_open "$NATS_HOST" "$NATS_PORT"; do
      (( waited_s >= NATS_START_WAIT_S )) && break
      sleep 1
      waited_s=$((waited_s + 1))
    done
    tcp_open "$NATS_HOST" "$NATS_PORT" && return
  fi
  die "NATS is not reachable on $NATS_HOST:$NATS_PORT; the NATS bus tests need it"
}

# Where this run's logs, phase times and binary go (relative to the repository).
readonly RUN_DIR="target/test-run"
readonly TIMING_DIR="$RUN_DIR/timing"
# Lines of a successful parallel phase's log shown in the run's output (its summary).
readonly LOG_TAIL_OK=12
# Lines of a failed parallel phase's log shown; the whole log stays in $RUN_DIR.
readonly LOG_TAIL_FAILED=400
# Every phase, in the order they start; the timing table lists them in this order.
readonly PHASES=(fmt clippy setup build "doc tests" nextest "cluster smoke" chaos verify browser schemathesis)

RUN_STARTED_S=$(date +%s)
TABLE_PRINTED=0
LANE_PIDS=()

phase_file() { printf '%s/%s\n' "$TIMING_DIR" "${1// /-}"; }

# m:ss of $1 seconds.
fmt_s() { printf '%d:%02d' $(($1 / 60)) $(($1 % 60)); }

# Runs the command after the phase name $1 and records its start, end and exit status; its
# output goes where this script's goes. Returns the command's status.
run_phase() {
  local phase=$1
  shift
  local file start rc=0
  file=$(phase_file "$phase")
  start=$(date +%s)
  printf '%s\n' "$start" >"$file"
  say "$phase"
  "$@" || rc=$?
  printf '%s %s %s\n' "$start" "$(date +%s)" "$rc" >"$file"
  return "$rc"
}

# As run_phase, but the output goes to $RUN_DIR/<phase>.log, for phases that run beside
# another one.
run_phase_logged() {
  local phase=$1
  shift
  run_phase "$phase" "$@" >"$RUN_DIR/${phase// /-}.log" 2>&1
}

# Status of a phase: ok, FAILED (its exit status, or that it ended the run), or not run.
phase_status() {
  local file start end rc
  file=$(phase_file "$1")
  [[ -f "$file" ]] || { printf 'not run\n'; return; }
  read -r start end rc <"$file"
  if [[ -z "${end:-}" ]]; then
    printf 'FAILED (ended the run)\n'
  elif (( rc == 0 )); then
    printf 'ok\n'
  else
    printf 'FAILED (exit %s)\n' "$rc"
  fi
}

# The table of every phase: start after the run's start, wall time, status. Phases on two
# lanes overlap, so the times add up to more than the total.
print_timing_table() {
  TABLE_PRINTED=1
  local now phase file start end rc
  now=$(date +%s)
  say "timing of this run (wall clock; verify and browser run beside schemathesis)"
  printf '    %-14s %7s %7s  %s\n' phase start time status
  for phase in "${PHASES[@]}"; do
    file=$(phase_file "$phase")
    if [[ -f "$file" ]]; then
      start="" end="" rc=""
      read -r start end rc <"$file"
      printf '    %-14s %7s %7s  %s\n' "$phase" "$(fmt_s $((start - RUN_STARTED_S)))" \
        "$(fmt_s $((${end:-$now} - start)))" "$(phase_status "$phase")"
    else
      printf '    %-14s %7s %7s  %s\n' "$phase" - - "not run"
    fi
  done
  printf '    %-14s %7s %7s\n' total "" "$(fmt_s $((now - RUN_STARTED_S)))"
}

# Sends SIGTERM to the process $1 and everything it started, the youngest first, so that each
# script still runs its own cleanup (servers, databases, scratch directories).
# shellcheck disable=SC2317  # called from the EXIT trap
stop_tree() {
  local child
  for child in $(pgrep -P "$1" 2>/dev/null); do
    stop_tree "$child"
  done
  kill -TERM "$1" 2>/dev/null || true
}

# On any exit before the table was printed (a failed phase, a failed setup step, a signal):
# stop the lanes still running, then print the table.
# shellcheck disable=SC2317  # the EXIT trap
on_exit() {
  local status=$? pid
  for pid in "${LANE_PIDS[@]}"; do
    stop_tree "$pid"
  done
  if (( TABLE_PRINTED == 0 )); then
    print_timing_table
  fi
  exit "$status"
}
trap on_exit EXIT

# Prints the table, then stops the run with the message $1.
fail_run() {
  print_timing_table
  die "$1"
}

# Every test binary, and the `parley` binary the tests of crates/parley run, in one build.
# That `parley` is then hard-linked to <target>/test-run/parley and handed to every script
# below as PARLEY_BIN: a `cargo build -p parley` without the tests' dev-dependency
# features (test-breaks, tokio's test-util) would rebuild tokio and every crate above it. The
# test-breaks guards act only when PARLEY_TEST_BREAKS is set, which the scripts never do.
build_all() {
  if cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --workspace --no-run || return
  else
    cargo test --workspace --no-run || return
  fi
  local target built
  target=$(cargo_target_dir) || return
  built="$target/debug/parley"
  [[ -x "$built" ]] || { warn "the test build left no $built"; return 1; }
  mkdir -p "$target/test-run"
  # A hard link keeps this build's binary even if a later cargo command replaces the file.
  ln -f "$built" "$target/test-run/parley" 2>/dev/null || cp -f "$built" "$target/test-run/parley"
  PARLEY_BIN="$target/test-run/parley"
  export PARLEY_BIN
  say "every script below runs $PARLEY_BIN"
}

setup_services() {
  say "PostgreSQL"
  ensure_postgres
  say "NATS"
  check_nats
  # The cluster smoke test needs Debian's nginx; a fresh machine gets it here, as root.
  say "nginx"
  ensure_package nginx nginx "the cluster smoke test needs nginx"
  say "nftables"
  ensure_package nft nftables "the chaos lab's partition fault needs nft (crates/parley/tests/it/chaos.rs)"
}

# Prints a parallel phase's log: its tail when it passed, most of it when it failed.
show_log() {
  local phase=$1 log="$RUN_DIR/${1// /-}.log" status
  status=$(phase_status "$phase")
  if [[ "$status" == ok ]]; then
    say "$phase: ok; last lines of $log"
    tail -n "$LOG_TAIL_OK" "$log" | sed 's/^/    /'
  else
    say "$phase: $status; $log (last $LOG_TAIL_FAILED lines)"
    tail -n "$LOG_TAIL_FAILED" "$log" | sed 's/^/    /'
  fi
}

rm -rf "$RUN_DIR"
mkdir -p "$TIMING_DIR"
# A test-only variable (README, Configuration): the scripts' servers must never inherit it.
unset PARLEY_TEST_BREAKS

run_phase fmt cargo fmt --all -- --check || fail_run "cargo fmt found unformatted code"
run_phase clippy cargo clippy --workspace --all-targets -- -D warnings || fail_run "clippy failed"
run_phase setup setup_services || fail_run "the test services could not be set up"
run_phase build build_all || fail_run "the build failed"

status=0
if cargo nextest --version >/dev/null 2>&1; then
  # nextest does not run doc tests; they run first so the tests close on nextest's summary.
  run_phase "doc tests" cargo test --doc --workspace --no-fail-fast || status=1
  run_phase nextest cargo nextest run --workspace --no-fail-fast || status=1
else
  run_phase "doc tests" cargo test --doc --workspace --no-fail-fast || status=1
  run_phase nextest cargo test --workspace --no-fail-fast --lib --bins --tests --examples || status=1
fi
(( status == 0 )) || fail_run "tests failed"

# Three gateways on NATS behind nginx, started and stopped by scripts/cluster.sh. Timing
# sensitive (deliveries and a kill within bounded waits): it runs alone.
run_phase "cluster smoke" bash scripts/cluster_smoke.sh || fail_run "the cluster smoke test failed"

# The short chaos run: five seeded fault schedules of 20 s under load on a cluster of its own;
# any anomaly fails the run (docs/EVIDENCE.md has the long one). Timing sensitive: alone.
run_phase chaos bash scripts/chaos.sh || fail_run "the chaos run found an anomaly or could not run"

# Three suites against servers of their own, on two lanes: `parley verify` against a server on
# each store, every check PASS or NOT_RUN with its reason (docs/VERIFY.md), then the web client
# in Debian's headless Chromium (screenshots in target/browser); beside them the API against
# its own OpenAPI document on both stores (README: "Check the API").
say "verify, then browser, beside schemathesis; logs in $RUN_DIR"
(
  run_phase_logged verify bash scripts/verify.sh --out target/verify || true
  run_phase_logged browser bash scripts/browser.sh || true
) &
LANE_PIDS+=("$!")
run_phase_logged schemathesis bash scripts/schemathesis.sh &
LANE_PIDS+=("$!")
for pid in "${LANE_PIDS[@]}"; do
  wait "$pid" || true
done
LANE_PIDS=()
failed=()
for phase in verify browser schemathesis; do
  show_log "$phase"
  [[ "$(phase_status "$phase")" == ok ]] || failed+=("$phase")
done
(( ${#failed[@]} == 0 )) || fail_run "failed: ${failed[*]} (logs in $RUN_DIR)"

print_timing_table
say "all checks passed"
