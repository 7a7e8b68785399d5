# npu_lab — every target works on a fresh machine: it creates .venv itself.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
NBVAL_TIMEOUT ?= 120

.PHONY: lab test test-unit test-notebooks test-browser notebooks bench install clean

install: $(STAMP)

# Re-install when the package description changes.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# `make lab`: JupyterLab on notebooks/, whoever runs it. As root (containers, cloud boxes, CI
# images) Jupyter refuses to start without --allow-root, so add it then. The course's own
# JupyterLab settings (the "get notified about official Jupyter news?" pop-up switched off) live
# in .jupyter/lab/settings/overrides.json, not in the user's settings. The token is made here so
# the URL printed before the server starts is the one to open (port_retries=0: that port or fail).
LAB_IP    ?= 127.0.0.1
LAB_PORT  ?= 8888
ifndef LAB_TOKEN
LAB_TOKEN := $(shell $(PYTHON) -c 'import secrets; print(secrets.token_hex(16))')
endif
LAB_ARGS  ?=
LAB_ROOT  := $(if $(filter 0,$(shell id -u)),--allow-root)
LAB_SETTINGS := $(CURDIR)/.jupyter/lab/settings

lab: install  ## start JupyterLab on the course notebooks and print the URL to open
	@echo "npu_lab: JupyterLab on notebooks/ -- open http://$(LAB_IP):$(LAB_PORT)/lab?token=$(LAB_TOKEN)  (Ctrl-C twice stops it)"
	$(VENV)/bin/jupyter lab notebooks/ --ip=$(LAB_IP) --port=$(LAB_PORT) --ServerApp.port_retries=0 \
		--IdentityProvider.token=$(LAB_TOKEN) --LabApp.app_settings_dir=$(LAB_SETTINGS) $(LAB_ROOT) $(LAB_ARGS)

test: test-unit test-notebooks  ## unit tests, then every notebook under nbval

test-unit: install
	$(PY) -m pytest -q tests

test-notebooks: install
	$(PY) -m pytest -q -p no:randomly --nbval --nbval-current-env \
		--nbval-sanitize-with tests/nbval_sanitize.cfg \
		--nbval-cell-timeout=$(NBVAL_TIMEOUT) notebooks/

notebooks: install  ## re-execute every notebook and strip widget state / metadata noise
	$(PY) scripts/run_notebooks.py notebooks/*.ipynb

test-browser: install  ## slider notebooks in a real headless chromium (JupyterLab and Voila)
	bash scripts/install_browser_deps.sh
	$(PY) -m pytest -m browser -q -p no:cacheprovider tests/browser

bench: install  ## speed figures, measured in one run
	$(PY) scripts/bench.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
