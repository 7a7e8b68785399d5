"""Packaging consistency: pyproject.toml, environment.yml (conda / Binder), postBuild
and the Makefile agree with each other.

Run with the unit tests (``make test-unit``) or alone::

    .venv/bin/python -m pytest -q tests/test_packaging.py

- environment.yml lists the same packages as pyproject.toml's ``dependencies`` plus its
  ``test`` extra (names compared case-, ``-``/``_``/``.``-insensitively, conda names that
  differ from PyPI names mapped by ``CONDA_TO_PYPI``), with the same lower bounds where
  both give one, and the same Python floor as ``requires-python``;
- ``postBuild`` exists, is executable, stops on errors and installs the local package
  with ``pip install --no-deps -e .`` (repo2docker does not install it by itself);
- ``make test`` runs nbval over notebooks/ with tests/nbval_sanitize.cfg.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = REPO / "pyproject.toml"
ENVIRONMENT = REPO / "environment.yml"
POSTBUILD = REPO / "postBuild"
MAKEFILE = REPO / "Makefile"
SANITIZE = "tests/nbval_sanitize.cfg"

#: conda-forge package name -> PyPI name, where they differ (extend when needed).
CONDA_TO_PYPI = {
    "pytables": "tables",
    "pytorch": "torch",
    "matplotlib-base": "matplotlib",
    "msgpack-python": "msgpack",
}
#: conda packages that have no counterpart in pyproject.toml's dependency lists.
CONDA_ONLY = {"python", "pip"}
PYPROJECT_EXTRAS_IN_ENV = ("test",)


def normalise(name: str) -> str:
    """PEP 503 normalisation: case-insensitive, runs of - _ . are equivalent."""
    return re.sub(r"[-_.]+", "-", name).lower()


def split_spec(spec: str) -> tuple[str, str]:
    """``"numpy>=1.24"`` -> ``("numpy", ">=1.24")``; works for pip and conda specs
    (conda's ``channel::name`` prefix and pip's ``[extras]`` / ``; markers`` dropped)."""
    spec = spec.split(";")[0].strip()
    spec = spec.split("::")[-1]
    match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(.*)$", spec)
    assert match, f"cannot parse the requirement {spec!r}"
    return match.group(1), match.group(2).replace(" ", "")


def lower_bound(version_spec: str) -> str | None:
    match = re.search(r">=\s*([0-9][0-9A-Za-z.]*)", version_spec)
    return match.group(1) if match else None


# ------------------------------------------------------------------------- readers
def load_pyproject() -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli", reason="needs tomllib (Python >= 3.11) or tomli")
    with PYPROJECT.open("rb") as f:
        return tomllib.load(f)


def _parse_simple_environment(text: str) -> dict:
    """Enough of YAML for an environment.yml (used only if PyYAML is missing)."""
    env: dict = {}
    key = None
    in_pip = False
    for raw in text.splitlines():
        line = raw.split(" #")[0].rstrip()
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line.startswith((" ", "-")):
            key, _, value = line.partition(":")
            key = key.strip()
            env[key] = value.strip() or []
            in_pip = False
            continue
        item = line.strip()
        assert item.startswith("- "), f"unexpected line in environment.yml: {raw!r}"
        item = item[2:].strip()
        indent = len(line) - len(line.lstrip())
        if item == "pip:":
            env[key].append({"pip": []})
            in_pip = True
        elif in_pip and indent > 2:
            env[key][-1]["pip"].append(item)
        else:
            in_pip = False
            env[key].append(item)
    return env


def load_environment() -> dict:
    text = ENVIRONMENT.read_text(encoding="utf-8")
    try:
        import yaml
    except ModuleNotFoundError:
        return _parse_simple_environment(text)
    return yaml.safe_load(text)


def pyproject_requirements() -> dict[str, str]:
    project = load_pyproject()["project"]
    specs = list(project.get("dependencies", []))
    for extra in PYPROJECT_EXTRAS_IN_ENV:
        specs += project.get("optional-dependencies", {}).get(extra, [])
    return {normalise(name): version for name, version in map(split_spec, specs)}


def environment_requirements() -> dict[str, str]:
    """PyPI-normalised name -> version spec for everything environment.yml installs,
    the conda-only entries (python, pip) left out."""
    reqs: dict[str, str] = {}
    for entry in load_environment().get("dependencies", []):
        if isinstance(entry, dict):  # the `pip:` section: PyPI names already
            for spec in entry.get("pip", []):
                if spec.startswith(("-", ".")):  # -e ., -r file, local paths
                    continue
                name, version = split_spec(spec)
                reqs[normalise(name)] = version
            continue
        name, version = split_spec(str(entry))
        name = normalise(name)
        if name in CONDA_ONLY:
            continue
        reqs[normalise(CONDA_TO_PYPI.get(name, name))] = version
    return reqs


# ------------------------------------------------------------------------- tests
def test_environment_file_is_named_for_repo2docker():
    assert ENVIRONMENT.is_file(), "environment.yml is missing (Binder reads environment.yml)"
    assert not (REPO / "environment.yaml").exists(), "repo2docker reads environment.yml, not .yaml"


def test_environment_header():
    env = load_environment()
    assert env.get("name") == "npu_lab"
    assert "conda-forge" in env.get("channels", [])
    python = [str(e) for e in env["dependencies"] if isinstance(e, str) and split_spec(e)[0] == "python"]
    assert python, "environment.yml must pin python"
    requires = load_pyproject()["project"]["requires-python"]
    assert lower_bound(split_spec(python[0])[1]) == lower_bound(requires), (
        f"environment.yml has {python[0]!r}, pyproject.toml requires-python {requires!r}"
    )


def test_environment_lists_the_same_packages_as_pyproject():
    pyproject = pyproject_requirements()
    environment = environment_requirements()
    missing = sorted(set(pyproject) - set(environment))
    extra = sorted(set(environment) - set(pyproject))
    assert not missing and not extra, (
        f"environment.yml lacks {missing} and has extra {extra} compared with pyproject.toml's "
        f"dependencies + {list(PYPROJECT_EXTRAS_IN_ENV)} (a conda name that differs from the "
        "PyPI name goes into CONDA_TO_PYPI in this test)"
    )


def test_environment_lower_bounds_match_pyproject():
    pyproject = pyproject_requirements()
    environment = environment_requirements()
    differ = {
        name: (pyproject[name], environment[name])
        for name in set(pyproject) & set(environment)
        if lower_bound(pyproject[name]) and lower_bound(environment[name])
        and lower_bound(pyproject[name]) != lower_bound(environment[name])
    }
    assert not differ, f"lower bounds differ (pyproject.toml, environment.yml): {differ}"


def test_spec_helpers():
    assert split_spec("numpy>=1.24") == ("numpy", ">=1.24")
    assert split_spec("conda-forge::scipy >=1.10") == ("scipy", ">=1.10")
    assert split_spec("plotly[express]>=5; python_version>'3.9'") == ("plotly", ">=5")
    assert normalise("Jupyter_Server.Terminals") == "jupyter-server-terminals"
    text = "name: x\nchannels:\n  - conda-forge\ndependencies:\n  - python>=3.10\n  - numpy  # note\n  - pip:\n    - some-pypi-only>=1\n"
    assert _parse_simple_environment(text) == {
        "name": "x", "channels": ["conda-forge"],
        "dependencies": ["python>=3.10", "numpy", {"pip": ["some-pypi-only>=1"]}],
    }


def test_postbuild_installs_the_local_package_without_deps():
    assert POSTBUILD.is_file(), "postBuild is missing: Binder would not install npu_lab itself"
    assert os.access(POSTBUILD, os.X_OK), "postBuild must be executable (chmod +x postBuild)"
    text = POSTBUILD.read_text(encoding="utf-8")
    assert re.match(r"#!\s*(/bin/bash|/usr/bin/env bash)\b", text), "postBuild must start with a bash shebang"
    commands = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    assert any(re.match(r"set -\w*e", c) for c in commands), (
        "postBuild must `set -e`: repo2docker does not stop on a failing command otherwise"
    )
    installs = [c for c in commands if re.search(r"\bpip3? install\b", c)]
    assert installs, "postBuild does not pip install anything"
    assert any("--no-deps" in c and re.search(r"(^|\s)-e\s+\.(\s|$)", c) for c in installs), (
        f"postBuild must run `pip install --no-deps -e .`, found {installs}"
    )


# ------------------------------------------------------------------------- Makefile
def _makefile_rules(text: str) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(target -> prerequisites, target -> recipe lines), variables expanded."""
    text = text.replace("\\\n", " ")
    variables: dict[str, str] = {}
    prereqs: dict[str, list[str]] = {}
    recipes: dict[str, list[str]] = {}
    current: list[str] = []
    for line in text.splitlines():
        if line.startswith("\t"):
            for target in current:
                recipes.setdefault(target, []).append(" ".join(line.split()))
            continue
        line = line.split("#")[0].rstrip()
        assignment = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)\s*(\?=|:=|::=|\+=|=)\s*(.*)$", line)
        if assignment:
            name, op, value = assignment.groups()
            variables[name] = (variables.get(name, "") + " " + value).strip() if op == "+=" else value
            current = []
            continue
        rule = re.match(r"^([^:=\s][^:=]*?)\s*::?\s*(.*)$", line)
        if rule:
            current = rule.group(1).split()
            for target in current:
                prereqs.setdefault(target, []).extend(rule.group(2).split())
        elif line.strip():
            current = []

    def expand(s: str) -> str:
        for _ in range(10):
            s = re.sub(r"\$[({](\w+)[)}]", lambda m: variables.get(m.group(1), ""), s)
        return s

    return ({expand(t): [expand(p) for p in ps] for t, ps in prereqs.items()},
            {expand(t): [expand(r) for r in rs] for t, rs in recipes.items()})


