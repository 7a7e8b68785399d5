#!/usr/bin/env bash
# Install what the real-browser tests (make test-browser) need, idempotently:
#   - Debian's chromium at /usr/bin/chromium (never a Playwright browser download);
#   - the project with its `browser` extra (Python playwright) into the venv.
# Works as root on a fresh Debian machine (CI) and is a quick no-op when all is there.
set -euo pipefail

cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PY="$VENV/bin/python"

if [ ! -x /usr/bin/chromium ]; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -q
    $SUDO apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core
fi
/usr/bin/chromium --version

if [ ! -x "$PY" ]; then
    "${PYTHON:-python3}" -m venv "$VENV"
fi
if ! "$PY" -c "import playwright" 2>/dev/null; then
    # Playwright's pip wheel ships its node driver; we do NOT run `playwright install`:
    # the harness drives /usr/bin/chromium through executable_path.
    "$PY" -m pip install --quiet -e '.[browser]'
fi
"$PY" -c "import importlib.metadata as m; print('playwright', m.version('playwright'))"
