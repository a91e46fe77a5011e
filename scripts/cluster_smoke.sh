#!/usr/bin/env bash
# Smoke test of scripts/cluster.sh: starts the cluster (three gateways, NATS, nginx) on a fresh
# database and free ports, then through nginx's URL only: creates three users with a device
# each and a group of the three, opens one WebSocket per device (nginx's least_conn puts them
# on three different gateways, which the routes table confirms), sends over WebSocket and
# HTTP and checks that every device received every message. Then it kills the gateway of one
# device with SIGKILL and checks that every request through nginx still succeeds, that the
# other devices still receive, and that the device reconnects through nginx to a live gateway.
# Last it stops the cluster with SIGTERM and checks that no process it started is left and
# no port is still open. Exits non-zero on the first failed check. PARLEY_BIN names a built
# `parley` binary; without it the script builds the debug one.
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

readonly PG_URL_DEFAULT="postgres://postgres@127.0.0.1:5432/postgres"
# Start-up of the cluster from a built binary: migrate, three gateways, nginx.
readonly CLUSTER_START_WAIT_S=90
# A message committed through one gateway reaches devices on the others within this time.
readonly DELIVERY_WAIT_S=15
# cluster.sh stops each process within its own STOP_WAIT_S (15 s); this bounds the whole stop.
readonly CLUSTER_STOP_WAIT_S=60
# Requests through nginx after one gateway is killed; every one must succeed.
readonly REQUESTS_AFTER_KILL=30
readonly CONV_ID="g-smoke"
readonly USERS=(ana ben cy)

require_cmd nginx "apt-get install nginx"
require_cmd psql "apt-get install postgresql-client"
require_cmd curl "apt-get install curl"

BIN=${PARLEY_BIN:-$(build_parley_debug)}
readonly BIN

WORK=$(mktemp -d)
PG_URL="${PARLEY_TEST_DATABASE_URL:-$PG_URL_DEFAULT}"
DB="parley_cluster_smoke_$$"
DB_URL="${PG_URL%/*}/$DB"
CLUSTER_PID=""
LISTENER_PIDS=()
STARTED_AT=$SECONDS