def _recipes_reached_from(target: str, prereqs, recipes) -> list[str]:
    seen, todo, lines = set(), [target], []
    while todo:
        t = todo.pop(0)
        if t in seen:
            continue
        seen.add(t)
        lines += recipes.get(t, [])
        todo += prereqs.get(t, [])
    return lines


def test_make_test_runs_nbval_over_notebooks_with_the_sanitize_file():
    prereqs, recipes = _makefile_rules(MAKEFILE.read_text(encoding="utf-8"))
    assert "test" in prereqs, "the Makefile has no `test` target"
    lines = _recipes_reached_from("test", prereqs, recipes)
    nbval_lines = [ln for ln in lines if "pytest" in ln and re.search(r"(^|\s)--nbval(\s|$)", ln)]
    assert nbval_lines, f"`make test` never runs `pytest --nbval`; its recipes are {lines}"
    ok = [
        ln for ln in nbval_lines
        if re.search(rf"--nbval-sanitize-with[ =]{re.escape(SANITIZE)}(\s|$)", ln)
        and re.search(r"(^|\s)(\./)?notebooks/?(\s|$)", ln)
        and "--nbval-current-env" in ln
    ]
    assert ok, (
        f"`make test` must run `pytest --nbval --nbval-current-env --nbval-sanitize-with {SANITIZE} "
        f"... notebooks/`; found {nbval_lines}"
    )
    assert (REPO / SANITIZE).is_file(), f"{SANITIZE} is named by the Makefile but missing"


def test_makefile_parser_follows_prerequisites():
    text = (
        "PY := .venv/bin/python\nCFG ?= tests/x.cfg\n.PHONY: test\n"
        "test: unit nb  ## all\nunit:\n\t$(PY) -m pytest tests\n"
        "nb: install\n\t$(PY) -m pytest --nbval \\\n\t\t--nbval-sanitize-with $(CFG) notebooks/\n"
    )
    prereqs, recipes = _makefile_rules(text)
    lines = _recipes_reached_from("test", prereqs, recipes)
    assert lines == [".venv/bin/python -m pytest tests",
                     ".venv/bin/python -m pytest --nbval --nbval-sanitize-with tests/x.cfg notebooks/"]
