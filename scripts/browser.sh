#!/usr/bin/env bash
# Drives the web client (`GET /` of `parley serve`) in Debian's headless Chromium: two users
# chatting, a send while offline, a second tab following the read position, a recall, typing,
# a reload, a wrong password (web-tests/, Node's built-in test runner with playwright-core).
# A missing Chromium is installed with apt-get; one that cannot be installed fails the run.
#
#   scripts/browser.sh [--out DIR]
#
# The server runs on the embedded store in a temporary data directory on a free port, with an
# admin token of this run; the tests make their users through the admin API. Screenshots of
# every step go to DIR (default target/browser), two-users-chatting.png among them. PARLEY_BIN
# names a built `parley` binary; without it the script builds the debug one.
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

readonly CHROMIUM_BIN=/usr/bin/chromium
# A server must answer /readyz within this time of its start.
readonly READY_WAIT_S=60
# The server gets this long after SIGTERM before SIGKILL.
readonly STOP_WAIT_S=15

OUT="target/browser"
while (( $# > 0 )); do
  case "$1" in
    --out) OUT="${2:?--out needs a value}"; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1" ;;
  esac
done

started_s=$SECONDS
ensure_package chromium chromium "the browser tests drive Debian's Chromium"
[[ -x "$CHROMIUM_BIN" ]] || die "$CHROMIUM_BIN is missing after installing chromium"
require_cmd node "apt-get install nodejs"
require_cmd npm "apt-get install npm"
require_cmd curl "apt-get install curl"
require_cmd python3 "apt-get install python3"

say "npm ci (web-tests)"
(cd web-tests && npm ci --no-audit --no-fund --loglevel=error)

PARLEY="${PARLEY_BIN:-$(build_parley_debug)}"
build_done_s=$SECONDS
ADMIN_TOKEN="browser-$(python3 -c 'import secrets; print(secrets.token_hex(16))')"
WORK="$(mktemp -d)"
SERVER_PID=""

stop_server() {
  if [[ -n "$SERVER_PID" ]]; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    local waited=0
    while kill -0 "$SERVER_PID" 2>/dev/null && (( waited < STOP_WAIT_S * 10 )); do
      sleep 0.1
      waited=$((waited + 1))
    done
    kill -KILL "$SERVER_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap stop_server EXIT

ready() { curl -fsS "http://127.0.0.1:$1/readyz" >/dev/null 2>&1; }

read -r PORT < <(free_ports 1)
# Debug logs of the HTTP layer, so the check below sees every request line it could write.
RUST_LOG="${RUST_LOG:-info,parley_server=debug,tower_http=debug}" \
  PARLEY_ADMIN_TOKEN="$ADMIN_TOKEN" "$PARLEY" serve --listen "127.0.0.1:${PORT}" \
  --data-dir "$WORK/data" >"$WORK/serve.log" 2>&1 &
SERVER_PID=$!
wait_for "$READY_WAIT_S" "parley serve on port ${PORT}" ready "$PORT"

mkdir -p "$OUT"
rm -f "$OUT"/*.png "$OUT/serve.log"
OUT_ABS="$(cd "$OUT" && pwd)"
say "browser tests against http://127.0.0.1:${PORT}/ (screenshots in $OUT)"
status=0
(
  cd web-tests
  PARLEY_URL="http://127.0.0.1:${PORT}" PARLEY_ADMIN_TOKEN="$ADMIN_TOKEN" \
    BROWSER_ARTIFACTS="$OUT_ABS" CHROMIUM="$CHROMIUM_BIN" \
    node --test --test-concurrency=1 --test-reporter=spec tests/
) || status=$?
cp "$WORK/serve.log" "$OUT/serve.log" 2>/dev/null || true
# The token of a device must never reach the server's log, whichever way it was sent.
if grep -Eq 'pd_[0-9a-f]{16}' "$OUT/serve.log"; then
  warn "a device token appears in the server's log ($OUT/serve.log)"
  status=1
fi
say "browser tests took $((SECONDS - build_done_s)) s after the build ($((SECONDS - started_s)) s in all)"
(( status == 0 )) || die "the browser tests failed: see the screenshots and serve.log in $OUT"
say "all browser tests passed; screenshots in $OUT"
