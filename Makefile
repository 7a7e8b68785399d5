# npu_lab — every target works on a fresh machine: it creates .venv itself.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
NBVAL_TIMEOUT ?= 120

.PHONY: lab test test-unit test-notebooks test-browser notebooks bench install clean release grade instructor check-cpp

install: $(STAMP)

# Re-install when the package description changes.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# `make lab`: JupyterLab on notebooks/, whoever runs it. As root (containers, cloud boxes, CI
# images) Jupyter refuses to start without --allow-root, so add it then. The course's own
# JupyterLab settings (the "get notified about official Jupyter news?" pop-up switched off, the
# kernel's execution indicator in the status bar: in the toolbar it slowed every slider move) live
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

# The student notebooks (outputs compared; unfinished exercises must not raise), then the
# instructor notebooks (outputs not stored, so --nbval-lax: every cell runs, and every hidden test
# asserts that its solution passes its check). Before instructor/ exists only the first runs.
INSTRUCTOR_NBS = $(wildcard instructor/[0-9][0-9]*_*.ipynb)

test-notebooks: install
	$(PY) -m pytest -q -p no:randomly --nbval --nbval-current-env \
		--nbval-sanitize-with tests/nbval_sanitize.cfg \
		--nbval-cell-timeout=$(NBVAL_TIMEOUT) notebooks/
	$(if $(INSTRUCTOR_NBS),$(PY) -m pytest -q -p no:randomly --nbval-lax --nbval-current-env \
		--nbval-cell-timeout=$(NBVAL_TIMEOUT) instructor/,@echo "no instructor/ notebooks yet: only notebooks/ ran (python scripts/make_instructor.py creates them)")

# The student notebooks are generated from instructor/ (nbgrader), then executed: re-executing
# them is releasing them again, so one target does both.
notebooks: release  ## re-generate and re-execute every student notebook (strips widget state)

# Instructors (docs/instructors.md). instructor/NN_*.ipynb hold the solutions; `make release` writes
# the student notebooks/ from them: nbgrader metadata from the in-cell markers, nbgrader's
# generate_assignment in a temporary course folder, then executed by scripts/run_notebooks.py.
release: install  ## student notebooks/ from instructor/ (nbgrader generate_assignment, executed)
	$(PY) scripts/nbgrader_metadata.py --strip-outputs 'instructor/[0-9][0-9]*_*.ipynb'
	$(PY) scripts/release.py

# make grade SUBMISSIONS=dir [GRADES=out] [ROSTER=file] [GRADE_TIMEOUT_S=120] [GRADE_MEMORY_GB=4]:
# dir/<student>/<NN_name>.ipynb -> scores CSV + feedback; each notebook in a sandboxed process
# with that wall-clock and memory limit (docs/instructors.md)
GRADE_TIMEOUT_S ?= 120
GRADE_MEMORY_GB ?= 4
grade: install  ## autograde SUBMISSIONS=dir with nbgrader: scores.csv and feedback pages
	@test -n "$(SUBMISSIONS)" || { echo "usage: make grade SUBMISSIONS=dir [GRADES=outdir] [ROSTER=file] [GRADE_TIMEOUT_S=120] [GRADE_MEMORY_GB=4]  (dir/<student>/<NN_name>.ipynb)"; exit 2; }
	$(PY) -m npu_lab grade '$(SUBMISSIONS)' $(if $(GRADES),-o '$(GRADES)') $(if $(ROSTER),--roster '$(ROSTER)') \
		--timeout-s $(GRADE_TIMEOUT_S) --memory-gb $(GRADE_MEMORY_GB)

instructor: install  ## once: copy notebooks/ to instructor/ with nbgrader metadata (then make release)
	$(PY) scripts/make_instructor.py

test-browser: install  ## slider notebooks in a real headless chromium (JupyterLab and Voila)
	bash scripts/install_browser_deps.sh
	$(PY) -m pytest -m browser -q -p no:cacheprovider tests/browser

# The C++ listings against asc-devkit's real headers (ASC_DEVKIT_DIR, else ../shared/asc-devkit):
# device-mode syntax check with libclang (the wheel, installed here), every chip each listing claims.
check-cpp: install  ## compile every C++ listing against asc-devkit's headers (libclang)
	$(PY) -c 'import clang.cindex' 2>/dev/null || $(PY) -m pip install --quiet 'libclang>=18.1'
	$(PY) -m pytest -q -p no:randomly tests/test_cpp_compile.py tests/test_check_cpp.py tests/test_decode_cpp_builds.py

bench: install  ## speed figures, measured in one run
	$(PY) scripts/bench.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
