#!/usr/bin/env bash
# Remove the kind clusters e2e/kind/up.sh created.
set -euo pipefail
for c in mk-manager mk-worker1 mk-worker2; do kind delete cluster --name "$c" || true; done
