#!/usr/bin/env bash
# Runs `parley verify` against two servers this script starts: one on the embedded store and
# one on PostgreSQL (a fresh database in the cluster of PARLEY_TEST_DATABASE_URL, dropped at the
# end), the latter with --database-url so the database checks run. Fails when any check FAILed.
#
#   scripts/verify.sh [--out DIR]
#
# PARLEY_TEST_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/postgres) names the
# PostgreSQL cluster. PARLEY_BIN names a built `parley` binary; without it the script builds
# the debug one. The results go to DIR/sqlite and DIR/postgres (default target/verify): each
# holds result.json and report.html.
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

readonly DATABASE_URL_DEFAULT="postgres://postgres@127.0.0.1:5432/postgres"
# A server must answer /readyz within this time of its start.
readonly READY_WAIT_S=60
# Each server stopped gets this long after SIGTERM before SIGKILL.
readonly STOP_WAIT_S=15
# The retention checks wait for the server's purge and the tombstones' expiry; short settings
# let them run.
readonly PURGE_INTERVAL_MS=200
readonly TOMBSTONE_TTL_MS=1000

OUT="target/verify"
while (( $# > 0 )); do
  case "$1" in
    --out) OUT="${2:?--out needs a value}"; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1" ;;
  esac
done

require_cmd psql "apt-get install postgresql-client"
require_cmd python3 "apt-get install python3"
CLUSTER_URL="${PARLEY_TEST_DATABASE_URL:-$DATABASE_URL_DEFAULT}"
PARLEY="${PARLEY_BIN:-$(build_parley_debug)}"
ADMIN_TOKEN="verify-$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
DB_NAME="parley_verify_$$"
DB_URL="${CLUSTER_URL%/*}/${DB_NAME}"
WORK="$(mktemp -d)"
PIDS=()

stop_all() {
  local pid
  for pid in "${PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${PIDS[@]}"; do
    local waited=0
    while kill -0 "$pid" 2>/dev/null && (( waited < STOP_WAIT_S * 10 )); do
      sleep 0.1
      waited=$((waited + 1))
    done
    kill -KILL "$pid" 2>/dev/null || true
  done
  psql "$CLUSTER_URL" -qc "DROP DATABASE IF EXISTS ${DB_NAME}" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap stop_all EXIT

ready() { curl -fsS "http://127.0.0.1:$1/readyz" >/dev/null 2>&1; }

# Starts `parley serve` on port $1 with the remaining arguments; logs to $WORK.
start_server() {
  local port=$1
  shift
  "$PARLEY" serve --listen "127.0.0.1:${port}" --admin-token "$ADMIN_TOKEN" \
    --purge-interval-ms "$PURGE_INTERVAL_MS" --tombstone-ttl-ms "$TOMBSTONE_TTL_MS" --push-allow-http "$@" >"$WORK/serve-${port}.log" 2>&1 &
  PIDS+=("$!")
  wait_for "$READY_WAIT_S" "parley serve on port ${port}" ready "$port"
}

require_cmd curl "apt-get install curl"
read -r SQLITE_PORT PG_PORT < <(free_ports 2)
psql "$CLUSTER_URL" -qc "CREATE DATABASE ${DB_NAME}" >/dev/null
start_server "$SQLITE_PORT" --data-dir "$WORK/data"
start_server "$PG_PORT" --database-url "$DB_URL"

status=0
say "parley verify: embedded store"
"$PARLEY" verify --url "http://127.0.0.1:${SQLITE_PORT}" --admin-token "$ADMIN_TOKEN" \
  --out "$OUT/sqlite" || status=1
say "parley verify: PostgreSQL, with the database checks"
"$PARLEY" verify --url "http://127.0.0.1:${PG_PORT}" --admin-token "$ADMIN_TOKEN" \
  --database-url "$DB_URL" --cleanup --out "$OUT/postgres" || status=1
if (( status != 0 )); then
  die "a check failed: see $OUT/sqlite/report.html and $OUT/postgres/report.html"
fi
say "no check failed; reports in $OUT/sqlite and $OUT/postgres"