# shellcheck disable=SC2317  # the EXIT trap
cleanup() {
  local status=$?
  local pid
  for pid in "${LISTENER_PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  if [[ -n "$CLUSTER_PID" ]] && kill -0 "$CLUSTER_PID" 2>/dev/null; then
    kill -TERM "$CLUSTER_PID" 2>/dev/null || true
    wait "$CLUSTER_PID" 2>/dev/null || true
  fi
  if (( status != 0 )) && [[ -f "$WORK/cluster.out" ]]; then
    printf -- '--- cluster.sh output\n' >&2
    cat "$WORK/cluster.out" >&2
  fi
  psql "$PG_URL" -Atqc "DROP DATABASE IF EXISTS \"$DB\" WITH (FORCE)" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

sql() { psql "$DB_URL" -Atqc "$1"; }

# POSTs JSON through nginx with a token and prints the answer; fails on 400 or more.
post() {
  curl -fsS -X POST -H "Authorization: Bearer $1" -H 'Content-Type: application/json' \
    --data "$3" "$URL$2"
}

json_field() { python3 -c "import json, sys; print(json.load(sys.stdin)[\"$1\"])"; }

# How many times a message body arrived in a device's frames.
received() { grep -c -F "\"body\":\"$2\"" "$WORK/ws-$1.out" || true; }
has_received() { (( $(received "$1" "$2") >= 1 )); }
has_line() { grep -q -x -F "$2" "$1" 2>/dev/null; }

# Opens a device's WebSocket through nginx (optionally sending one message on it) and waits
# until the upgrade is answered and its route is claimed.
open_socket() {
  local user=$1
  shift
  : >"$WORK/ws-$user.out"
  python3 scripts/cluster_ws.py "$URL" "${TOKENS[$user]}" "$WORK/ws-$user.out" "$@" &
  LISTENER_PIDS+=("$!")
  wait_for 10 "the WebSocket of $user" has_line "$WORK/ws-$user.out" open
  wait_for 10 "the route of $user" route_claimed "$user"
}
route_claimed() { [[ -n "$(sql "SELECT gateway_id FROM routes WHERE user_id = '$1'")" ]]; }

# Processes of the cluster still running among the given pids.
alive() {
  local pid
  for pid in "$@"; do
    if kill -0 "$pid" 2>/dev/null; then printf '%s ' "$pid"; fi
  done
}
gone() { [[ -z "$(alive "$@")" ]]; }

read -r PORT GW1 GW2 GW3 <<<"$(free_ports 4)"
URL="http://127.0.0.1:$PORT"
ADMIN_TOKEN="admin-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"

say "scripts/cluster.sh --port $PORT --gateway-ports $GW1,$GW2,$GW3"
PARLEY_BIN="$BIN" PARLEY_ADMIN_TOKEN="$ADMIN_TOKEN" \
  scripts/cluster.sh --port "$PORT" --gateway-ports "$GW1,$GW2,$GW3" --database-url "$DB_URL" \
  >"$WORK/cluster.out" 2>&1 &
CLUSTER_PID=$!
cluster_ready() {
  kill -0 "$CLUSTER_PID" 2>/dev/null || die "scripts/cluster.sh exited before it was ready"
  grep -q -F "parley cluster ready at $URL" "$WORK/cluster.out"
}
wait_for "$CLUSTER_START_WAIT_S" "the cluster" cluster_ready
declare -A GATEWAY_PID
while read -r _ id _ pid _; do
  GATEWAY_PID[$id]=$pid
done < <(grep -E '^gateway gw-[0-9]+ pid [0-9]+ ' "$WORK/cluster.out")
NGINX_PID=$(sed -n 's/^nginx pid \([0-9]*\) .*/\1/p' "$WORK/cluster.out")
(( ${#GATEWAY_PID[@]} == 3 )) || die "cluster.sh did not report three gateways"
[[ -n "$NGINX_PID" ]] || die "cluster.sh did not report nginx's pid"
NGINX_WORKERS=$(ps -o pid= --ppid "$NGINX_PID" | tr -d ' ' | tr '\n' ' ')
[[ -n "$NGINX_WORKERS" ]] || die "nginx has no worker process"
say "cluster ready in $((SECONDS - STARTED_AT)) s: gateways ${GATEWAY_PID[*]}, nginx $NGINX_PID"

say "users, devices and group $CONV_ID through nginx"
declare -A TOKENS
for user in "${USERS[@]}"; do
  post "$ADMIN_TOKEN" /v1/admin/users "{\"user_id\":\"$user\"}" >/dev/null
  TOKENS[$user]=$(post "$ADMIN_TOKEN" "/v1/admin/users/$user/devices" '{"device_id":"d1"}' \
    | json_field token)
done
post "${TOKENS[ana]}" /v1/conversations \
  "{\"kind\":\"group\",\"conv_id\":\"$CONV_ID\",\"members\":[\"ben\",\"cy\"]}" >/dev/null

say "one WebSocket per device through nginx"
open_socket ben
open_socket cy
open_socket ana "$CONV_ID" ws-1 over-ws-1
declare -A ROUTE
while read -r user gateway; do
  ROUTE[$user]=$gateway
done < <(sql "SELECT user_id || ' ' || gateway_id FROM routes ORDER BY user_id")
say "routes: ana on ${ROUTE[ana]}, ben on ${ROUTE[ben]}, cy on ${ROUTE[cy]}"
distinct=$(printf '%s\n' "${ROUTE[@]}" | sort -u | wc -l)
(( distinct == 3 )) || die "the three WebSockets are on $distinct gateways, not 3 (least_conn)"

say "sends over WebSocket and HTTP reach every device on every gateway"
wait_for "$DELIVERY_WAIT_S" "the ack of the WebSocket send" grep -q '"type":"ack"' "$WORK/ws-ana.out"
for i in 1 2 3; do
  post "${TOKENS[cy]}" "/v1/conversations/$CONV_ID/messages" \
    "{\"client_msg_id\":\"http-$i\",\"body\":\"over-http-$i\"}" >/dev/null
done
for user in "${USERS[@]}"; do
  for body in over-ws-1 over-http-1 over-http-2 over-http-3; do
    wait_for "$DELIVERY_WAIT_S" "$body at $user" has_received "$user" "$body"
  done
done

victim=${ROUTE[ben]}
victim_pid=${GATEWAY_PID[$victim]}
victim_port=$(sed -n "s/^gateway $victim pid [0-9]* at http:\/\/127.0.0.1:\([0-9]*\) .*/\1/p" \
  "$WORK/cluster.out")
say "SIGKILL to $victim (pid $victim_pid, port $victim_port), the gateway of ben's socket"
curl -fsS "http://127.0.0.1:$victim_port/readyz" >/dev/null \
  || die "$victim did not answer directly before the kill"
kill -KILL "$victim_pid"
wait_for 10 "$victim to exit" gone "$victim_pid"
wait_for "$DELIVERY_WAIT_S" "ben's socket to close" has_line "$WORK/ws-ben.out" closed
# Negative control: the killed gateway refuses a direct request, so what succeeds below
# succeeds because nginx leaves it out.
if curl -fsS --max-time 2 "http://127.0.0.1:$victim_port/readyz" >/dev/null 2>&1; then
  die "the killed gateway still answers directly"
fi

say "$REQUESTS_AFTER_KILL requests through nginx with one gateway down"
failed=0
for i in $(seq 1 "$REQUESTS_AFTER_KILL"); do
  case $((i % 3)) in
    0) curl -fsS "$URL/readyz" >/dev/null || failed=$((failed + 1)) ;;
    1) curl -fsS -H "Authorization: Bearer ${TOKENS[ana]}" "$URL/v1/conversations/$CONV_ID" \
         >/dev/null || failed=$((failed + 1)) ;;
    2) post "${TOKENS[cy]}" "/v1/conversations/$CONV_ID/messages" \
         "{\"client_msg_id\":\"after-$i\",\"body\":\"after-kill-$i\"}" >/dev/null \
         || failed=$((failed + 1)) ;;
  esac
done
(( failed == 0 )) || die "$failed of $REQUESTS_AFTER_KILL requests through nginx failed"
for user in ana cy; do
  for i in $(seq 2 3 "$REQUESTS_AFTER_KILL"); do
    wait_for "$DELIVERY_WAIT_S" "after-kill-$i at $user" has_received "$user" "after-kill-$i"
  done
done

say "ben reconnects through nginx"
route_moved() { [[ "$(sql "SELECT gateway_id FROM routes WHERE user_id = 'ben'")" != "$victim" ]]; }
open_socket ben
wait_for 10 "ben's route to leave $victim" route_moved
post "${TOKENS[ana]}" "/v1/conversations/$CONV_ID/messages" \
  '{"client_msg_id":"back-1","body":"after-reconnect-1"}' >/dev/null
for user in "${USERS[@]}"; do
  wait_for "$DELIVERY_WAIT_S" "after-reconnect-1 at $user" has_received "$user" after-reconnect-1
done
# Each message once: ben's file holds only what his second socket received.
for check in ana:over-ws-1 ana:over-http-1 ana:after-kill-2 ana:after-reconnect-1 \
  cy:over-ws-1 cy:over-http-1 cy:after-kill-2 cy:after-reconnect-1 ben:after-reconnect-1; do
  n=$(received "${check%%:*}" "${check#*:}")
  (( n == 1 )) || die "${check#*:} arrived $n times at ${check%%:*}, not once"
done

say "SIGTERM to scripts/cluster.sh"
read -r -a started <<<"${GATEWAY_PID[*]} $NGINX_PID $NGINX_WORKERS"
# Negative control: the check below sees the cluster's processes while they run.
[[ -n "$(alive "${started[@]}")" ]] || die "the process check sees none of the running cluster"
kill -TERM "$CLUSTER_PID"
wait_for "$CLUSTER_STOP_WAIT_S" "scripts/cluster.sh to exit" gone "$CLUSTER_PID"
cluster_status=0
wait "$CLUSTER_PID" || cluster_status=$?
CLUSTER_PID=""
(( cluster_status == 0 )) || die "scripts/cluster.sh exited with status $cluster_status"
grep -q -F "parley cluster stopped" "$WORK/cluster.out" || die "cluster.sh did not report its stop"
left=$(alive "${started[@]}")
[[ -z "$left" ]] || die "processes left after the stop: $left"
for port in "$PORT" "$GW1" "$GW2" "$GW3"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    die "127.0.0.1:$port still accepts connections after the stop"
  fi
done
say "cluster smoke passed in $((SECONDS - STARTED_AT)) s"
