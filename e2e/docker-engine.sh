#!/usr/bin/env bash
# A Docker engine for the testcontainers provider, on a Debian machine without one (run as root):
# installs docker.io and debootstrap from Debian's packages and starts dockerd with the vfs storage driver
# (works inside containers and sandboxes without overlayfs). Prints the PID of a dockerd it started, so the
# caller can stop what it started; prints nothing when an engine already answers.
set -euo pipefail
say() { printf '[docker-engine] %s\n' "$*" >&2; }

if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
  [ "$(id -u)" = 0 ] || { say "docker.io and debootstrap are missing; run this as root to install them"; exit 3; }
  say "installing docker.io and debootstrap from Debian's packages"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io debootstrap >/dev/null
fi
python3 - <<'PY' 2>/dev/null && { say "a Docker engine already answers"; exit 0; }
import socket
s = socket.socket(socket.AF_UNIX); s.settimeout(2); s.connect("/var/run/docker.sock")
s.sendall(b"GET /_ping HTTP/1.0\r\n\r\n"); assert b"200 OK" in s.recv(100)
PY
[ "$(id -u)" = 0 ] || { say "no Docker engine answers and starting dockerd needs root"; exit 3; }
log=${DOCKERD_LOG:-/var/log/multikueue-dockerd.log}
say "starting dockerd --storage-driver=vfs (log: $log)"
setsid dockerd --storage-driver=vfs >"$log" 2>&1 < /dev/null &
pid=$!
for _ in $(seq 1 60); do
  if [ -S /var/run/docker.sock ] && python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.connect("/var/run/docker.sock")' 2>/dev/null; then
    say "dockerd is up (PID $pid)"; echo "$pid"; exit 0
  fi
  kill -0 "$pid" 2>/dev/null || { say "dockerd exited:"; tail -20 "$log" >&2; exit 1; }
  sleep 1
done
say "dockerd did not answer within 60 s:"; tail -20 "$log" >&2; exit 1
