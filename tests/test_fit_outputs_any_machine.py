"""Appendix 07b's unbounded fits print the same on any machine (issue 16 §6).

nbval compares printed outputs, and a least-squares fit in a flat valley stops where the
machine's floating-point rounding lets it (OpenBLAS picks kernels by CPU type). The cells print
fits that land on the same point under another BLAS kernel set, rounded to what the fit fixes;
this test runs those computations in a subprocess with ``OPENBLAS_CORETYPE=Prescott`` (the oldest
x86-64 kernels: no FMA) and one thread, and compares the printed text with this process's."""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# the computations of 07b's cells 13 (unbounded fit), 23 (two starts) and 25 (a valley row), printed
# as the cells print them
SCRIPT = r'''
import json
import pandas as pd
from npu_lab.data import load_article_tile_sweep
from npu_lab.kernels.moe_gating.article import (ARTICLE_FREE, double_buffering_gain, fit_hardware,
                                                valley_scan)
from npu_lab.presets import get_preset
table = load_article_tile_sweep()
hw = get_preset("ascend-910b2")
out = {}
unbounded = fit_hardware(table, ranges={})
out["cell 13"] = f"{unbounded.mape:.1f} " + unbounded.fields.set_index("field")["fitted"].to_string()
starts = {"910B2 preset": hw,
          "UB access 200, DMA latency 100": hw.replace(scalar_ub_access_cycles=200.0, dma_latency_cycles=100.0)}
four = {name: fit_hardware(table, base, ranges={}, starts=1) for name, base in starts.items()}
out["cell 23"] = pd.DataFrame([{"start": name, "mape_pct": f.mape, **{k: getattr(f.spec, k) for k in ARTICLE_FREE},
                                "v2_gain_pct": 100 * double_buffering_gain(f.spec)} for name, f in four.items()]
                              ).set_index("start").round(2).to_string()
valley = valley_scan((10,))
out["cell 25"] = valley.round(2).round({"dma_latency_cycles": 0}).to_string(index=False)
print(json.dumps(out))
'''


def _run(extra_env: dict) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1", **extra_env}
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_07b_fits_print_the_same_under_another_blas_kernel_set():
    here = _run({})
    other = _run({"OPENBLAS_CORETYPE": "Prescott"})
    for cell in here:
        assert here[cell] == other[cell], f"07b {cell} prints differently with OPENBLAS_CORETYPE=Prescott:\n" \
                                          f"{here[cell]}\n---\n{other[cell]}"


# ----------------------------------------------------------------- every student notebook, another machine
#: What "another machine of the same kind" changes in a float path, as far as one machine can show it:
#: OpenBLAS's kernel set (chosen by CPU type at load: Prescott is the oldest x86-64 set, no FMA) and its
#: thread count (here 1; the default is one per core), and numpy's own SIMD loops (exp, log1p, sums:
#: numpy picks AVX-512 or AVX2 code at import, and the two round differently, e.g. float32 log1p).
def _avx512_dispatch() -> str:
    """numpy's AVX-512 dispatch targets this CPU runs ("X86_V4 AVX512_ICL AVX512_SPR" with numpy 2.4 on
    a Sapphire Rapids): NPY_DISABLE_CPU_FEATURES refuses names its numpy does not dispatch to."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:                                     # numpy < 2
        from numpy.core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    return " ".join(f for f in __cpu_dispatch__ if ("AVX512" in f or f == "X86_V4") and __cpu_features__.get(f))


OTHER_MACHINE = {"OPENBLAS_CORETYPE": "Prescott", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
                 **({"NPY_DISABLE_CPU_FEATURES": _avx512_dispatch()} if _avx512_dispatch() else {})}

#: A first notebook that fails unless the kernel nbval starts really runs as OTHER_MACHINE says: the
#: variables reach it, OpenBLAS loaded the Prescott kernels and runs one thread (its own report, read
#: through ctypes), and numpy's AVX-512 dispatch is off (where this CPU and this numpy have it at all).
PROBE = r'''
import ctypes, os, re
import numpy as np
import scipy.linalg  # noqa: F401  (scipy's OpenBLAS reads the same variables)
assert os.environ.get("OPENBLAS_CORETYPE") == "Prescott", os.environ.get("OPENBLAS_CORETYPE")
libs = sorted({line.split()[-1] for line in open("/proc/self/maps") if re.search(r"openblas[^/]*\.so", line)})
names = {}
for path in libs:
    lib = ctypes.CDLL(path)
    for sym in ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads", "openblas_get_num_threads"):
        if hasattr(lib, sym):
            assert getattr(lib, sym)() == int(os.environ["OPENBLAS_NUM_THREADS"]), (path, getattr(lib, sym)())
            break
    for sym in ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename", "openblas_get_corename64_",
                "openblas_get_corename"):
        if hasattr(lib, sym):
            getattr(lib, sym).restype = ctypes.c_char_p
            names[path] = getattr(lib, sym)().decode()
            break
# (a DYNAMIC_ARCH OpenBLAS shares one kernel set between the pre-Core 2 cores and names it after the first)
assert names and all(n.lower() in ("prescott", "katmai", "coppermine", "northwood") for n in names.values()), names
try:
    from numpy._core._multiarray_umath import __cpu_features__
except ImportError:
    from numpy.core._multiarray_umath import __cpu_features__
off = os.environ.get("NPY_DISABLE_CPU_FEATURES", "").split()
assert not [f for f in off if __cpu_features__.get(f)], f"numpy still dispatches to {off}"
print("ok")
'''


def _probe_notebook(path: Path) -> None:
    import nbformat
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(PROBE, execution_count=1)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="ok\n")]
    nb.cells = [cell]
    nbformat.write(nb, path)


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"),
                    reason="Prescott is an x86-64 OpenBLAS kernel set; the probe reads /proc/self/maps (Linux)")
def test_every_student_notebook_prints_its_outputs_on_another_machine(tmp_path):
    """nbval over every student notebook, as `make test-notebooks` runs it, in a kernel that takes
    OTHER_MACHINE's float paths (issue 16 §6). A cell that prints a digit the machine decides fails
    here: print what the method determines, rounded to it (07b's fits), or a comparison's verdict
    (14's layer against numpy). About 75 s on an idle 2-core machine."""
    probe = tmp_path / "00_probe_other_machine.ipynb"
    _probe_notebook(probe)
    notebooks = sorted(str(p.relative_to(REPO)) for p in (REPO / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
    assert len(notebooks) >= 15, notebooks
    env = {**os.environ, "PYTHONPATH": str(REPO), **OTHER_MACHINE}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                           "--nbval", "--nbval-current-env", "--nbval-sanitize-with", "tests/nbval_sanitize.cfg",
                           "--nbval-cell-timeout=300", "-o", "addopts=", str(probe), *notebooks],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    tail = done.stdout[-6000:] + done.stderr[-2000:]
    assert done.returncode == 0, f"nbval under {OTHER_MACHINE} failed:\n{tail}"
    assert re.search(r"\b\d+ passed\b", done.stdout) and " failed" not in done.stdout, tail
