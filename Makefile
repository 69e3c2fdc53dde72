# Two entry points for a newcomer:  `make run` (the demo)  and  `make test` (the whole suite).
# Both create the virtualenv and obtain the Kubernetes binaries (cached outside the repository) first.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

PHONY_SIM := simulate
.PHONY: $(PHONY_SIM) run test soak soak-short bench bench-all lint typecheck pytest e2e interop e2e-images docker-engine binaries clean kind-up kind-down e2e-kind

run: $(VENV)/.installed binaries
	$(BIN)/multikueue demo

test: lint typecheck binaries pytest e2e soak-short

lint: $(VENV)/.installed
	@echo "==> ruff"
	$(BIN)/ruff check multikueue testbed tests e2e bench
	$(BIN)/ruff format --check multikueue testbed tests e2e bench
	@echo "==> import contracts (the layers in docs/architecture.md)"
	$(BIN)/lint-imports
	@echo "==> every imported distribution declared, none unused (deptry; the test bed against its own pyproject.toml)"
	$(BIN)/deptry .
	$(BIN)/deptry testbed --config testbed/pyproject.toml

typecheck: $(VENV)/.installed
	@echo "==> mypy (strict)"
	$(BIN)/mypy

binaries: $(VENV)/.installed
	@echo "==> kube-apiserver, kubectl and etcd (KUBEBUILDER_ASSETS, the cache, or a build from the Go module proxy)"
	$(BIN)/multikueue testbed binaries
	@echo "==> helm, promtool and prometheus (the chart's and the monitoring's tests; built once from their Go modules)"
	$(BIN)/python -c "from multikueue_testbed.interop import helm_binary; print(helm_binary(print))"
	$(BIN)/python -c "from multikueue_testbed.interop import prometheus_binary as p; print(p('promtool', print), p('prometheus', print))"

pytest: $(VENV)/.installed
	@echo "==> Kueue v0.19.2 as released and with the worker-client fix (test_kueue_fix.py, the bench; built once from the Go module proxy, ~5 min each cold)"
	$(BIN)/python -c "from bench.kueue import FIX_PATCH; from multikueue_testbed.interop import kueue_binary, patched_kueue_binary; print(kueue_binary(print)); print(patched_kueue_binary(FIX_PATCH, print))"
	@echo "==> pytest"
	$(BIN)/pytest --durations=15

# The e2e suite on each provider in $MULTIKUEUE_E2E_PROVIDERS (default: local, plus testcontainers where a Docker
# engine answers). Providers: local, testcontainers, kind (e2e/README.md).
e2e: $(VENV)/.installed binaries
	@providers="$${MULTIKUEUE_E2E_PROVIDERS:-local $$($(BIN)/python -c 'import docker; docker.from_env().ping(); print("testcontainers")' 2>/dev/null)}"; \
	case " $$providers " in *" testcontainers "*) ;; *) echo "==> e2e on testcontainers: not run (no Docker engine answers; as root, make docker-engine)";; esac; \
	for provider in $$providers; do \
		if [ "$$provider" = testcontainers ]; then echo "==> e2e images (debootstrap base once, then the Dockerfile)"; $(BIN)/python -m e2e.images || exit 1; fi; \
		echo "==> e2e on $$provider"; \
		MULTIKUEUE_E2E_PROVIDER=$$provider $(BIN)/pytest e2e --ignore=e2e/interop -o timeout=900 --durations=5 || exit 1; \
	done

# The fault soak (bench/README.md): SOAK_ARGS for other shapes, e.g. SOAK_ARGS="--mode direct --workers 5 --rate 10
# --duration 3600 --fault-interval 30". Writes bench/results/soak-*.json, its page (.md) and timeline plot (.png).
SOAK_ARGS ?= --mode kueue --workers 3 --rate 5 --duration 600 --fault-interval 20
soak: $(VENV)/.installed binaries
	$(BIN)/pip install --quiet -e '.[test,bench]'
	$(BIN)/python -m bench.soak --report $(SOAK_ARGS)

