#!/usr/bin/env bash
# The short chaos run of CI: builds `parley` and runs `parley chaos` on a cluster of its own
# (its own PostgreSQL made with initdb, its own NATS server, three gateways), failing when the
# history checker found any anomaly or a schedule could not run.
#
#   scripts/chaos.sh [more parley chaos flags]
#
# CHAOS_SCHEDULES (default 5), CHAOS_SCHEDULE_S (seconds of load per schedule, default 20),
# CHAOS_SEED (default 1) and CHAOS_OUT (default target/chaos) set the run. PARLEY_BIN names a
# built `parley` binary; without it the script builds the debug one (`cargo build -p parley`).
# The long run of docs/EVIDENCE.md is `parley chaos --schedules 100 --seed 1 --out target/chaos-100`.
# The `partition` fault runs the gateways in network namespaces with nftables rules: as root the
# script installs Debian's nftables package when `nft` is missing; without it (or without root)
# the lab runs the gateways on loopback and lists `partition` in `faults_skipped`.
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
source scripts/lib.sh

schedules="${CHAOS_SCHEDULES:-5}"
schedule_s="${CHAOS_SCHEDULE_S:-20}"
seed="${CHAOS_SEED:-1}"
out="${CHAOS_OUT:-target/chaos}"

ensure_nft() {
  command -v nft >/dev/null 2>&1 && return
  if (( EUID != 0 )) || ! command -v apt-get >/dev/null 2>&1; then
    echo "chaos.sh: nft is missing and cannot be installed here; partitions will be skipped" >&2
    return
  fi
  echo "chaos.sh: nft is missing; installing Debian's nftables package"
  DEBIAN_FRONTEND=noninteractive apt-get install -y nftables >/dev/null \
    || { apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y nftables >/dev/null; } \
    || echo "chaos.sh: apt-get install nftables failed; partitions will be skipped" >&2
}
ensure_nft

bin="${PARLEY_BIN:-$(build_parley_debug)}"

echo "parley chaos: $schedules schedules of $schedule_s s, seed $seed, results in $out"
"$bin" chaos --schedules "$schedules" --seed "$seed" --schedule-s "$schedule_s" --out "$out" "$@"
