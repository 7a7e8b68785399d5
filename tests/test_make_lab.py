"""`make lab` starts JupyterLab whoever runs it (root included), prints the URL to open, and
switches off JupyterLab's news pop-up and moves the kernel's execution indicator to the status
bar in a project-local setting.

The test runs the real target (as the user running the tests; CI images often run as root) on a
free port with ``--no-browser``, waits until the server answers HTTP, asks it for the course's
notification settings, then stops it. Bounded: at most ``START_TIMEOUT_S`` to answer.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 25
VENV = Path(sys.prefix)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _venv_is_installed() -> bool:
    """`make -q install` says whether the install step would do nothing for this venv."""
    res = subprocess.run(["make", "-q", "install", f"VENV={VENV}"], cwd=REPO,
                         capture_output=True, text=True)
    return res.returncode == 0


def _get(url: str, token: str):
    req = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(req, timeout=3) as resp:
        return resp.status, resp.read()


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_lab_starts_a_server_that_answers(tmp_path):
    if not (VENV / "bin" / "jupyter").exists() or not _venv_is_installed():
        pytest.skip(f"{VENV} is not the project's installed venv (run `make install` first)")
    port = _free_port()
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"), BROWSER="true")
    proc = subprocess.Popen(["make", "--no-print-directory", "lab", f"VENV={VENV}", f"LAB_PORT={port}",
                             "LAB_ARGS=--no-browser"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        first = proc.stdout.readline()
        match = re.search(rf"open (http://127\.0\.0\.1:{port}/lab\?token=(\w+))", first)
        assert match, f"`make lab` should print the URL to open first; it printed {first!r}"
        url, token = match.groups()
        deadline = time.monotonic() + START_TIMEOUT_S
        status = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                status, _ = _get(url, token)
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.3)
        if status is None:
            proc.terminate()
            out = proc.stdout.read() if proc.poll() is not None else ""
            pytest.fail(f"`make lab` did not answer on port {port} within {START_TIMEOUT_S} s "
                        f"(exit code {proc.poll()}); output:\n{out[-3000:]}")
        assert status == 200
        # the course's project-local setting: never ask "get notified about official Jupyter news?"
        _, body = _get(f"http://127.0.0.1:{port}/lab/api/settings/"
                       "@jupyterlab/apputils-extension:notification", token)
        schema = json.loads(body)["schema"]
        assert schema["properties"]["fetchNews"]["default"] == "false"
        # and the kernel's execution indicator sits in the status bar (see the next test)
        _, body = _get(f"http://127.0.0.1:{port}/lab/api/settings/@jupyterlab/notebook-extension:tracker", token)
        status_config = json.loads(body)["schema"]["properties"]["kernelStatus"]["default"]
        assert status_config["showOnStatusBar"] is True
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)


def test_make_lab_adds_allow_root_only_for_root():
    """The recipe as `make -n` prints it: --allow-root exactly when the user is root."""
    out = subprocess.run(["make", "-n", "lab", f"VENV={VENV}", "LAB_TOKEN=t"], cwd=REPO,
                         capture_output=True, text=True).stdout
    assert "jupyter lab notebooks/" in out
    assert ("--allow-root" in out) == (os.geteuid() == 0), out
    assert "--LabApp.app_settings_dir=" in out and ".jupyter/lab/settings" in out


def test_news_popup_is_off_in_the_project_settings():
    overrides = json.loads((REPO / ".jupyter/lab/settings/overrides.json").read_text())
    assert overrides["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"


def test_execution_indicator_is_in_the_status_bar():
    """In the notebook's toolbar, every kernel busy/idle flip of the execution indicator makes the
    toolbar (a FAST web component) recompute its focusable items and rewrite every button's
    tabindex: 4-7 times per slider move, 10-17 ms in Chromium. In the status bar it costs nothing
    of the kind and the learner still sees the kernel's state. The override names a real setting
    of the installed JupyterLab (its schema), with every key the schema allows."""
    overrides = json.loads((REPO / ".jupyter/lab/settings/overrides.json").read_text())
    ours = overrides["@jupyterlab/notebook-extension:tracker"]["kernelStatus"]
    assert ours["showOnStatusBar"] is True and ours["showProgress"] is True
    schema_path = VENV / "share/jupyter/lab/schemas/@jupyterlab/notebook-extension/tracker.json"
    if not schema_path.exists():
        pytest.skip(f"no JupyterLab schemas in {VENV}")
    schema = json.loads(schema_path.read_text())
    allowed = schema["definitions"]["kernelStatusConfig"]["properties"]
    assert set(ours) <= set(allowed) and all(allowed[k]["type"] == "boolean" for k in ours)
