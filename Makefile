# eagle-workbench: the two commands a new user needs are `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
REPORT_DIR ?= reports
PYTEST_ARGS ?=

.PHONY: setup browser demo test test-fast bench sandbox-models clean-reports lab

# The virtual environment: torch pinned to the CPU build through constraints.txt (an unpinned
# torch pulls a multi-GB CUDA build), the project installed editable with its test extras.
$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test]'
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (eagle-workbench)" >/dev/null
	touch $(STAMP)

setup: $(STAMP)

# Headless Chromium for the test that opens the HTML report offline and checks the plots are
# drawn. Installed with apt when missing and we are root; otherwise say what to install.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null; \
	  else echo "note: install chromium (apt-get install chromium) for the browser tests"; fi

# The main job on the embedded sandbox box: diagnose accept length ~1.00, verify the fix, report.
demo: setup
	$(VENV)/bin/workbench runbook diagnose_acceptance --report-dir "$(REPORT_DIR)"
	@echo "report: $(REPORT_DIR)/diagnose_acceptance.html  verdict: $(REPORT_DIR)/diagnose_acceptance.json"

test: setup browser
	$(PY) -m pytest -q $(PYTEST_ARGS)

# The edit-test loop: only the tests that start nothing (no server, sshd, notebook kernel or
# browser; those are marked slow, see tests/conftest.py), in seconds. Under "not slow" a guard
# makes any such start fail the test, so a test missing its mark is caught here.
test-fast: setup
	$(PY) -m pytest -q -p no:cacheprovider -m "not slow" $(PYTEST_ARGS)

# All benchmarks always run; make fails (exit 1) when one misses a goal.
bench: setup
	@status=0; \
	$(PY) benchmarks/bench_sandbox.py --out "$(REPORT_DIR)/bench_sandbox.json" || status=1; \
	$(PY) benchmarks/bench_ssh.py --out "$(REPORT_DIR)/bench_ssh.json" || status=1; \
	$(PY) benchmarks/bench_doctor.py --out "$(REPORT_DIR)/bench_doctor.json" || status=1; \
	$(PY) benchmarks/bench_logs.py --out "$(REPORT_DIR)/bench_logs.json" || status=1; \
	exit $$status

# Regenerate the sandbox target and drafts (fixed seeds; the weights are committed).
sandbox-models: setup
	$(PY) -m workbench.sandbox.train

lab: setup
	$(PY) -m pip install --quiet -c constraints.txt -e '.[lab]'
	$(VENV)/bin/jupyter lab notebooks/

clean-reports:
	rm -rf -- "$(REPORT_DIR)"
