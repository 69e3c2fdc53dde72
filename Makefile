# Two entry points for a newcomer:  `make run` (the demo)  and  `make test` (the whole suite).
# Both create the virtualenv and obtain the Kubernetes binaries (cached outside the repository) first.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: run test lint typecheck pytest binaries clean

run: $(VENV)/.installed binaries
	$(BIN)/multikueue demo

test: lint typecheck binaries pytest

lint: $(VENV)/.installed
	@echo "==> ruff"
	$(BIN)/ruff check multikueue tests e2e
	$(BIN)/ruff format --check multikueue tests e2e

typecheck: $(VENV)/.installed
	@echo "==> mypy (strict)"
	$(BIN)/mypy

binaries: $(VENV)/.installed
	@echo "==> kube-apiserver, kubectl and etcd (KUBEBUILDER_ASSETS, the cache, or a build from the Go module proxy)"
	$(BIN)/multikueue testbed binaries

pytest: $(VENV)/.installed
	@echo "==> pytest"
	$(BIN)/pytest --durations=15

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python >= 3.11 is required, found " + sys.version'
	@echo "==> creating $(VENV) and installing the project with its test dependencies"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --progress-bar on -e '.[test]'
	@touch $@

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache *.egg-info
