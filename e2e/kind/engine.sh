#!/usr/bin/env bash
# A Docker engine of the kind e2e's own: its own socket, data root and pid file, so it never touches another
# engine on the machine (the testcontainers provider's, a user's).
#
#   e2e/kind/engine.sh start   # prints the DOCKER_HOST to use; installs docker.io and jq from Debian if missing
#   e2e/kind/engine.sh stop    # stops the engine this script started (by its pid file) and removes its bridges
#
# kind's node containers are privileged. This machine's capability bounding set lacks CAP_SYS_RESOURCE while
# dockerd grants a privileged container every capability the kernel knows, so runc refuses to start them: the
# engine's default runtime is e2e/kind/runc-without-sys-resource, which drops that one capability first.
# No default bridge and no iptables rules: kind makes its own network, reached on the host through the published
# API server ports (docker's userland proxy); nothing is left in the host's firewall.
set -euo pipefail
say() { printf '[kind engine] %s\n' "$*" >&2; }

here=$(cd "$(dirname "$0")" && pwd)
state=${MULTIKUEUE_KIND_STATE:-/run/multikueue-kind}
root=${MULTIKUEUE_KIND_DOCKER_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/multikueue/kind/docker}
socket="$state/docker.sock"
export DOCKER_HOST="unix://$socket"

answers() { docker version >/dev/null 2>&1; }

start() {
  if ! command -v dockerd >/dev/null || ! command -v jq >/dev/null || ! command -v runc >/dev/null; then
    [ "$(id -u)" = 0 ] || { say "docker.io, runc and jq are missing; run this as root to install them"; exit 3; }
    say "installing docker.io, runc and jq from Debian's packages"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io runc jq >/dev/null
  fi
  mkdir -p "$state" "$root"
  if answers; then say "the engine already answers at $socket"; echo "$DOCKER_HOST"; return; fi
  [ "$(id -u)" = 0 ] || { say "starting dockerd needs root"; exit 3; }
  say "starting dockerd (socket $socket, data root $root)"
  setsid dockerd --host "$DOCKER_HOST" --data-root "$root" --exec-root "$state/exec" --pidfile "$state/dockerd.pid" \
    --bridge=none --iptables=false --ip6tables=false --ip-forward=false \
    --add-runtime "without-sys-resource=$here/runc-without-sys-resource" --default-runtime without-sys-resource \
    >"$state/dockerd.log" 2>&1 </dev/null &
  for _ in $(seq 1 60); do
    if answers; then say "dockerd is up (pid $(cat "$state/dockerd.pid"))"; echo "$DOCKER_HOST"; return; fi
    sleep 1
  done
  say "dockerd did not answer within 60 s:"; tail -20 "$state/dockerd.log" >&2; exit 1
}

stop() {
  [ -f "$state/dockerd.pid" ] || { say "no engine of ours is running"; return; }
  pid=$(cat "$state/dockerd.pid")
  # The bridges of this engine's networks are named after the network ids: remember them before it stops.
  bridges=$(docker network ls -q --filter driver=bridge 2>/dev/null | sed 's/^/br-/' || true)
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    say "dockerd (pid $pid) stopped"
  fi
  for bridge in $bridges; do
    ip link show "$bridge" >/dev/null 2>&1 && ip link delete "$bridge" && say "removed bridge $bridge"
  done
  rm -f "$state/dockerd.pid"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
