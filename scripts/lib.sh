# shellcheck shell=bash
# Shared by the scripts in this folder: messages, tool checks, ports and waits. Sourced, never
# run: `source "$(dirname "$0")/lib.sh"` after `set -euo pipefail`.

say() { printf '==> %s\n' "$*"; }
warn() { printf 'warning: %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# Fails with how to install it when the command $1 is missing; $2 is the install hint.
require_cmd() {
  command -v "$1" >/dev/null 2>&1 || die "$1 is required: ${2:-install it}"
}

# Succeeds when something accepts TCP connections on host $1, port $2.
tcp_open() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# Prints $1 (default 1) loopback ports that were free a moment ago, separated by spaces.
free_ports() {
  python3 -c '
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))' "${1:-1}"
}

# Waits until a command succeeds, at most $1 seconds, polling every tenth of a second; $2 says
# what is awaited, for the error.
wait_for() {
  local limit_s=$1 what=$2
  shift 2
  local waited=0
  until "$@"; do
    (( waited >= limit_s * 10 )) && die "timed out after ${limit_s} s waiting for $what"
    sleep 0.1
    waited=$((waited + 1))
  done
}

# The directory cargo builds into: CARGO_TARGET_DIR, a cargo configuration's, or ./target.
cargo_target_dir() {
  cargo metadata --no-deps --format-version 1 \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])'
}

# Builds the debug `parley` binary of this checkout and prints its path. The scripts call it
# only without PARLEY_BIN; scripts/test.sh hands them the binary of its one build instead.
build_parley_debug() {
  say "cargo build -p parley" >&2
  cargo build --quiet -p parley || return 1
  local target
  target=$(cargo_target_dir) || return 1
  printf '%s\n' "$target/debug/parley"
}

# Installs Debian's package $2 when the command $1 is missing; $3 says what needs it. Needs
# root and apt-get; without them, or when the install fails, it stops the script.
ensure_package() {
  local cmd="$1" package="$2" why="$3"
  command -v "$cmd" >/dev/null 2>&1 && return
  (( EUID == 0 )) && command -v apt-get >/dev/null 2>&1 \
    || die "$cmd is missing and cannot be installed here; install it (apt-get install $package): $why"
  say "$cmd is missing; installing Debian's package $package"
  DEBIAN_FRONTEND=noninteractive apt-get install -y "$package" >/dev/null \
    || { apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y "$package" >/dev/null; } \
    || die "apt-get install $package failed: $why"
}
