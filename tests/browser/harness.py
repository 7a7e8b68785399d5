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
factories stop their server when the test ends, pass or fail; see
``test_slider_notebooks.py`` for the real thing)::

    import pytest
    from . import harness as h

    NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"

    @pytest.mark.browser
    @pytest.mark.parametrize("app", ["lab", "voila"])
    def test_tile_slider(app, tmp_path, page, shots, lab_server, voila_server):
        nbs = h.copy_notebooks(NOTEBOOKS, tmp_path, ["04_fused_kernel.ipynb"])  # scratch copy
        if app == "lab":
            srv = lab_server(nbs)
            errors = h.open_notebook_and_run_all(page, srv.url, srv.token, "04_fused_kernel.ipynb")
        else:
            srv = voila_server(nbs / "04_fused_kernel.ipynb")
            errors = h.open_voila(page, srv.url)
        assert errors == [], f"{errors}\n{srv.log_tail()}"
        slider = h.find_slider(page, "tileS")            # by its description label
        explorer = h.output_of(page, slider)             # the output holding the slider's widget
        h.scroll_into_view(explorer)                     # Voila draws a FigureWidget only in view
        plot = h.plot_in(explorer)                       # its plotly graph (a Locator)
        before = h.wait_for_plot(page, "(d, v) => d[1].x[0] === v", plot=plot, arg=8)
        h.screenshot(page, shots, f"04-{app}-before", show=plot)
        h.press_slider_key(page, slider, "ArrowRight", times=1)
        after = h.wait_for_plot_change(page, before, plot=plot)   # list of traces, JSON
        h.wait_for_slider_value(page, slider, 9)
        h.screenshot(page, shots, f"04-{app}-after", show=plot)
        assert after[1]["x"] == [9]                      # trace 1 is the marker

Outside pytest the same blocks compose as context managers::

    with h.chromium_browser() as b, h.jupyter_lab_server("notebooks") as srv:
        page = h.new_page(b)
        print(h.open_notebook_and_run_all(page, srv.url, srv.token, "04_fused_kernel.ipynb"))

Building blocks, each usable alone:

- ``chromium_browser()``: context manager yielding a Playwright ``Browser``.
- ``jupyter_lab_server(root_dir)`` / ``voila_server(notebook)``: context managers
  yielding a ``Server`` (``url``, ``token``, ``log_path``); isolated Jupyter config,
  runtime and IPython dirs; the venv's lab extensions (ipywidgets, plotly, anywidget)
  stay visible because only user-level dirs are redirected.
- ``open_notebook_and_run_all`` (Lab) / ``open_voila`` (Voila): load the page, run
  everything, return a list of error outputs (empty list = clean run). In Lab, "done"
  means every non-empty code cell ran (answered, idle after it, execution count shown),
  never run-all's return value; errors of cells tagged ``raises-exception`` (or marked
  ``# NBVAL_RAISES_EXCEPTION``) are allowed. Only the *tag* makes Lab go on after the
  error: a cell marked by the comment alone makes the kernel abort the cells after it
  (reported as ``not-run``).
- ``find_slider(page, description)``, ``slider_value(slider)``,
  ``press_slider_key(page, slider, key, times)``, ``wait_for_slider_value``.
- ``output_of(page, locator)``, ``scroll_into_view(locator)``, ``plot_in(container)``.
- ``read_plotly_data(page, plot_index | plot=locator)``, ``wait_for_plot_change(page, before, ...)``,
  ``wait_for_plot(page, js_predicate, arg=...)``, ``summarize_plot(data)``. Binary
  (``bdata``) arrays from plotly.py >= 6 come back as plain lists.
- ``screenshot(page, folder, name, show=...)``, ``screenshot_on_failure(...)``; ``copy_notebooks(src, dest, names)`` for a scratch copy.

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
#: the course's JupyterLab settings (``make lab`` passes the same folder): the tests measure the
#: Lab a learner gets, e.g. the kernel's execution indicator in the status bar, not the toolbar
COURSE_LAB_SETTINGS = Path(__file__).resolve().parents[2] / ".jupyter" / "lab" / "settings"


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


