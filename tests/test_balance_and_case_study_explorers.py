"""The notebook-13 explorers: BalanceExplorer (schedules of variable-length work, with an optional
simulated run and its monitor verdict) and CaseStudyExplorer (the 8x910B service curve).

Each move redraws inside one batch_update, from the library's own numbers; bad control values are
refused by name; a move of the model-only controls stays well under the 50 ms slider budget
(measured here with a margin for a loaded machine)."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest

from npu_lab.course.explorers.balance import BalanceExplorer
from npu_lab.course.explorers.case_study import CONTEXTS, CaseStudyExplorer
from npu_lab.llm import STORAGE_FORMATS, case_study_point, service_curve
from npu_lab.sched import compare_schedules, lpt_schedule


@contextmanager
def count_batch_updates(fig):
    calls = []
    orig = fig.batch_update

    @contextmanager
    def counted():
        calls.append(1)
        with orig():
            yield
    fig.batch_update = counted
    try:
        yield calls
    finally:
        fig.batch_update = orig


def test_balance_explorer_draws_the_model():
    e = BalanceExplorer(spread=1.5, items=20, cores=6)
    lens = e.lengths()
    assert len(lens) == 20 and all(16 <= x <= 1024 for x in lens)
    loads = {t.name: list(t.y) for t in e.figure.data}
    assert loads["LPT"] == list(lpt_schedule(lens, 6).loads)
    assert all(sum(v) == sum(lens) for v in loads.values())            # every schedule places all work
    assert e.table.equals(compare_schedules(lens, 6))
    assert e.figure.layout.shapes[0].y0 == pytest.approx(sum(lens) / 6)
    assert "Graham" not in e.status.value                                # 20 items: no brute force
    with count_batch_updates(e.figure) as calls:
        e.cores.value = 3
        e.items.value = 9
    assert len(calls) == 2
    assert "Graham's bound 1.222" in e.status.value and e.report is None


def test_balance_explorer_simulates_and_shows_the_monitor_verdict():
    e = BalanceExplorer(items=8, cores=4, simulate=True, schedule="contiguous")
    assert e.report is not None and e.report.verdict in e.status.value
    e.schedule.value = "LPT"
    lpt = e.report.summary["balance_max_over_mean"]
    e.schedule.value = "contiguous"
    assert e.report.summary["balance_max_over_mean"] >= lpt


def test_case_study_explorer_marks_the_batch_and_the_claims():
    e = CaseStudyExplorer(batch=64, context=8192)
    p = case_study_point(64, 8192)
    assert e.figure.data[2].y[0] == pytest.approx(p["row"]["tokens_per_s"])
    assert "after (3,850 tok/s at P99 15 ms): <b>wrong</b>" in e.status.value
    with count_batch_updates(e.figure) as calls:
        e.storage.value = "int8 weights, int8 KV"
    assert len(calls) == 1
    assert "after (3,850 tok/s at P99 15 ms): <b>consistent</b>" in e.status.value
    xs = np.asarray(e.figure.data[0].x)
    assert (np.diff(xs) > 0).all()                                      # larger batch, longer step


@pytest.mark.parametrize("make, words", [
    (lambda: BalanceExplorer(cores=0), "cores must be"), (lambda: BalanceExplorer(spread=3.0), "spread"),
    (lambda: BalanceExplorer(schedule="random"), "schedule must be one of"),
    (lambda: CaseStudyExplorer(batch=0), "batch must be"), (lambda: CaseStudyExplorer(context=5000), "context"),
])
def test_bad_values_are_refused_by_name(make, words):
    with pytest.raises(ValueError, match=words):
        make()


def test_moves_are_fast():
    b, c = BalanceExplorer(), CaseStudyExplorer()
    worst = 0.0
    for v in (2, 5, 11, 16):
        b.cores.value = v
        worst = max(worst, b.last_update_s)
    for ctx in CONTEXTS:
        c.context.value = ctx
        worst = max(worst, c.last_update_s)
    for bt in (1, 100, 256):
        c.batch.value = bt
        worst = max(worst, c.last_update_s)
    assert worst < 0.15           # 50 ms budget alone; margin for 8 helpers on 2 cores


def test_service_curve_and_point():
    curve = service_curve(4096, "int8", "bf16", max_batch=64)
    assert list(curve.batch) == list(range(1, 65))
    assert curve.step_ms.to_numpy() == pytest.approx(curve.step_us.to_numpy() / 1e3)
    p = case_study_point(10, 4096, "int8", "bf16")
    assert p["row"]["batch"] == 10
    for c in p["claims"]:
        assert (c["verdict"] == "consistent") == (c["article_tokens_per_s"] <= c["best_tokens_per_s"])
    with pytest.raises(ValueError, match="batch must be"):
        case_study_point(0)
    assert [s[0] for s in STORAGE_FORMATS][0].startswith("bf16")
