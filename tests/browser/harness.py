"""Real-browser test harness for slider notebooks (JupyterLab and Voila).

Drives Debian's ``/usr/bin/chromium`` (never a Playwright browser download) with the
Python ``playwright`` package against a JupyterLab or Voila server started on
127.0.0.1. Install both with ``bash scripts/install_browser_deps.sh``; run with
``make test-browser`` (tests are marked ``@pytest.mark.browser`` and excluded from
the default ``pytest`` run by pyproject's ``addopts``).

Every wait is on a condition with an explicit timeout (``page.wait_for_function``,
Playwright locators, an HTTP poll whose interval is ``Popen.wait``): there is no
fixed sleep. Servers run in their own process group and are always shut down,
kernels included, even when the test fails.

Typical use in a test module inside ``tests/browser`` (fixtures ``page``, ``shots``,
``lab_server`` and ``voila_server`` come from ``tests/browser/conftest.py``; the server
factories stop their server when the test ends, pass or fail)::

    import pytest
    from . import harness as h

    NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"

    @pytest.mark.browser
    @pytest.mark.parametrize("app", ["lab", "voila"])
    def test_tile_slider(app, page, shots, lab_server, voila_server):
        if app == "lab":
            srv = lab_server(NOTEBOOKS)       # Lab autosave is off: committed files stay as they are
            errors = h.open_notebook_and_run_all(page, srv.url, srv.token, "04_tiling.ipynb")
        else:
            srv = voila_server(NOTEBOOKS / "04_tiling.ipynb")
            errors = h.open_voila(page, srv.url)
        assert errors == [], f"{errors}\n{srv.log_tail()}"
        slider = h.find_slider(page, "tileS")            # by its description label
        before = h.read_plotly_data(page, plot_index=0)  # list of traces, JSON-able
        h.screenshot(page, shots, f"04-{app}-before")
        h.press_slider_key(page, slider, "ArrowRight", times=1)
        after = h.wait_for_plot_change(page, before, plot_index=0)
        h.wait_for_slider_value(page, slider, 9)
        h.screenshot(page, shots, f"04-{app}-after")
        assert after[1]["x"] == [9]                      # e.g. trace 1 is the marker

Outside pytest the same blocks compose as context managers::

    with h.chromium_browser() as b, h.jupyter_lab_server("notebooks") as srv:
        page = h.new_page(b)
        print(h.open_notebook_and_run_all(page, srv.url, srv.token, "04_tiling.ipynb"))

Building blocks, each usable alone:

- ``chromium_browser()``: context manager yielding a Playwright ``Browser``.
- ``jupyter_lab_server(root_dir)`` / ``voila_server(notebook)``: context managers
  yielding a ``Server`` (``url``, ``token``, ``log_path``); isolated Jupyter config,
  runtime and IPython dirs; the venv's lab extensions (ipywidgets, plotly, anywidget)
  stay visible because only user-level dirs are redirected.
- ``open_notebook_and_run_all`` (Lab) / ``open_voila`` (Voila): load the page, run
  everything, return a list of error outputs (empty list = clean run).
- ``find_slider(page, description)``, ``slider_value(slider)``,
  ``press_slider_key(page, slider, key, times)``, ``wait_for_slider_value``.
- ``read_plotly_data(page, plot_index)``, ``wait_for_plot_change(page, before, ...)``,
  ``wait_for_plot(page, js_predicate, arg=...)``.
- ``screenshot(page, folder, name)``; ``copy_notebooks(src, dest, names)`` for a scratch copy.

Selectors this depends on (check them when upgrading ipywidgets / plotly / Lab):
``.widget-slider`` + ``.widget-label`` + ``.noUi-handle`` + ``.widget-readout``
(ipywidgets 8, noUiSlider), ``.js-plotly-plot`` (plotly.js graph div, whose ``.data``
holds the traces), ``window.jupyterapp`` (JupyterLab 4 with
``--LabApp.expose_app_in_browser``), ``.jp-OutputArea-output[data-mime-type=...]``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Sequence

CHROMIUM = os.environ.get("NPU_LAB_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    # Nothing but the local servers: a page asking a CDN (Voila asks jsdelivr for
    # font-awesome CSS) fails at once instead of depending on the network.
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost",
]
#: Default timeouts, in seconds.
SERVER_START_TIMEOUT = 60.0
RUN_ALL_TIMEOUT = 120.0
UI_TIMEOUT = 30.0
PLOT_CHANGE_TIMEOUT = 15.0


# --------------------------------------------------------------------------- browser


@contextlib.contextmanager
def chromium_browser(*, executable: str = CHROMIUM, extra_args: Sequence[str] = ()) -> Iterator[Any]:
    """Yield a headless Playwright ``Browser`` running Debian's chromium; close it on exit."""
    from playwright.sync_api import sync_playwright

    if not Path(executable).exists():
        raise RuntimeError(
            f"{executable} not found: run `bash scripts/install_browser_deps.sh` (installs Debian chromium)"
        )
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=executable,
            headless=True,
            args=[*CHROMIUM_ARGS, *extra_args],
        )
        try:
            yield browser
        finally:
            browser.close()