@contextlib.contextmanager
def screenshot_on_failure(page: Any, folder: str | os.PathLike, name: str, *, show: Any = None) -> Iterator[None]:
    """Inside ``with screenshot_on_failure(page, shots, "04-lab"):`` an exception first saves
    ``folder/name-FAILED.png`` (the page as it was), then propagates."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            screenshot(page, folder, f"{name}-FAILED", show=show)
        raise


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
    ``--LabApp.expose_app_in_browser`` (gives ``window.jupyterapp`` to drive commands),
    ``allow_root`` (CI runs as root) and the course's Lab settings
    (:data:`COURSE_LAB_SETTINGS`, as ``make lab``).
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
            f"--LabApp.app_settings_dir={COURSE_LAB_SETTINGS}",
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
  const app = window.jupyterapp;
  app.shell.activateById(w.id);
  const kernel = w.sessionContext.session.kernel;
  // Bookkeeping of this run, read by _RUN_ALL_DONE_JS / _MODEL_ERRORS_JS: execute requests
  // sent (msg_id -> cellId), their replies (msg_id -> status) and the kernel's idle status
  // after each of them (msg_id -> true; seen on iopubMessage, so after their outputs).
  const st = {done: false, ok: null, error: null, sent: {}, replies: {}, idle: {}};
  window.__npuRunAll = st;
  if (window.__npuRunAllHooks) window.__npuRunAllHooks.forEach(off => off());
  const onAny = (_, {msg, direction}) => {
    const type = msg.header && msg.header.msg_type;
    if (direction === 'send' && type === 'execute_request')
      st.sent[msg.header.msg_id] = (msg.metadata && msg.metadata.cellId) || null;
    else if (direction === 'recv' && type === 'execute_reply' && msg.parent_header.msg_id in st.sent)
      st.replies[msg.parent_header.msg_id] = msg.content.status;
  };
  const onIopub = (_, msg) => {
    if (msg.header.msg_type === 'status' && msg.content.execution_state === 'idle'
        && msg.parent_header && msg.parent_header.msg_id in st.sent)
      st.idle[msg.parent_header.msg_id] = true;
  };
  kernel.anyMessage.connect(onAny);
  kernel.iopubMessage.connect(onIopub);
  window.__npuRunAllHooks = [() => kernel.anyMessage.disconnect(onAny),
                             () => kernel.iopubMessage.disconnect(onIopub)];
  // Forget the execution counts and outputs saved in the file: from here on, a count
  // means "ran in this run".
  await app.commands.execute('notebook:clear-all-cell-outputs');
  const stale = w.content.widgets.filter(c => c.model.type === 'code' && c.model.executionCount !== null);
  if (stale.length) throw new Error(`${stale.length} code cells kept their execution count after clearing`);
  // run-all's promise settles at the first error reply, even one from a cell tagged
  // raises-exception, while later cells are still queued: it is not the completion signal.
  app.commands.execute('notebook:run-all-cells').then(
    (ok) => { st.done = true; st.ok = ok; },
    (err) => { st.done = true; st.error = String(err); });
  return w.id;
}
""" % _FIND_PANEL_JS

_CELLS_JS = r"""
  // Non-empty code cells (the ones run-all sends to the kernel), with their reply status.
  const cellsOf = (w, st) => {
    const status = {};
    for (const [id, cellId] of Object.entries(st.sent)) if (cellId) status[cellId] = st.replies[id];
    return w.content.widgets.map((c, i) => ({c, i})).filter(({c}) =>
        c.model.type === 'code' && c.model.sharedModel.getSource().trim())
      .map(({c, i}) => ({c, i, status: status[c.model.sharedModel.getId()]}));
  };
"""

_RUN_ALL_DONE_JS = r"""
(path) => {
  const find = %s;
  %s
  const st = window.__npuRunAll;
  if (!st) return false;
  if (st.error) return true;  // the command itself failed: nothing more will run
  const w = find(path);
  const k = w.sessionContext.session && w.sessionContext.session.kernel;
  if (!k || k.status !== 'idle') return false;
  const cells = cellsOf(w, st);
  const sent = Object.keys(st.sent);
  // Every cell was sent, every request answered (ok, error or aborted) and, unless
  // aborted, its outputs in (the kernel went idle after it), ...
  if (sent.length < cells.length
      || !sent.every(id => id in st.replies && (st.idle[id] || st.replies[id] === 'aborted'))) return false;
  // ... and the notebook model shows it: a count for each cell that ran, nothing pending.
  return cells.every(({c, status}) => c.model.executionState !== 'running'
      && (c.model.executionCount !== null || status === 'aborted'));
}
""" % (_FIND_PANEL_JS, _CELLS_JS)

