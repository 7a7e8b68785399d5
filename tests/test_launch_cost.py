"""Launch overhead = fixed part + part per core started; kernel types (npu_lab.sim.launch_cost)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from npu_lab import get_preset, launch, npu_kernel
from npu_lab.hardware import FIELD_DOCS
from npu_lab.lang import CapabilityError, TBuf
from npu_lab.sim.launch_cost import (KERNEL_TYPES, canonical_kernel_type, cores_launched, full_launch_overhead_us,
                                     launch_overhead_us)

HW = get_preset("ascend-910b2")


def _same(bd, *args):
    return np.zeros(bd, dtype=int)


def _body(ctx):
    buf = TBuf()
    ctx.pipe.init_buffer(buf, 4096, name="buf")
    ctx.exp(buf.get("float32"), buf.get("float32"), 1024)


@npu_kernel(block_classes=_same)
def vector_kernel(ctx):
    _body(ctx)


@npu_kernel(block_classes=_same, core_type="mix")
def mixed_vector_kernel(ctx):
    """The same vector work, launched as mixed AIC:AIV 1:2 (what auto-detection picks)."""
    _body(ctx)


def _overhead_us(kernel, block_dim, hw=HW):
    return launch(kernel, block_dim, hw=hw, timing_only=True).launch_overhead_us


def test_overhead_grows_with_cores_launched_then_stays():
    values = [_overhead_us(vector_kernel, bd) for bd in (1, 2, 8, 24, 48)]
    assert all(a < b for a, b in zip(values, values[1:]))
    assert _overhead_us(vector_kernel, 96) == pytest.approx(values[-1])   # still 48 cores started
    assert values[1] - values[0] == pytest.approx(HW.launch_per_core_us, abs=1e-3)


def test_empty_kernel_on_all_cores_keeps_the_measured_20_us():
    """docs/cost_model_system.md: about 20 µs for an empty kernel on all cores of the 910B2."""
    assert full_launch_overhead_us(HW) == pytest.approx(20.0)
    assert _overhead_us(vector_kernel, 48) == pytest.approx(20.0, abs=1e-3)


def test_mixed_launch_pays_for_the_idle_cube_cores():
    for bd in (1, 7, 48, 100):
        vec = launch(vector_kernel, bd, hw=HW, timing_only=True)
        mix = launch(mixed_vector_kernel, bd, hw=HW, timing_only=True)
        idle = min(math.ceil(min(bd, 10**9) / 2), HW.cube_cores)
        assert mix.launches[0].cores_launched == {"vector": min(bd, 48), "cube": idle}
        assert mix.launch_overhead_us - vec.launch_overhead_us == pytest.approx(idle * HW.launch_per_core_us, abs=1e-3)
        assert mix.launch_overhead_us > vec.launch_overhead_us
        # the blocks themselves run exactly as before
        assert mix.total_us - mix.launch_overhead_us == pytest.approx(vec.total_us - vec.launch_overhead_us)
        assert mix.launches[0].kernel_type == "mix_aic_1_2" and mix.launches[0].core_type == "vector"


def test_cores_launched_table():
    assert cores_launched(HW, "vector", 10) == {"vector": 10, "cube": 0}
    assert cores_launched(HW, "cube", 30) == {"vector": 0, "cube": 24}
    assert cores_launched(HW, "mix_aic_1_2", 10) == {"vector": 10, "cube": 5}
    assert cores_launched(HW, "mix_aic_1_1", 10) == {"vector": 10, "cube": 10}
    assert cores_launched(HW, "mix_aic_1_1", 48) == {"vector": 48, "cube": 24}
    assert launch_overhead_us(HW, "mix", 48) == pytest.approx(HW.launch_overhead_us + 72 * HW.launch_per_core_us)


def test_kernel_types_are_validated():
    assert canonical_kernel_type("mix") == "mix_aic_1_2"
    assert set(KERNEL_TYPES) == {"vector", "cube", "mix_aic_1_2", "mix_aic_1_1"}
    with pytest.raises(ValueError, match="kernel type must be one of"):
        npu_kernel(core_type="hybrid")
    with pytest.raises(ValueError, match="block_dim"):
        cores_launched(HW, "vector", 0)


def test_mixed_types_do_not_exist_on_the_310p():
    with pytest.raises(CapabilityError, match="mixed AIC:AIV"):
        launch(mixed_vector_kernel, 8, hw="ascend-310p3", timing_only=True)


def test_new_fields_are_documented_with_provenance():
    for name in ("l2_bandwidth_gbps", "launch_per_core_us"):
        assert name in FIELD_DOCS
        for preset in ("ascend-910b2", "ascend-310p3", "article"):
            kind, note = get_preset(preset).provenance[name]
            assert kind in ("vendor-guide", "assumed", "fitted", "measured") and note
    # the guide's 7 TB/s is a hypothetical (L2-Cache切分.md: 假设...), so the figure is assumed
    assert HW.provenance["l2_bandwidth_gbps"][0] == "assumed"