def new_page(browser: Any, *, width: int = 1280, height: int = 900, timeout: float = UI_TIMEOUT) -> Any:
    """Open a fresh context + page, with default timeouts set and console errors recorded.

    Console errors and uncaught page errors are appended to ``page.npu_console_errors``
    (a list of strings) for diagnostics; they are not asserted on by the helpers.
    """
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.set_default_timeout(timeout * 1000)
    errors: list[str] = []
    page.on("console", lambda msg: errors.append(f"console.{msg.type}: {msg.text}") if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(f"pageerror: {exc}"))
    page.npu_console_errors = errors  # type: ignore[attr-defined]
    return page


def screenshot(page: Any, folder: str | os.PathLike, name: str, *, show: Any = ".js-plotly-plot") -> Path:
    """Save a PNG screenshot of the page as ``folder/name.png`` and return its path.

    JupyterLab scrolls inside its notebook panel (a full-page shot would not reach a
    plot below a long cell), so first the first element matching ``show`` (a CSS
    selector or a Playwright locator; default: the first plotly graph) is scrolled to
    the middle of the view, if there is one. Pass ``show=None`` to shoot as is.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (name if name.endswith(".png") else f"{name}.png")
    if show is not None:
        target = page.locator(show) if isinstance(show, str) else show
        if target.count():
            target.first.evaluate("el => el.scrollIntoView({block: 'center', inline: 'nearest'})")
    page.screenshot(path=str(path), full_page=True)
    return path


# --------------------------------------------------------------------------- servers


@dataclass
class Server:
    """A running JupyterLab / Voila server: ``url`` has no trailing slash."""

    url: str
    token: str
    proc: subprocess.Popen
    log_path: Path
    workdir: Path
    kind: str = "lab"
    extra: dict = field(default_factory=dict)

    def log_tail(self, n: int = 60) -> str:
        """The last ``n`` lines of the server's combined stdout/stderr."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def isolated_jupyter_env(workdir: Path) -> dict[str, str]:
    """Environment for a server with user-level Jupyter/IPython dirs under ``workdir``.

    Only the *user* dirs move (config, data, runtime, IPython): ``jupyter_path()`` still
    lists ``sys.prefix/share/jupyter`` of the venv, where the python3 kernelspec and the
    prebuilt lab extensions of ipywidgets, plotly and anywidget live. The user settings
    written here turn off Lab's news/update checks (no internet) and autosave, start the
    default kernel without a dialog, and render every cell (no windowing) so the DOM has
    them all.
    """
    env = dict(os.environ)
    for var in ("JUPYTER_PATH", "JUPYTER_CONFIG_PATH", "JUPYTER_PREFER_ENV_PATH", "PYTHONSTARTUP"):
        env.pop(var, None)
    dirs = {
        "JUPYTER_CONFIG_DIR": workdir / "jupyter_config",
        "JUPYTER_DATA_DIR": workdir / "jupyter_data",
        "JUPYTER_RUNTIME_DIR": workdir / "jupyter_runtime",
        "IPYTHONDIR": workdir / "ipython",
    }
    for var, path in dirs.items():
        path.mkdir(parents=True, exist_ok=True)
        env[var] = str(path)
    # The venv's bin first, so `python -m ipykernel` kernels use the same interpreter.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("MPLBACKEND", "Agg")

    settings = dirs["JUPYTER_CONFIG_DIR"] / "lab" / "user-settings" / "@jupyterlab"
    _write_json(
        settings / "apputils-extension" / "notification.jupyterlab-settings",
        {"fetchNews": "false", "checkForUpdates": False},
    )
    _write_json(
        settings / "notebook-extension" / "tracker.jupyterlab-settings",
        {"windowingMode": "none", "autoStartDefaultKernel": True},
    )
    _write_json(settings / "extensionmanager-extension" / "plugin.jupyterlab-settings", {"enabled": False})
    # Never write the executed notebook back: the server may serve the committed files.
    _write_json(settings / "docmanager-extension" / "plugin.jupyterlab-settings", {"autosave": False})
    # Server side: no announcement feed, no update check (neither can reach the internet).
    _write_json(
        dirs["JUPYTER_CONFIG_DIR"] / "jupyter_lab_config.json",
        {"LabApp": {"news_url": None,
                    "check_for_updates_class": "jupyterlab.handlers.announcements.NeverCheckForUpdate"}},
    )
    return env


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def _http_status(url: str, timeout: float = 2.0) -> int | None:
    """HTTP status of a GET on ``url``, or None when nothing answers yet."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, ConnectionError, socket.timeout, OSError):
        return None


def wait_for_http(url: str, proc: subprocess.Popen, *, timeout: float, ok=lambda status: status == 200) -> None:
    """Poll ``url`` until ``ok(status)``; fail fast if ``proc`` exits, or after ``timeout`` s.

    The pause between polls is ``proc.wait(0.1)``: it returns at once if the server dies.
    """
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = _http_status(url)
        if last is not None and ok(last):
            return
        try:
            code = proc.wait(timeout=0.1)
        except subprocess.TimeoutExpired:
            continue
        raise ServerDiedError(f"server exited with code {code} before {url} answered")
    raise TimeoutError(f"{url} did not answer (last status {last}) within {timeout:.0f} s")


class ServerDiedError(RuntimeError):
    """The server process exited while we waited for it."""


def _descendants(pid: int) -> list[Any]:
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil comes with ipykernel / jupyter_server
        return []
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def terminate(proc: subprocess.Popen, *, grace: float = 10.0) -> None:
    """Stop ``proc``'s process group and every descendant (kernels run in their own session).

    SIGTERM first (Jupyter shuts its kernels down cleanly on it), SIGKILL after ``grace`` s.
    """
    children = _descendants(proc.pid)
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=grace)
    if children:  # kernels (own session) and anything else the server started
        import psutil

        alive = [c for c in children if c.is_running()]
        for c in alive:
            with contextlib.suppress(psutil.Error):
                c.terminate()
        _, alive = psutil.wait_procs(alive, timeout=grace)
        for c in alive:
            with contextlib.suppress(psutil.Error):
                c.kill()
        psutil.wait_procs(alive, timeout=grace)


@contextlib.contextmanager
def _server(kind: str, make_cmd, ready_path: str, *, cwd: Path, timeout: float, attempts: int = 3,
            ready=lambda status: status == 200) -> Iterator[Server]:
    """Start ``make_cmd(port, token)`` in a new session; yield a ready ``Server``; always stop it."""
    workdir = Path(tempfile.mkdtemp(prefix=f"npu_lab_{kind}_"))
    env = isolated_jupyter_env(workdir)
    token = secrets.token_hex(16)
    server = None
    try:
        for attempt in range(attempts):
            port = free_port()
            log_path = workdir / f"server-{attempt}.log"
            with open(log_path, "wb") as log:
                proc = subprocess.Popen(
                    make_cmd(port, token),
                    cwd=str(cwd),
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            server = Server(f"http://127.0.0.1:{port}", token, proc, log_path, workdir, kind)
            try:
                wait_for_http(f"{server.url}{ready_path.format(token=token)}", proc, timeout=timeout, ok=ready)
                break
            except ServerDiedError:
                # Most likely the port was taken between free_port() and bind: try another.
                terminate(proc)
                if attempt == attempts - 1:
                    raise RuntimeError(f"{kind} server failed to start:\n{server.log_tail()}") from None
            except BaseException:
                terminate(proc)
                raise RuntimeError(f"{kind} server not ready:\n{server.log_tail()}") from None
        yield server
    finally:
        if server is not None:
            terminate(server.proc)
        shutil.rmtree(workdir, ignore_errors=True)


def jupyter_lab_server(root_dir: str | os.PathLike, *, timeout: float = SERVER_START_TIMEOUT,
                       extra_args: Sequence[str] = ()):
    """Context manager: JupyterLab serving ``root_dir`` on 127.0.0.1, ready on ``/api/status``.

    Uses the interpreter running the tests (the venv), a random token, a free port,
    ``--LabApp.expose_app_in_browser`` (gives ``window.jupyterapp`` to drive commands)
    and ``allow_root`` (CI runs as root).
    """
    root = Path(root_dir).resolve()

    def cmd(port: int, token: str) -> list[str]:
        return [
            sys.executable, "-m", "jupyter", "lab",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}",
            "--ServerApp.allow_root=True",
            "--LabApp.expose_app_in_browser=True",
            *extra_args,
        ]

    return _server("lab", cmd, "/api/status?token={token}", cwd=root, timeout=timeout)


def voila_server(notebook: str | os.PathLike, *, timeout: float = SERVER_START_TIMEOUT,
                 extra_args: Sequence[str] = ()):
    """Context manager: Voila serving one ``notebook`` at ``server.url + '/'``.

    Ready as soon as its HTTP server answers at all (a 404 on a missing static file
    will do: a GET on ``/`` would execute the notebook).
    Voila runs without a token here (``server.token`` is unused), on 127.0.0.1 only,
    with tracebacks shown so errors surface in the page.
    """
    nb = Path(notebook).resolve()

    def cmd(port: int, token: str) -> list[str]:
        return [
            sys.executable, "-m", "voila", str(nb),
            "--no-browser",
            f"--port={port}",
            "--Voila.ip=127.0.0.1",
            "--Voila.port_retries=0",
            "--show_tracebacks=True",
            *extra_args,
        ]

    return _server("voila", cmd, "/voila/static/npu-lab-ready-probe", cwd=nb.parent, timeout=timeout,
                   ready=lambda status: status < 500)


def copy_notebooks(src_dir: str | os.PathLike, dest_dir: str | os.PathLike,
                   names: Sequence[str] | None = None) -> Path:
    """Copy notebooks (all ``*.ipynb`` or ``names``) into ``dest_dir`` so a run never
    touches the committed files (Lab may autosave, checkpoints appear). Returns ``dest_dir``."""
    src, dest = Path(src_dir), Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    for p in ([src / n for n in names] if names else sorted(src.glob("*.ipynb"))):
        shutil.copy2(p, dest / p.name)
    return dest


# --------------------------------------------------------------------------- notebook pages

_ERRORS_JS = r"""
() => {
  const out = [];
  const sel = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]';
  for (const el of document.querySelectorAll(sel)) out.push({kind: 'stderr', text: el.innerText});
  for (const el of document.querySelectorAll('.jupyter-widgets-error-widget'))
    out.push({kind: 'widget-error', text: el.innerText});
  for (const el of document.querySelectorAll('.jp-OutputArea-output .jupyter-widgets'))
    if (/^Error displaying widget/.test(el.textContent || '')) out.push({kind: 'widget-error', text: el.textContent});
  return out;
}
"""

_FIND_PANEL_JS = r"""
(path) => {
  const app = window.jupyterapp;
  if (!app || !app.shell) return null;
  for (const w of app.shell.widgets('main')) {
    if (w.context && w.context.path === path && w.sessionContext) return w;
  }
  return null;
}
"""

_PANEL_IDLE_JS = r"""
(path) => {
  const find = %s;
  const w = find(path);
  if (!w || !w.context.isReady || !w.content || !w.content.widgets.length) return false;
  const k = w.sessionContext.session && w.sessionContext.session.kernel;
  return !!k && k.status === 'idle' && k.connectionStatus === 'connected';
}
""" % _FIND_PANEL_JS

_START_RUN_ALL_JS = r"""
async (path) => {
  const find = %s;
  const w = find(path);
  window.jupyterapp.shell.activateById(w.id);
  window.__npuRunAll = {done: false, ok: null, error: null};
  window.jupyterapp.commands.execute('notebook:run-all-cells').then(
    (ok) => { window.__npuRunAll.done = true; window.__npuRunAll.ok = ok; },
    (err) => { window.__npuRunAll.done = true; window.__npuRunAll.error = String(err); });
  return w.id;
}
""" % _FIND_PANEL_JS

_RUN_ALL_DONE_JS = r"""
(path) => {
  const find = %s;
  const st = window.__npuRunAll;
  if (!st || !st.done) return false;
  const w = find(path);
  const k = w.sessionContext.session && w.sessionContext.session.kernel;
  if (!k || k.status !== 'idle') return false;
  // Every non-empty code cell either ran, or run-all stopped at an error.
  if (st.ok === false || st.error) return true;
  return w.content.widgets.every(c => c.model.type !== 'code'
      || !c.model.sharedModel.getSource().trim() || c.model.executionCount !== null);
}
""" % _FIND_PANEL_JS

_MODEL_ERRORS_JS = r"""
(path) => {
  const find = %s;
  const w = find(path);
  const out = [];
  w.content.widgets.forEach((c, i) => {
    if (c.model.type !== 'code') return;
    if (c.model.sharedModel.getSource().trim() && c.model.executionCount === null)
      out.push({kind: 'not-run', cell: i, text: c.model.sharedModel.getSource().slice(0, 80)});
    for (const o of c.model.outputs.toJSON()) {
      if (o.output_type === 'error')
        out.push({kind: 'error', cell: i, text: `${o.ename}: ${o.evalue}`});
      else if (o.output_type === 'stream' && o.name === 'stderr')
        out.push({kind: 'stderr', cell: i, text: Array.isArray(o.text) ? o.text.join('') : o.text});
    }
  });
  if (window.__npuRunAll && window.__npuRunAll.error)
    out.push({kind: 'run-all', cell: null, text: window.__npuRunAll.error});
  return out;
}
""" % _FIND_PANEL_JS

_WIDGETS_RENDERED_JS = r"""
() => {
  // Every widget-view output has been replaced by a rendered view (or an error text).
  const sel = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.widget-view+json"]';
  const outs = [...document.querySelectorAll(sel)];
  return outs.every(o => o.querySelector('.jupyter-widgets, .lm-Widget') || /Error/.test(o.textContent || ''));
}
"""


def open_notebook_and_run_all(page: Any, base_url: str, token: str, notebook_path: str, *,
                              timeout: float = RUN_ALL_TIMEOUT) -> list[dict]:
    """Open ``notebook_path`` (relative to the server root) in JupyterLab, run all cells.

    Waits for the kernel to be idle, executes ``notebook:run-all-cells`` through
    ``window.jupyterapp.commands`` (the server must expose the app, as
    ``jupyter_lab_server`` does), then waits until the command has finished, the
    kernel is idle again and every non-empty code cell has an execution count, and
    until widget outputs have rendered. Returns the errors found, as dicts
    ``{"kind": "error"|"stderr"|"not-run"|"widget-error"|"run-all", "cell": i, "text": ...}``;
    an empty list means a clean run. Stderr (e.g. warnings) counts as an error here:
    filter the list in the test if some stderr is expected.
    """
    path = notebook_path.replace(os.sep, "/").lstrip("/")
    ms = timeout * 1000
    page.goto(f"{base_url}/lab/tree/{path}?token={token}", wait_until="domcontentloaded", timeout=ms)
    page.wait_for_function(_PANEL_IDLE_JS, arg=path, timeout=ms, polling=100)
    page.evaluate(_START_RUN_ALL_JS, path)
    page.wait_for_function(_RUN_ALL_DONE_JS, arg=path, timeout=ms, polling=100)
    page.wait_for_function(_WIDGETS_RENDERED_JS, timeout=ms, polling=100)
    errors = page.evaluate(_MODEL_ERRORS_JS, path)
    seen = {(e["kind"], e["text"].strip()) for e in errors}
    for e in page.evaluate(_ERRORS_JS):
        if (e["kind"], e["text"].strip()) not in seen and e["kind"] != "stderr":
            errors.append({**e, "cell": None})
    return errors


def open_voila(page: Any, base_url: str, *, timeout: float = RUN_ALL_TIMEOUT, path: str = "/") -> list[dict]:
    """Load a Voila page (which executes the notebook) and wait until its widgets render.

    Returns error/stderr outputs (and widget render errors) as in
    ``open_notebook_and_run_all``; an empty list means a clean run.
    """
    ms = timeout * 1000
    page.goto(f"{base_url}{path}", wait_until="domcontentloaded", timeout=ms)
    # Voila 0.5 streams the executed outputs, then its JS widget manager renders the
    # widget-view outputs. Wait for the page to finish loading, then for the widgets.
    page.wait_for_load_state("load", timeout=ms)
    page.wait_for_function(
        "() => document.querySelector('.jp-OutputArea-output') !== null"
        " && !document.querySelector('#loading')",
        timeout=ms, polling=100)
    page.wait_for_function(_WIDGETS_RENDERED_JS, timeout=ms, polling=100)
    errors = page.evaluate(_ERRORS_JS)
    errors += page.evaluate(
        "() => [...document.querySelectorAll('.jp-OutputArea-output[data-mime-type=\"application/vnd.jupyter.error\"]')]"
        ".map(el => ({kind: 'error', text: el.innerText}))")
    return [{**e, "cell": None} for e in errors]


# --------------------------------------------------------------------------- sliders


def find_slider(page: Any, description: str, *, timeout: float = UI_TIMEOUT) -> Any:
    """Locator of the ipywidgets slider whose description label is exactly ``description``.

    Matches ``.widget-slider`` boxes (Int/Float/Range sliders, ipywidgets 8) containing a
    ``.widget-label`` with that text; waits until it is visible. Fails if not unique.
    """
    label = page.locator(".widget-label", has_text=re.compile(rf"^\s*{re.escape(description)}\s*$"))
    slider = page.locator(".widget-slider").filter(has=label)
    slider.first.wait_for(state="visible", timeout=timeout * 1000)
    n = slider.count()
    if n != 1:
        raise AssertionError(f"{n} sliders labelled {description!r}")
    return slider


def slider_value(slider: Any) -> str:
    """The slider's readout text (e.g. ``'8'``), as shown next to it."""
    return slider.locator(".widget-readout").inner_text().strip()