_MODEL_ERRORS_JS = r"""
([path, allowTagged]) => {
  const find = %s;
  %s
  const w = find(path);
  const st = window.__npuRunAll || {sent: {}, replies: {}, idle: {}};
  const out = [];
  for (const {c, i, status} of cellsOf(w, st)) {
    const src = c.model.sharedModel.getSource();
    const tags = c.model.getMetadata('tags') || [];
    // Like nbval: the tag `raises-exception` or a `# NBVAL_RAISES_EXCEPTION` comment line
    // allows the cell to raise (it does not have to).
    const mayRaise = allowTagged && (tags.includes('raises-exception')
        || /^[ \t]*#[ \t]*NBVAL_RAISES_EXCEPTION[ \t]*$/m.test(src));
    if (c.model.executionCount === null)
      out.push({kind: 'not-run', cell: i, text: (status ? `[${status}] ` : '') + src.slice(0, 80)});
    for (const o of c.model.outputs.toJSON()) {
      if (o.output_type === 'error' && !mayRaise)
        out.push({kind: 'error', cell: i, text: `${o.ename}: ${o.evalue}`});
      else if (o.output_type === 'stream' && o.name === 'stderr')
        out.push({kind: 'stderr', cell: i, text: Array.isArray(o.text) ? o.text.join('') : o.text});
    }
  }
  if (st.error) out.push({kind: 'run-all', cell: null, text: st.error});
  return out;
}
""" % (_FIND_PANEL_JS, _CELLS_JS)

_WIDGETS_RENDERED_JS = r"""
() => {
  // Every widget-view output has been replaced by a rendered view (or an error text).
  const sel = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.widget-view+json"]';
  const outs = [...document.querySelectorAll(sel)];
  return outs.every(o => o.querySelector('.jupyter-widgets, .lm-Widget') || /Error/.test(o.textContent || ''));
}
"""


def open_notebook_and_run_all(page: Any, base_url: str, token: str, notebook_path: str, *,
                              timeout: float = RUN_ALL_TIMEOUT, allow_tagged_errors: bool = True) -> list[dict]:
    """Open ``notebook_path`` (relative to the server root) in JupyterLab, run all cells.

    Waits for the kernel to be idle, clears the outputs and execution counts saved in the
    file, executes ``notebook:run-all-cells`` through ``window.jupyterapp.commands`` (the
    server must expose the app, as ``jupyter_lab_server`` does), then waits until *every*
    non-empty code cell has run: its execute request was answered and the kernel went idle
    after it, the cell shows an execution count (or the kernel aborted it after an earlier
    error) and no cell is pending; then until widget outputs have rendered. Run-all's own
    return value is not used: it settles at the first error reply, even one from a cell
    allowed to raise, while later cells are still queued.

    Returns the errors found, as dicts
    ``{"kind": "error"|"stderr"|"not-run"|"widget-error"|"run-all", "cell": i, "text": ...}``;
    an empty list means a clean run. With ``allow_tagged_errors`` (default), error outputs
    of cells tagged ``raises-exception`` or holding a ``# NBVAL_RAISES_EXCEPTION`` comment
    line are not errors (as under nbval, such a cell does not have to raise). Stderr
    (e.g. warnings) counts as an error here: filter the list in the test if some stderr is
    expected.
    """
    path = notebook_path.replace(os.sep, "/").lstrip("/")
    ms = timeout * 1000
    page.goto(f"{base_url}/lab/tree/{path}?token={token}", wait_until="domcontentloaded", timeout=ms)
    page.wait_for_function(_PANEL_IDLE_JS, arg=path, timeout=ms, polling=100)
    page.evaluate(_START_RUN_ALL_JS, path)
    page.wait_for_function(_RUN_ALL_DONE_JS, arg=path, timeout=ms, polling=100)
    page.wait_for_function(_WIDGETS_RENDERED_JS, timeout=ms, polling=100)
    errors = page.evaluate(_MODEL_ERRORS_JS, [path, allow_tagged_errors])
    seen = {(e["kind"], e["text"].strip()) for e in errors}
    for e in page.evaluate(_ERRORS_JS):
        if (e["kind"], e["text"].strip()) not in seen and e["kind"] != "stderr":
            errors.append({**e, "cell": None})
    return errors


