"""Fixtures for the real-browser tests (``make test-browser``; marker ``browser``).

- ``browser``: one headless Debian chromium for the whole session (Playwright).
- ``page``: a fresh browser context + page per test, closed afterwards.
- ``shots``: the folder screenshots go to (``$NPU_LAB_SCREENSHOTS`` or a temp dir),
  printed in pytest's terminal summary.
- ``lab_server`` / ``voila_server``: factories; ``lab_server(root_dir)`` and
  ``voila_server(notebook)`` start a server that is stopped when the test ends.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from . import harness

_SHOTS_KEY = pytest.StashKey[Path]()


def _shots_dir(config: pytest.Config) -> Path:
    if _SHOTS_KEY not in config.stash:
        env = os.environ.get("NPU_LAB_SCREENSHOTS")
        if env:
            path = Path(env)
        else:
            import tempfile

            path = Path(tempfile.mkdtemp(prefix="npu_lab_screenshots_"))
        path.mkdir(parents=True, exist_ok=True)
        config.stash[_SHOTS_KEY] = path
    return config.stash[_SHOTS_KEY]


@pytest.fixture(scope="session")
def shots(pytestconfig: pytest.Config) -> Path:
    """Folder for screenshots (kept after the run; printed in the summary)."""
    return _shots_dir(pytestconfig)


@pytest.fixture(scope="session")
def browser():
    """A headless chromium (``/usr/bin/chromium``) shared by the session's tests."""
    with harness.chromium_browser() as b:
        yield b


@pytest.fixture
def page(browser):
    """A new page in its own context; console errors land in ``page.npu_console_errors``."""
    p = harness.new_page(browser)
    try:
        yield p
    finally:
        p.context.close()


@pytest.fixture
def lab_server():
    """Factory: ``lab_server(root_dir)`` -> running ``harness.Server``, stopped at teardown."""
    with contextlib.ExitStack() as stack:
        yield lambda root_dir, **kw: stack.enter_context(harness.jupyter_lab_server(root_dir, **kw))


@pytest.fixture
def voila_server():
    """Factory: ``voila_server(notebook)`` -> running ``harness.Server``, stopped at teardown."""
    with contextlib.ExitStack() as stack:
        yield lambda notebook, **kw: stack.enter_context(harness.voila_server(notebook, **kw))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _SHOTS_KEY in config.stash:
        terminalreporter.write_line(f"browser screenshots: {config.stash[_SHOTS_KEY]}")
    from .test_slider_latency import summary_lines   # the keypress -> plot table, when it ran

    for line in summary_lines():
        terminalreporter.write_line(line)
