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

lab: install  ## start JupyterLab on the course notebooks
	$(VENV)/bin/jupyter lab notebooks/

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