def expected_errors(notebook: str | os.PathLike) -> list[str]:
    """The exception names the notebook's ``raises-exception`` cells show on purpose (from their
    saved outputs): Voila renders them like any error, with no cell to tell them apart."""
    cells = json.loads(Path(notebook).read_text(encoding="utf-8"))["cells"]
    return [o["ename"] for c in cells if "raises-exception" in c.get("metadata", {}).get("tags", [])
            for o in c.get("outputs", []) if o.get("output_type") == "error"]


def open_voila(page: Any, base_url: str, *, timeout: float = RUN_ALL_TIMEOUT, path: str = "/",
               allowed_errors: Sequence[str] = ()) -> list[dict]:
    """Load a Voila page (which executes the notebook) and wait until its widgets render.

    Returns error/stderr outputs (and widget render errors) as in
    ``open_notebook_and_run_all``; an empty list means a clean run. ``allowed_errors`` lists
    exception names shown on purpose (:func:`expected_errors`): each removes one error output
    that ends in that exception, no more.
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
    allowed = list(allowed_errors)
    kept = []
    for e in errors:
        last = e["text"].strip().splitlines()[-1] if e["text"].strip() else ""
        name = next((a for a in allowed if last.startswith(f"{a}:")), None)
        if name is None:
            kept.append(e)
        else:
            allowed.remove(name)
    return [{**e, "cell": None} for e in kept]


# --------------------------------------------------------------------------- sliders


def find_slider(page: Any, description: str, *, nth: int | None = None, timeout: float = UI_TIMEOUT) -> Any:
    """Locator of the ipywidgets slider whose description label is exactly ``description``.

    Matches ``.widget-slider`` boxes (Int/Float/Range sliders, ipywidgets 8) containing a
    ``.widget-label`` with that text; waits until it is visible. Fails if not unique, unless
    ``nth`` picks one of several (0: the first in the notebook).
    """
    label = page.locator(".widget-label", has_text=re.compile(rf"^\s*{re.escape(description)}\s*$"))
    slider = page.locator(".widget-slider").filter(has=label)
    slider.first.wait_for(state="visible", timeout=timeout * 1000)
    n = slider.count()
    if nth is not None:
        if not 0 <= nth < n:
            raise AssertionError(f"{n} sliders labelled {description!r}: there is no number {nth}")
        return slider.nth(nth)
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


def output_of(page: Any, element: Any) -> Any:
    """Locator of the (outermost) notebook output that contains ``element`` (a Locator),
    e.g. the whole explorer around a slider: ``output_of(page, find_slider(page, "tileS"))``.
    Works in JupyterLab and Voila (both render outputs as ``.jp-OutputArea-output``)."""
    return page.locator(".jp-OutputArea-output").filter(has=element).first


def scroll_into_view(locator: Any, block: str = "center") -> None:
    """Scroll the first element of ``locator`` into the middle of its scrolling container.

    Voila renders a ``go.FigureWidget`` only once it is in view: scroll its output into
    view (``scroll_into_view(output_of(page, slider))``) before reading its plot.
    """
    locator.first.evaluate("(el, block) => el.scrollIntoView({block, inline: 'nearest'})", block)


# --------------------------------------------------------------------------- plotly

# A plot is given as its document-order index among the page's plotly graphs (an int) or
# as a Playwright Locator / ElementHandle of the graph div (see ``plot_in``). In the page,
# ``target`` is either the index or the element itself.
_PLOT_DATA_JS = r"""
(target) => {
  const gd = typeof target === 'number' ? document.querySelectorAll('.js-plotly-plot')[target] : target;
  if (!gd || !gd.data) return null;
  // plotly.py >= 6 may ship arrays as {dtype, bdata: base64[, shape]}: decode them, and
  // make typed arrays plain lists; private keys are dropped, so the result is JSON and
  // comparable.
  const TYPES = {f8: Float64Array, f4: Float32Array, i4: Int32Array, u4: Uint32Array, i2: Int16Array,
                 u2: Uint16Array, i1: Int8Array, u1: Uint8Array, u1c: Uint8ClampedArray};
  const decode = (v) => {
    const bytes = Uint8Array.from(atob(v.bdata), ch => ch.charCodeAt(0));
    const flat = Array.from(new TYPES[v.dtype](bytes.buffer));
    const shape = typeof v.shape === 'string' ? v.shape.split(',').map(Number) : v.shape;
    if (!shape || shape.length < 2) return flat;
    const [rows, cols] = shape;
    return Array.from({length: rows}, (_, r) => flat.slice(r * cols, (r + 1) * cols));
  };
  return JSON.parse(JSON.stringify(gd.data, (k, v) => {
    if (k.startsWith('_')) return undefined;
    if (ArrayBuffer.isView(v)) return Array.from(v);
    if (v && typeof v === 'object' && typeof v.bdata === 'string' && v.dtype in TYPES) return decode(v);
    return v;
  }));
}
"""


def _plot_target(plot: Any, timeout: float) -> Any:
    """An int index as is; a Locator -> the ElementHandle of its graph div, once attached."""
    if isinstance(plot, int):
        return plot
    if hasattr(plot, "wait_for"):  # a Locator
        plot.wait_for(state="attached", timeout=timeout * 1000)
        return plot.element_handle(timeout=timeout * 1000)
    return plot  # an ElementHandle


def plot_in(container: Any, index: int = 0) -> Any:
    """Locator of the ``index``-th plotly graph div inside ``container`` (a Locator),
    e.g. ``plot_in(output_of(page, slider))``: the plot of the widget that owns a slider."""
    return container.locator(".js-plotly-plot").nth(index)


def read_plotly_data(page: Any, plot_index: Any = 0, *, plot: Any = None,
                     timeout: float = UI_TIMEOUT) -> list[dict]:
    """The ``data`` (list of traces) of a rendered plotly graph, as JSON (lists, not bdata).

    The graph is ``plot`` (a Locator or ElementHandle of the graph div, e.g. from
    ``plot_in``) or else the ``plot_index``-th ``.js-plotly-plot`` of the page, in document
    order (a ``go.FigureWidget`` renders one such div). Waits until the graph exists and has
    data.
    """
    target = _plot_target(plot_index if plot is None else plot, timeout)
    page.wait_for_function(
        "(t) => { const g = typeof t === 'number' ? document.querySelectorAll('.js-plotly-plot')[t] : t;"
        " return !!(g && g.data && g.data.length); }",
        arg=target, timeout=timeout * 1000, polling=100)
    return page.evaluate(_PLOT_DATA_JS, target)


def wait_for_plot(page: Any, predicate: str, *, plot_index: Any = 0, plot: Any = None, arg: Any = None,
                  timeout: float = PLOT_CHANGE_TIMEOUT) -> list[dict]:
    """Wait until the JS ``predicate(data, arg)`` is true for the plot's data; return the data.

    ``predicate`` is a JS function source receiving the traces as ``read_plotly_data``
    returns them, e.g. ``"(d, v) => d[1].x[0] === v"`` with ``arg=9``. Polls in the page
    with ``page.wait_for_function``. The plot is chosen as in ``read_plotly_data``.
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

    target = _plot_target(plot_index if plot is None else plot, timeout)
    fn = "([t, arg]) => { const d = (%s)(t); return d !== null && !!(%s)(d, arg); }" % (_PLOT_DATA_JS, predicate)
    try:
        page.wait_for_function(fn, arg=[target, arg], timeout=timeout * 1000, polling=50)
    except PlaywrightTimeoutError:
        now = page.evaluate(_PLOT_DATA_JS, target)
        raise TimeoutError(f"plot condition {predicate} (arg {arg!r}) not met within {timeout:.0f} s;"
                           f" the plot's data now: {summarize_plot(now)}") from None
    return page.evaluate(_PLOT_DATA_JS, target)


