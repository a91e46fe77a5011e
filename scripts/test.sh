#!/usr/bin/env bash
# Runs every check of the workspace: formatting, lints, then every test against a real
# PostgreSQL and the embedded SQLite store. The store contract has one runner per store, and
# each HTTP, WebSocket and SDK integration test runs once per store (`<test>::postgres`,
# `<test>::sqlite`) in the same nextest run, so one summary counts both. A missing PostgreSQL
# fails the run; tests are never skipped for lack of one. Then scripts/cluster_smoke.sh runs
# scripts/cluster.sh (three gateways on NATS behind nginx; nginx is installed with apt-get when
# missing), scripts/verify.sh runs `parley verify` against a server on each store, scripts/browser.sh
# drives the web client in headless Chromium, scripts/chaos.sh
# runs five fault schedules under load, and last
# scripts/schemathesis.sh checks a running server against its own OpenAPI
# document on both stores.
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

say "cargo fmt --check"
cargo fmt --all -- --check

say "cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings

say "PostgreSQL"
ensure_postgres
say "NATS"
check_nats
# The cluster smoke test needs Debian's nginx; a fresh machine gets it here, as root.
say "nginx"
ensure_package nginx nginx "the cluster smoke test needs nginx"
say "nftables"
ensure_package nft nftables "the chaos lab's partition fault needs nft (crates/parley/tests/it/chaos.rs)"

status=0
if cargo nextest --version >/dev/null 2>&1; then
  # nextest does not run doc tests; they run first so the run closes on nextest's summary.
  say "cargo test --doc"
  cargo test --doc --workspace --no-fail-fast || status=$?
  say "cargo nextest run"
  cargo nextest run --workspace --no-fail-fast || status=$?
else
  say "cargo test"
  cargo test --workspace --no-fail-fast || status=$?
fi

if (( status != 0 )); then
  die "tests failed"
fi

# Three gateways on NATS behind nginx, started and stopped by scripts/cluster.sh.
say "scripts/cluster_smoke.sh"
bash scripts/cluster_smoke.sh || die "the cluster smoke test failed"

# `parley verify` against a server on each store, the database checks on PostgreSQL; every
# check PASS or NOT_RUN with its reason (docs/VERIFY.md).
say "scripts/verify.sh"
bash scripts/verify.sh --out target/verify || die "parley verify found a failing check"

# The web client in Debian's headless Chromium against a server on the embedded store; the
# screenshots of every step go to target/browser.
say "scripts/browser.sh"
bash scripts/browser.sh || die "the browser tests failed"

# The short chaos run: five seeded fault schedules of 20 s under load on a cluster of its own;
# any anomaly fails the run (docs/EVIDENCE.md has the long one).
say "scripts/chaos.sh"
PARLEY_BIN="$(build_parley_debug)" bash scripts/chaos.sh || die "the chaos run found an anomaly or could not run"

# The API against its own OpenAPI document, on both stores (README: "Check the API").
say "scripts/schemathesis.sh"
bash scripts/schemathesis.sh || die "schemathesis failed"
say "all checks passed"