def press_slider_key(page: Any, slider: Any, key: str = "ArrowRight", times: int = 1) -> None:
    """Focus the slider's noUiSlider handle and press ``key`` ``times`` times.

    ArrowRight/ArrowLeft step by one ``step``; PageUp/PageDown, Home/End also work.
    Each press sends one value to the kernel (continuous_update); wait on the effect with
    ``wait_for_slider_value`` or ``wait_for_plot_change``.
    """
    handle = slider.locator(".noUi-handle").first
    handle.focus()
    for _ in range(times):
        handle.press(key)


def wait_for_slider_value(page: Any, slider: Any, value: Any, *, timeout: float = UI_TIMEOUT) -> None:
    """Wait until the slider's readout shows ``value``."""
    from playwright.sync_api import expect

    expect(slider.locator(".widget-readout")).to_have_text(str(value), timeout=timeout * 1000)


# --------------------------------------------------------------------------- plotly

_PLOT_DATA_JS = r"""
(i) => {
  const gd = document.querySelectorAll('.js-plotly-plot')[i];
  if (!gd || !gd.data) return null;
  // Typed arrays (plotly.py may ship arrays as binary) become plain lists;
  // private keys are dropped, so the result is JSON and comparable.
  return JSON.parse(JSON.stringify(gd.data, (k, v) =>
    (k.startsWith('_') ? undefined : (ArrayBuffer.isView(v) ? Array.from(v) : v))));
}
"""