def summarize_plot(data: list[dict] | None, width: int = 120) -> str:
    """One line per trace (name, x, y, shortened) for failure messages."""
    if data is None:
        return "no plot"
    def short(v: Any) -> str:
        text = json.dumps(v)
        return text if len(text) <= width else text[:width] + "..."
    return "".join(f"\n  [{i}] {t.get('name')!r}: x={short(t.get('x'))} y={short(t.get('y'))}"
                   for i, t in enumerate(data))


def wait_for_plot_change(page: Any, before: list[dict], timeout: float = PLOT_CHANGE_TIMEOUT, *,
                         plot_index: Any = 0, plot: Any = None) -> list[dict]:
    """Wait until the plot's data differ from ``before`` (as read by ``read_plotly_data``).

    Returns the new data. A callback that updates traces outside ``fig.batch_update()``
    may be caught half-way: then wait on the final state with ``wait_for_plot``.
    """
    return wait_for_plot(page, "(d, before) => JSON.stringify(d) !== JSON.stringify(before)",
                         plot_index=plot_index, plot=plot, arg=before, timeout=timeout)


# --------------------------------------------------------------------------- keypress -> plot latency

# Armed before a key press: remembers the plot's data (its arrays by reference, and as JSON), then
# records, in the page's own clock (performance.now, ms), the keydown on the slider's handle, the
# kernel messages of the move (when a notebook panel's kernel is found: the comm message that
# carries the new value out, the comm messages that come back, with their sizes) and the first
# moment the plot's data differ from before. The plot is checked at every plotly event on it
# (plotly_afterplot / _restyle / _update / _relayout) and every 4 ms in between, first by
# reference (cheap: plotly's update swaps in new arrays), then by value. Playwright's own
# round trips are not in the figure.
_ARM_LATENCY_JS = r"""
([gd, handle, path]) => {
  const old = window.__npuLatency;
  if (old && old.disarm) old.disarm();
  const refs = () => gd.data.map(t => Object.keys(t).filter(k => !k.startsWith('_')).map(k => [k, t[k]]));
  const json = () => JSON.stringify(gd.data, (k, v) => (k.startsWith('_') ? undefined
      : ArrayBuffer.isView(v) ? Array.from(v) : v));
  const sameRefs = (a, b) => a.length === b.length && a.every((t, i) => t.length === b[i].length
      && t.every(([k, v], j) => b[i][j][0] === k && b[i][j][1] === v));
  const rec = {key: null, sent: null, recv: [], change: null, armed: performance.now()};
  let beforeRefs = refs(), beforeJson = json(), timer = null;
  const check = () => {
    if (rec.change !== null || rec.key === null) return;
    const now = refs();
    if (sameRefs(now, beforeRefs)) return;
    beforeRefs = now;
    if (json() !== beforeJson) { rec.change = performance.now(); rec.disarm(); }
  };
  const onKey = () => { if (rec.key === null) rec.key = performance.now(); };
  handle.addEventListener('keydown', onKey, true);
  const events = ['plotly_afterplot', 'plotly_restyle', 'plotly_update', 'plotly_relayout'];
  events.forEach(e => gd.on && gd.on(e, check));
  timer = setInterval(check, 4);
  let kernel = null, onAny = null;
  const app = window.jupyterapp;
  if (app && app.shell && path) {
    for (const w of app.shell.widgets('main'))
      if (w.context && w.context.path === path && w.sessionContext && w.sessionContext.session)
        kernel = w.sessionContext.session.kernel;
  }
  if (kernel) {
    const size = (msg) => {
      let n = 0;
      try { n = JSON.stringify(msg.content).length; } catch (e) { n = -1; }
      for (const b of msg.buffers || []) n += b.byteLength || 0;
      return n;
    };
    onAny = (_, {msg, direction}) => {
      if (rec.key === null || rec.change !== null) return;
      const type = msg.header && msg.header.msg_type;
      if (type !== 'comm_msg') return;
      if (direction === 'send' && rec.sent === null) rec.sent = performance.now();
      else if (direction === 'recv') rec.recv.push([performance.now(), size(msg)]);
    };
    kernel.anyMessage.connect(onAny);
  }
  rec.disarm = () => {
    clearInterval(timer);
    handle.removeEventListener('keydown', onKey, true);
    if (gd.removeListener) events.forEach(e => gd.removeListener(e, check));
    if (kernel && onAny) kernel.anyMessage.disconnect(onAny);
  };
  window.__npuLatency = rec;
  return true;
}
"""

