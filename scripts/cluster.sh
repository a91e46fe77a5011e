#!/usr/bin/env bash
# Runs a Parley cluster on this machine: three `parley serve` gateways on one PostgreSQL
# database with the NATS bus between them, behind nginx on loopback. Prints the URL, the
# gateways and the admin token, then runs until Ctrl-C or SIGTERM and stops everything it
# started (the gateways, nginx, and a NATS server if it had to start one).
#
#   scripts/cluster.sh [--port N] [--gateway-ports A,B,C] [--database-url URL] [--nats-url URL]
#
# Every flag has an environment variable: PARLEY_CLUSTER_PORT (nginx, default 8080),
# PARLEY_CLUSTER_GATEWAY_PORTS (default the three ports after nginx's), PARLEY_DATABASE_URL
# (default postgres://postgres@127.0.0.1:5432/parley_cluster, created when missing),
# PARLEY_NATS_URL (default nats://127.0.0.1:4222). PARLEY_ADMIN_TOKEN is the admin token of
# every gateway (default: generated, printed once). PARLEY_BIN names a built `parley` binary;
# without it the script builds one with `cargo build --release -p parley`. Any other
# PARLEY_* setting of `parley serve` (README, "Configuration") reaches every gateway.
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

readonly PORT_DEFAULT=8080
readonly DATABASE_URL_DEFAULT="postgres://postgres@127.0.0.1:5432/parley_cluster"
readonly NATS_URL_DEFAULT="nats://127.0.0.1:4222"
readonly GATEWAYS=3
# A gateway must answer /readyz within this time of its start.
readonly READY_WAIT_S=60
# Each process stopped gets this long after SIGTERM before SIGKILL.
readonly STOP_WAIT_S=15
readonly NATS_START_WAIT_S=5
# Every client reaches the gateways from nginx's address, so the per-address cap (1,000 by
# default) would cap the whole cluster: it is raised to the process cap.
readonly CONNECTIONS_PER_ADDRESS_MAX=10000
# nginx: a gateway that fails once (refused, reset, timed out, 502/503) is left out for this
# long, then tried again by the next request (passive health checks; open-source nginx has no
# active ones).
readonly UPSTREAM_FAIL_TIMEOUT_S=5
# A WebSocket is idle as far as nginx can tell while no frame flows; the gateway closes
# sockets idle for its own --idle-timeout-ms (60 s), so nginx's must be longer.
readonly PROXY_READ_TIMEOUT_S=3600
# Idle keep-alive connections nginx keeps to each worker's gateways, closed before the
# gateways' own --keepalive-idle-ms (60 s) so that nginx never reuses one a gateway has closed.
readonly UPSTREAM_KEEPALIVE=32
readonly UPSTREAM_KEEPALIVE_TIMEOUT_S=30
readonly WORKER_CONNECTIONS=8192

usage() {
  sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
}

PORT="${PARLEY_CLUSTER_PORT:-$PORT_DEFAULT}"
GATEWAY_PORTS="${PARLEY_CLUSTER_GATEWAY_PORTS:-}"
DATABASE_URL="${PARLEY_DATABASE_URL:-$DATABASE_URL_DEFAULT}"
NATS_URL="${PARLEY_NATS_URL:-$NATS_URL_DEFAULT}"
while (( $# > 0 )); do
  case "$1" in
    --port) PORT="${2:?--port needs a value}"; shift 2 ;;
    --gateway-ports) GATEWAY_PORTS="${2:?--gateway-ports needs a value}"; shift 2 ;;
    --database-url) DATABASE_URL="${2:?--database-url needs a value}"; shift 2 ;;
    --nats-url) NATS_URL="${2:?--nats-url needs a value}"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done
[[ "$PORT" =~ ^[0-9]+$ ]] || die "--port must be a number, not $PORT"
if [[ -z "$GATEWAY_PORTS" ]]; then
  GATEWAY_PORTS="$((PORT + 1)),$((PORT + 2)),$((PORT + 3))"