# Three minutes of the soak, every fault in turn; fails when an invariant breaks (part of `make test`).
soak-short: $(VENV)/.installed binaries
	@echo "==> a 3-minute fault soak (Kueue mode, 2 replicas, every fault in turn; bench/README.md)"
	$(BIN)/python -m bench.soak --duration 180 --rate 3 --fault-interval 10 --drain-timeout 600 --check --out build/soak-short.json

# The deterministic simulation (tests/sim, #55): the whole dispatcher against in-memory clusters on virtual time,
# SEEDS schedules per lost-worker policy, every invariant checked at every change; a violation prints its replay.
SEEDS ?= 100
simulate: $(VENV)/.installed
	$(BIN)/python -m tests.sim --seeds $(SEEDS)

# The interop profile (e2e/interop, #9): real Kueue, Tekton, kwok, kube-controller-manager and kube-scheduler, built
# from their Go modules (cached; ~20 min cold) and run on a bed of their own.
interop: $(VENV)/.installed binaries
	@echo "==> interop components: Kueue, kwok, Tekton, tekton-kueue, JobSet, controller-manager, scheduler (built once from their Go modules; ~10 min cold)"
	$(BIN)/python -c "from multikueue_testbed.interop import build_components; build_components(print)"
	@echo "==> interop: real Kueue on every cluster, Tekton on the workers, pods run by kwok"
	$(BIN)/pytest e2e/interop -o timeout=1800 --durations=5
# The benchmark (bench/README.md): BENCH_ARGS for one run, e.g. BENCH_ARGS="--mode direct --workers 5 --objects 1000";
# `make bench-all` runs the committed matrix. Results land in bench/results/ (JSON, README.md table, plot.png).
BENCH_ARGS ?= --mode kueue --workers 3 --objects 1000
bench: $(VENV)/.installed binaries
	$(BIN)/pip install --quiet -e '.[test,bench]'
	$(BIN)/python -m bench.run $(BENCH_ARGS)
	$(BIN)/python -m bench.report

bench-all: $(VENV)/.installed binaries
	$(BIN)/pip install --quiet -e '.[test,bench]'
	bench/matrix.sh
	$(BIN)/python -m bench.report

e2e-images: $(VENV)/.installed binaries
	$(BIN)/python -m e2e.images

docker-engine:
	e2e/docker-engine.sh

# Three kind clusters on this machine with no registry (e2e/kind/README.md): the kind engine (its own socket and
# data root), the node image and everything in it built from Debian's packages and Go modules (cached by version;
# ~20 min cold), then mk-manager, mk-worker1, mk-worker2. The host's kernel settings are checked unchanged.
KIND_DOCKER_HOST := unix:///run/multikueue-kind/docker.sock
kind-up: $(VENV)/.installed binaries
	e2e/kind/engine.sh start >/dev/null
	DOCKER_HOST=$(KIND_DOCKER_HOST) $(BIN)/python -m e2e.kind.clusters up

# The kind e2e (e2e/README.md): the three clusters above with real Kueue on each and real Tekton on the workers, the
# dispatcher deployed from config/manager, and the scenarios in e2e/kind/test_kind.py. Where no registry answers,
# every image is built here and cached by version. MULTIKUEUE_E2E_KIND_KEEP=1 keeps the clusters afterwards.
e2e-kind: $(VENV)/.installed binaries
	@echo "==> e2e on kind: engine, node image, clusters, Kueue, Tekton, the deployment (built once, then cached)"
	MULTIKUEUE_E2E_PROVIDER=kind $(BIN)/pytest e2e -s -o timeout=3600 --durations=10

kind-down: $(VENV)/.installed
	DOCKER_HOST=$(KIND_DOCKER_HOST) $(BIN)/python -m e2e.kind.clusters down
	e2e/kind/engine.sh stop

# The controller with its test dependencies and the test bed (testbed/, a distribution of its own), both editable.
$(VENV)/.installed: pyproject.toml testbed/pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python >= 3.11 is required, found " + sys.version'
	@echo "==> creating $(VENV) and installing the project with its test dependencies and the test bed"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --progress-bar on -e '.[test]' -e ./testbed
	@touch $@

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache *.egg-info testbed/*.egg-info