_LATENCY_RESULT_JS = r"""
() => {
  const r = window.__npuLatency;
  if (!r || r.change === null) return null;
  const rel = (t) => (t === null ? null : t - r.key);
  return {total_ms: r.change - r.key, sent_ms: rel(r.sent),
          first_reply_ms: r.recv.length ? rel(r.recv[0][0]) : null,
          replies: r.recv.length, reply_bytes: r.recv.reduce((s, x) => s + Math.max(0, x[1]), 0),
          last_reply_ms: r.recv.length ? rel(r.recv[r.recv.length - 1][0]) : null,
          trace: r.recv.map(([t, n]) => [Math.round(rel(t) * 10) / 10, n])};
}
"""


_CHOOSE_OPTION_JS = r"""
(sel, step) => {
  const i = sel.selectedIndex + step;
  if (i < 0 || i >= sel.options.length) return false;       // at its end: nothing changes
  const rec = window.__npuLatency;
  if (rec && rec.key === null) rec.key = performance.now();
  sel.selectedIndex = i;
  sel.dispatchEvent(new Event('change', {bubbles: true}));
  return true;
}
"""


def control_handle(control: Any) -> Any:
    """What takes the keyboard in a control: a slider's noUiSlider handle, a dropdown's
    ``<select>`` (for :func:`keypress_to_plot_ms`, ArrowDown / ArrowUp choose the next / previous
    option, as a learner's choice in its list does)."""
    if control.locator(".noUi-handle").count():
        return control.locator(".noUi-handle").first
    return control.locator("select").first