def read_plotly_data(page: Any, plot_index: int = 0, *, timeout: float = UI_TIMEOUT) -> list[dict]:
    """The ``data`` (list of traces) of the ``plot_index``-th rendered plotly graph.

    Waits until that graph exists and has data. A ``go.FigureWidget`` renders one
    ``.js-plotly-plot`` div; indices follow document order.
    """
    page.wait_for_function(
        "(i) => { const g = document.querySelectorAll('.js-plotly-plot')[i]; return !!(g && g.data && g.data.length); }",
        arg=plot_index, timeout=timeout * 1000, polling=100)
    return page.evaluate(_PLOT_DATA_JS, plot_index)


def wait_for_plot(page: Any, predicate: str, *, plot_index: int = 0, arg: Any = None,
                  timeout: float = PLOT_CHANGE_TIMEOUT) -> list[dict]:
    """Wait until the JS ``predicate(data, arg)`` is true for the plot's data; return the data.

    ``predicate`` is a JS function source receiving the traces as ``read_plotly_data``
    returns them, e.g. ``"(d, v) => d[1].x[0] === v"`` with ``arg=9``. Polls in the page
    with ``page.wait_for_function``.
    """
    fn = "([i, arg]) => { const d = (%s)(i); return d !== null && !!(%s)(d, arg); }" % (_PLOT_DATA_JS, predicate)
    page.wait_for_function(fn, arg=[plot_index, arg], timeout=timeout * 1000, polling=50)
    return page.evaluate(_PLOT_DATA_JS, plot_index)


def wait_for_plot_change(page: Any, before: list[dict], timeout: float = PLOT_CHANGE_TIMEOUT, *,
                         plot_index: int = 0) -> list[dict]:
    """Wait until the plot's data differ from ``before`` (as read by ``read_plotly_data``).

    Returns the new data. A callback that updates traces outside ``fig.batch_update()``
    may be caught half-way: then wait on the final state with ``wait_for_plot``.
    """
    return wait_for_plot(page, "(d, before) => JSON.stringify(d) !== JSON.stringify(before)",
                         plot_index=plot_index, arg=before, timeout=timeout)
