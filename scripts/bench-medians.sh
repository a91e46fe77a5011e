#!/usr/bin/env bash
# Runs one `parley bench` scenario several times against a running server and prints the
# median of the headline figures of its reports (docs/PERFORMANCE.md gives medians of 3).
#
#   scripts/bench-medians.sh RUNS OUT_DIR -- <parley bench arguments, --out excluded>
#
# Before each run it waits (at most WAIT_QUIET_S seconds, default 180) until the machine's
# 1-minute load average is below QUIET_LOAD (default 2.5), since anything else running on the
# same cores skews the figures. PARLEY names the binary (default target/release/parley).
set -euo pipefail

runs=${1:?runs}
out=${2:?out dir}
shift 2
[[ "${1:-}" == "--" ]] && shift
parley=${PARLEY:-target/release/parley}
quiet_load=${QUIET_LOAD:-2.5}
wait_quiet_s=${WAIT_QUIET_S:-180}

load1() { cut -d' ' -f1 /proc/loadavg; }

wait_quiet() {
  local waited=0
  while awk -v l="$(load1)" -v q="$quiet_load" 'BEGIN { exit !(l >= q) }'; do
    (( waited >= wait_quiet_s )) && { echo "load still $(load1) after ${waited}s; running anyway" >&2; return; }
    sleep 5
    waited=$((waited + 5))
  done
}

mkdir -p "$out"
for i in $(seq 1 "$runs"); do
  wait_quiet
  echo "run $i/$runs (load $(load1))" >&2
  "$parley" bench "$@" --out "$out/run$i" > "$out/run$i.txt" 2> "$out/run$i.err"
  tail -n 12 "$out/run$i.txt" >&2
done

# The median of a numeric field over the runs' reports (nulls skipped).
median() {
  jq -s "[.[] | $1 | select(. != null)] | sort | if length == 0 then null else .[(length - 1) / 2 | floor] end" \
    "$out"/run*/report.json
}
for field in .throughput_per_s .sends_acked .errors .violations.total \
  .ack_latency_ms.p50 .ack_latency_ms.p95 .ack_latency_ms.p99 .ack_latency_ms.max \
  .push_latency_ms.p50 .push_latency_ms.p95 .push_latency_ms.p99 .push_latency_ms.max \
  .baseline_tps .baseline_concurrency .ratio_to_baseline .peak_concurrency \
  .recovery.reconnect_ms.p50 .recovery.reconnect_ms.max .recovery.caught_up_ms.p50 \
  .recovery.caught_up_ms.max .machine.load_average_1m_at_end; do
  printf '%-36s %s\n' "$field" "$(median "$field")"
done