def control_value(control: Any) -> str:
    """A slider's readout or a dropdown's chosen option (its value attribute, an index)."""
    if control.locator(".noUi-handle").count():
        return slider_value(control)
    return control.locator("select").first.input_value()


def keypress_to_plot_ms(page: Any, slider: Any, plot: Any, key: str = "ArrowRight", *,
                        notebook_path: str | None = None, timeout: float = PLOT_CHANGE_TIMEOUT) -> dict:
    """Press ``key`` on ``slider``'s handle (or a dropdown's select: :func:`control_handle`) and
    time, in the page's clock, keydown -> the plot's
    data changed. Returns ``{"total_ms", "sent_ms", "first_reply_ms", "replies", "reply_bytes"}``:
    the total, and (when ``notebook_path`` names an open JupyterLab notebook, so its kernel's
    messages can be watched) when the value left for the kernel, when the first comm message came
    back (the kernel's work in between), how many comm messages came back before the plot changed
    and their size in bytes. Raises ``TimeoutError`` when the plot does not change in ``timeout`` s
    (e.g. a slider at its end does not move)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

    handle = control_handle(slider)
    handle.focus()
    target = _plot_target(plot, UI_TIMEOUT)
    page.evaluate(_ARM_LATENCY_JS, [target, handle.element_handle(), notebook_path])
    if handle.evaluate("e => e.tagName") == "SELECT":
        # a closed <select> does not step on arrow keys in headless chromium: choose the next
        # (ArrowDown) or previous (ArrowUp) option as a click in its list does, timed from there
        handle.evaluate(_CHOOSE_OPTION_JS, 1 if key == "ArrowDown" else -1)
    else:
        handle.press(key)
    try:
        page.wait_for_function("() => !!window.__npuLatency && window.__npuLatency.change !== null",
                               timeout=timeout * 1000, polling=20)
    except PlaywrightTimeoutError:
        page.evaluate("() => window.__npuLatency && window.__npuLatency.disarm()")
        raise TimeoutError(f"the plot did not change within {timeout:.0f} s of {key} on the slider") from None
    return page.evaluate(_LATENCY_RESULT_JS)
