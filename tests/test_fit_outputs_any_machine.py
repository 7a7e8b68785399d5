"""Appendix 07b's unbounded fits print the same on any machine (issue 16 §6).

nbval compares printed outputs, and a least-squares fit in a flat valley stops where the
machine's floating-point rounding lets it (OpenBLAS picks kernels by CPU type). The cells print
fits that land on the same point under another BLAS kernel set, rounded to what the fit fixes;
this test runs those computations in a subprocess with ``OPENBLAS_CORETYPE=Prescott`` (the oldest
x86-64 kernels: no FMA) and one thread, and compares the printed text with this process's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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
