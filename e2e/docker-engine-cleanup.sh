#!/usr/bin/env bash
# Remove what a dockerd started by e2e/docker-engine.sh leaves in the host's network once it has stopped: its
# iptables rules and chains (dockerd does not remove them on exit) and its docker0 bridge. Run only after the
# engine this run started is gone; it touches nothing that does not name docker.
set -uo pipefail
for table in filter nat; do
  iptables -t "$table" -S 2>/dev/null | grep -i docker | grep '^-A ' | sed 's/^-A /-D /' | while read -r rule; do
    eval "iptables -t $table $rule" 2>/dev/null || true
  done
  for chain in $(iptables -t "$table" -S 2>/dev/null | awk '$1 == "-N" && tolower($2) ~ /docker/ {print $2}'); do
    iptables -t "$table" -F "$chain" 2>/dev/null || true
    iptables -t "$table" -X "$chain" 2>/dev/null || true
  done
done
if ip link show docker0 >/dev/null 2>&1; then ip link delete docker0 2>/dev/null || true; fi
