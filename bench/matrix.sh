#!/usr/bin/env bash
# The committed benchmark matrix (bench/results/): each line one run of python -m bench.run.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-.venv/bin/python}
run() { echo "==> bench $*" >&2; "$py" -m bench.run "$@" >/dev/null; }
# The targets: W=3 with the shipped defaults, both modes; and the fault run.
run --mode kueue --workers 3 --objects 1000
run --mode direct --workers 3 --objects 1000
run --mode kueue --workers 3 --objects 1000 --faults
# Scaling: W = 2, 5, 10, 20 and N = 100, 1000 (Kueue mode: Kueue allows 20 clusters per MultiKueueConfig), W = 2 to
# 30 in Direct mode, and N = 5000 at W = 3.
for w in 2 5 10; do for n in 100 1000; do run --mode kueue --workers "$w" --objects "$n"; done; done
run --mode kueue --workers 20 --objects 1000
for w in 2 5 10 20 30; do run --mode direct --workers "$w" --objects 1000; done
run --mode kueue --workers 3 --objects 5000 --status-seconds 10
run --mode direct --workers 3 --objects 5000 --status-seconds 10
# The machine's ceiling: the dispatch phase's requests replayed by a Go client (bench/ceiling.py), both modes; two
# Direct-mode shards splitting one load.
run --mode kueue --workers 3 --objects 1000 --backlog
"$py" -m bench.ceiling --mix bench/results/kueue-w3-n1000-backlog.json >/dev/null
"$py" -m bench.ceiling --mix bench/results/direct-w3-n1000.json >/dev/null
run --mode direct --workers 3 --objects 1000 --shards 2
# Side by side with Kueue v0.19.2 (built from its Go module on first use, ~10 min cold): its scheduler with this
# dispatcher, then its own MultiKueue (generic adapter, shipped defaults: ~1.3/s, so N = 300 takes ~8 minutes).
run --mode kueue --kueue real --workers 3 --objects 300
run --mode kueue --dispatcher kueue --workers 3 --objects 300
