"""Measure the KFullLoad kernel's weight error against the reference (the figure its tolerance rests on).

    PYTHONPATH=$PWD python scripts/measure_kfullload_error.py [examples]   # default 300, ~1 min

Draws configs from the strategy of tests/test_moe_large_e.py (E 1..2048, K <= min(E, 1024), 1..10 rows,
every logit distribution of tests/strategies.py, chunk widths None/32/64/96/160/256), runs
``run_large_e(x, k, renorm=False)`` and prints the largest relative weight error (weights > 1e-30),
the rows checked, and the rows whose indices are compared exactly (no equal-probability ties with
different logits; every row's chosen probabilities are compared element for element).
"""

from __future__ import annotations

import sys

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npu_lab.kernels.moe_gating import moe_gating_topk_reference
from npu_lab.kernels.moe_gating.large_e import run_large_e
from tests.strategies import gate_logits
from tests.test_moe_large_e import _check_kfl


def main(examples: int = 300) -> dict:
    stats = {"configs": 0, "max_rel_err": 0.0, "rows": 0, "rows_exact_indices": 0}

    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(data=st.data())
    def measure(data):
        E = data.draw(st.integers(1, 2048))
        K = data.draw(st.integers(1, min(E, 1024)))
        x = data.draw(gate_logits(shape=(data.draw(st.integers(1, 10)), E)))
        chunk = data.draw(st.sampled_from((None, 32, 64, 96, 160, 256)))
        idx, w, _, _ = run_large_e(x, K, chunk=chunk, renorm=False)
        _, ref_w = moe_gating_topk_reference(x, K, renorm=False)
        big = ref_w > 1e-30
        if big.any():
            err = float(np.max(np.abs(w[big] - ref_w[big]) / ref_w[big]))
            stats["max_rel_err"] = max(stats["max_rel_err"], err)
        stats["configs"] += 1
        stats["rows"] += idx.reshape(-1, K).shape[0]
        stats["rows_exact_indices"] += _check_kfl(x, K, idx, w)

    measure()
    return stats


if __name__ == "__main__":
    print(main(int(sys.argv[1]) if len(sys.argv) > 1 else 300))