fi
IFS=, read -r -a PORTS <<<"$GATEWAY_PORTS"
(( ${#PORTS[@]} == GATEWAYS )) || die "--gateway-ports needs $GATEWAYS ports, not '$GATEWAY_PORTS'"
for p in "${PORTS[@]}"; do
  [[ "$p" =~ ^[0-9]+$ ]] || die "--gateway-ports must be numbers, not '$GATEWAY_PORTS'"
done

require_cmd nginx "install Debian's package: apt-get install nginx"
require_cmd curl "apt-get install curl"
require_cmd psql "apt-get install postgresql-client"

for p in "$PORT" "${PORTS[@]}"; do
  ! tcp_open 127.0.0.1 "$p" || die "127.0.0.1:$p is in use; choose other ports (--port, --gateway-ports)"
done

RUN_DIR=$(mktemp -d "${TMPDIR:-/tmp}/parley-cluster.XXXXXX")
# nginx's workers run as an unprivileged user when the script runs as root: they must reach
# their temporary directories inside this one.
chmod 755 "$RUN_DIR"
GATEWAY_PIDS=()
NGINX_PID=""
NATS_PID=""
SLEEP_PID=""

# shellcheck disable=SC2317  # reached from the EXIT trap, through cleanup
# Stops one process: SIGTERM, then SIGKILL if it is still there after STOP_WAIT_S.
stop_pid() {
  local pid=$1 waited=0
  kill -TERM "$pid" 2>/dev/null || return 0
  while kill -0 "$pid" 2>/dev/null && (( waited < STOP_WAIT_S * 10 )); do
    sleep 0.1
    waited=$((waited + 1))
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# shellcheck disable=SC2317  # the EXIT trap
cleanup() {
  local status=$?
  trap - INT TERM EXIT
  [[ -n "$SLEEP_PID" ]] && { kill "$SLEEP_PID" 2>/dev/null || true; }
  [[ -n "$NGINX_PID" ]] && stop_pid "$NGINX_PID"
  local pid
  for pid in "${GATEWAY_PIDS[@]}"; do
    stop_pid "$pid"
  done
  [[ -n "$NATS_PID" ]] && stop_pid "$NATS_PID"
  rm -rf "$RUN_DIR"
  say "parley cluster stopped"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 0' INT TERM

if [[ -n "${PARLEY_BIN:-}" ]]; then
  BIN="$PARLEY_BIN"
  [[ -x "$BIN" ]] || die "PARLEY_BIN=$BIN is not an executable"
else
  say "cargo build --release -p parley"
  cargo build --release --quiet -p parley
  BIN="$PWD/target/release/parley"
fi

# PostgreSQL: the database is created when missing, from the server's `postgres` database.
if ! PGCONNECT_TIMEOUT=3 psql "$DATABASE_URL" -Atqc 'SELECT 1' >/dev/null 2>&1; then
  base="${DATABASE_URL%%\?*}"
  db="${base##*/}"
  [[ "$db" =~ ^[A-Za-z0-9_]+$ ]] || die "PostgreSQL at $DATABASE_URL does not answer"
  say "creating database $db"
  PGCONNECT_TIMEOUT=3 psql "${base%/*}/postgres" -Atqc "CREATE DATABASE \"$db\"" >/dev/null \
    || die "PostgreSQL does not answer at ${base%/*}, or database $db cannot be created"
fi

# NATS: the machine's server, or one started here for the cluster's life when the URL is a
# local one nothing answers on.
nats_hostport="${NATS_URL#nats://}"
nats_hostport="${nats_hostport%%/*}"
nats_host="${nats_hostport%:*}"
nats_port="${nats_hostport##*:}"
if ! tcp_open "$nats_host" "$nats_port"; then
  [[ "$nats_host" == 127.0.0.1 || "$nats_host" == localhost ]] \
    || die "NATS does not answer at $NATS_URL"
  nats_server=$(command -v nats-server || echo /usr/sbin/nats-server)
  [[ -x "$nats_server" ]] || die "NATS does not answer at $NATS_URL and nats-server is not installed: apt-get install nats-server"
  say "starting nats-server on 127.0.0.1:$nats_port"
  "$nats_server" -a 127.0.0.1 -p "$nats_port" >"$RUN_DIR/nats.log" 2>&1 &
  NATS_PID=$!
  waited_s=0
  until tcp_open 127.0.0.1 "$nats_port"; do
    (( waited_s >= NATS_START_WAIT_S )) && die "nats-server did not listen within ${NATS_START_WAIT_S} s"
    sleep 1
    waited_s=$((waited_s + 1))
  done
fi

if [[ -n "${PARLEY_ADMIN_TOKEN:-}" ]]; then
  TOKEN_GENERATED=0
else
  PARLEY_ADMIN_TOKEN="admin-$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')"
  TOKEN_GENERATED=1
fi
export PARLEY_ADMIN_TOKEN

say "parley migrate"
"$BIN" migrate --database-url "$DATABASE_URL" >"$RUN_DIR/migrate.log" 2>&1 \
  || { cat "$RUN_DIR/migrate.log" >&2; die "parley migrate failed"; }

for i in $(seq 1 "$GATEWAYS"); do
  port=${PORTS[$((i - 1))]}
  "$BIN" serve --database-url "$DATABASE_URL" --no-migrate --bus nats --nats-url "$NATS_URL" \
    --gateway-id "gw-$i" --listen "127.0.0.1:$port" \
    --connections-per-address-max "$CONNECTIONS_PER_ADDRESS_MAX" \
    >"$RUN_DIR/gw-$i.log" 2>&1 &
  GATEWAY_PIDS+=("$!")
done

# Readiness: each gateway's /readyz (the store answers and the bus is up) before nginx
# sends it anything.
for i in $(seq 1 "$GATEWAYS"); do
  port=${PORTS[$((i - 1))]}
  pid=${GATEWAY_PIDS[$((i - 1))]}
  waited_s=0
  until curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; do
    if ! kill -0 "$pid" 2>/dev/null; then
      tail -n 20 "$RUN_DIR/gw-$i.log" >&2
      die "gateway gw-$i exited before it was ready"
    fi
    (( waited_s >= READY_WAIT_S * 10 )) && die "gateway gw-$i was not ready within ${READY_WAIT_S} s"
    sleep 0.1
    waited_s=$((waited_s + 1))
  done
done

upstream_servers=""
for p in "${PORTS[@]}"; do
  upstream_servers+="        server 127.0.0.1:$p max_fails=1 fail_timeout=${UPSTREAM_FAIL_TIMEOUT_S}s;"$'\n'
done

cat >"$RUN_DIR/nginx.conf" <<EOF
# Generated by scripts/cluster.sh for one run; removed when the cluster stops.
worker_processes 1;
pid $RUN_DIR/nginx.pid;
error_log $RUN_DIR/nginx-error.log warn;

events {
    worker_connections $WORKER_CONNECTIONS;
}

http {
    access_log off;
    client_body_temp_path $RUN_DIR/client_body;
    proxy_temp_path $RUN_DIR/proxy;
    fastcgi_temp_path $RUN_DIR/fastcgi;
    uwsgi_temp_path $RUN_DIR/uwsgi;
    scgi_temp_path $RUN_DIR/scgi;

    # A WebSocket upgrade is passed on as one; any other request keeps its upstream
    # connection alive (an empty Connection header).
    map \$http_upgrade \$connection_upgrade {
        default upgrade;
        ''      '';
    }

    upstream parley {
        # WebSockets live long: the next connection goes to the gateway with the fewest open.
        least_conn;
$upstream_servers        keepalive $UPSTREAM_KEEPALIVE;
        keepalive_timeout ${UPSTREAM_KEEPALIVE_TIMEOUT_S}s;
    }

    server {
        listen 127.0.0.1:$PORT;

        location / {
            proxy_pass http://parley;
            proxy_http_version 1.1;
            proxy_set_header Upgrade \$http_upgrade;
            proxy_set_header Connection \$connection_upgrade;
            # The port too: a gateway compares a browser's Origin with the Host it was reached by.
            proxy_set_header Host \$http_host;
            proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
            proxy_connect_timeout 2s;
            proxy_read_timeout ${PROXY_READ_TIMEOUT_S}s;
            proxy_send_timeout ${PROXY_READ_TIMEOUT_S}s;
            # A request is passed to the next gateway when one cannot be reached or answers
            # 502/503; a POST only if it never reached the first (nginx's rule for requests
            # that are not idempotent).
            proxy_next_upstream error timeout http_502 http_503;
            proxy_next_upstream_tries $GATEWAYS;
            proxy_buffering off;
        }
    }
}
EOF

nginx -p "$RUN_DIR" -c "$RUN_DIR/nginx.conf" -e "$RUN_DIR/nginx-error.log" -t -q \
  || die "nginx refused the generated configuration ($RUN_DIR/nginx.conf)"
nginx -p "$RUN_DIR" -c "$RUN_DIR/nginx.conf" -e "$RUN_DIR/nginx-error.log" -g 'daemon off;' \
  >"$RUN_DIR/nginx.log" 2>&1 &
NGINX_PID=$!

URL="http://127.0.0.1:$PORT"
waited_s=0
until curl -fsS "$URL/readyz" >/dev/null 2>&1; do
  if ! kill -0 "$NGINX_PID" 2>/dev/null; then
    cat "$RUN_DIR/nginx-error.log" "$RUN_DIR/nginx.log" >&2 || true
    die "nginx exited"
  fi
  (( waited_s >= READY_WAIT_S * 10 )) && die "nginx did not answer within ${READY_WAIT_S} s"
  sleep 0.1
  waited_s=$((waited_s + 1))
done

for i in $(seq 1 "$GATEWAYS"); do
  printf 'gateway gw-%d pid %d at http://127.0.0.1:%d (log %s)\n' \
    "$i" "${GATEWAY_PIDS[$((i - 1))]}" "${PORTS[$((i - 1))]}" "$RUN_DIR/gw-$i.log"
done
printf 'nginx pid %d (config %s)\n' "$NGINX_PID" "$RUN_DIR/nginx.conf"
if (( TOKEN_GENERATED )); then
  printf 'admin token (generated, shown once): %s\n' "$PARLEY_ADMIN_TOKEN"
else
  printf 'admin token: the one in PARLEY_ADMIN_TOKEN\n'
fi
printf 'parley cluster ready at %s (Ctrl-C stops it)\n' "$URL"

# Runs until a signal; a gateway that exits is left out by nginx, but without nginx there is
# no cluster. The sleep runs in the background so that a signal is handled at once.
while kill -0 "$NGINX_PID" 2>/dev/null; do
  sleep 1 &
  SLEEP_PID=$!
  wait "$SLEEP_PID" || true
done
die "nginx exited"
