"""Host side of the grouped routing kernel: validate the options (the reference's own checks),
tile, copy to "device", launch :func:`~.grouped.moe_gating_grouped_kernel`, copy back.

``run_grouped(x, k, hw=..., **options)`` returns ``(outputs, timeline, tiling)`` where outputs
is ``(indices, weights)`` or a :class:`~.reference.GatingOutputs` (``extras=True``) shaped like the
reference's; ``simulate_grouped(B, S, E, K, **options)`` gives the timeline alone (timing-only).
"""

from __future__ import annotations

import numpy as np

from ...lang import CapabilityError, GlobalTensor, launch
from ...presets import get_preset
from .grouped import calculate_grouped_tiling, grouped_unsupported_reason, moe_gating_grouped_kernel
from .reference import (GATING_OPTION_DEFAULTS, KERNEL_NONFINITE_HINT, GatingOutputs, _check_k, _check_logits,
                        _check_options, _raise_on_nonfinite)

__all__ = ["run_grouped", "simulate_grouped"]


def _options(options: dict) -> dict:
    unknown = sorted(set(options) - set(GATING_OPTION_DEFAULTS))
    if unknown:
        raise TypeError(f"unknown routing option(s) {', '.join(unknown)}; the options are: "
                        f"{', '.join(GATING_OPTION_DEFAULTS)}")
    return dict(GATING_OPTION_DEFAULTS, **options)


def _tiling(N, E, K, hw, o, dtype):
    return calculate_grouped_tiling(N, E, K, hw, score=o.score, has_bias=o.bias is not None,
                                    num_groups=o.num_groups, topk_groups=o.topk_groups,
                                    group_select=o.group_select, renorm=o.renorm,
                                    routed_scaling_factor=float(o.scale), eps=float(o.eps),
                                    has_finished=o.finished is not None, extras=o.extras, dtype=dtype)


def _gms(N, E, K, o, timing_only, x=None, dtype=np.float32):
    mk = (lambda n, dt, name: GlobalTensor.empty(n, dt, name, timing_only=True)) if timing_only else \
        (lambda n, dt, name: GlobalTensor.empty(n, dt, name))
    gate = mk(N * E, dtype, "gate_logits") if x is None else GlobalTensor.from_array(x, "gate_logits")
    if o.bias is not None and not timing_only:
        bias = GlobalTensor.from_array(o.bias.astype(np.float32), "bias")
    else:
        bias = mk(E if o.bias is not None else 1, np.float32, "bias")
    if o.finished is not None and not timing_only:
        fin = GlobalTensor.from_array(o.finished.astype(np.int32), "finished")
    else:
        fin = mk(N if o.finished is not None else 1, np.int32, "finished")
    idx, w = mk(N * K, np.int32, "expert_indices"), mk(N * K, np.float32, "routing_weights")
    ri = mk(N * K if o.extras else 1, np.int32, "row_idx")
    norm = mk(N * E if o.extras else 1, np.float32, "norm_out")
    return gate, bias, fin, idx, w, ri, norm


def _launch(gms, tiling, hw, timing_only):
    why = grouped_unsupported_reason(hw)
    if why:
        raise CapabilityError(why)
    return launch(moe_gating_grouped_kernel, tiling.blockNum, *gms, tiling.pack(), hw=hw,
                  timing_only=timing_only, name="MoeGatingTopK grouped")


def run_grouped(gate_logits, k, *, hw="ascend-910b2", **options):
    """Run the grouped kernel on [N, E] or [B, S, E] float32 / float16 logits with the routing
    options of :func:`~.reference.moe_gating_topk_reference` (same names, same checks, same
    errors). Returns ``(outputs, timeline, tiling)``."""
    hw = get_preset(hw)
    o_in = _options(options)
    x = np.asarray(gate_logits) if isinstance(gate_logits, np.ndarray) else gate_logits
    xf = _check_logits(x)
    if np.asarray(x).dtype not in (np.float32, np.float16):
        raise TypeError(f"gate_logits must be float32 or float16 on the device; got {np.asarray(x).dtype}. "
                        "Cast with .astype(np.float32)")
    x = np.asarray(x)
    E = x.shape[-1]
    K = _check_k(k, E)
    lead = x.shape[:-1]
    o = _check_options(o_in, lead, E, K)
    _raise_on_nonfinite(xf.reshape(-1, E), x.shape, KERNEL_NONFINITE_HINT)
    N = int(np.prod(lead))
    tiling = _tiling(N, E, K, hw, o, x.dtype)
    gms = _gms(N, E, K, o, False, x=x.reshape(-1), dtype=x.dtype)
    timeline = _launch(gms, tiling, hw, False)
    idx = gms[3].data.reshape(*lead, K).copy()
    w = gms[4].data.reshape(*lead, K).copy()
    if not o.extras:
        return (idx, w), timeline, tiling
    flat = idx.reshape(-1)
    counts = np.bincount(flat[flat < E], minlength=E).astype(np.int64)     # host-side (module docstring)
    out = GatingOutputs(idx, w, gms[5].data.reshape(*lead, K).copy(), gms[6].data.reshape(*lead, E).copy(), counts)
    return out, timeline, tiling


def simulate_grouped(B, S, E, K, *, hw="ascend-910b2", dtype=np.float32, **options):
    """Timing-only run from the shape: ``bias`` / ``finished`` may be given as arrays or as True
    (present, values irrelevant to the timeline). Returns ``(timeline, tiling)``."""
    hw = get_preset(hw)
    o_in = _options(options)
    if o_in["bias"] is True:
        o_in["bias"] = np.zeros(E, np.float32)
    if o_in["finished"] is True:
        o_in["finished"] = np.zeros((B, S), bool)
    K = _check_k(K, E)
    o = _check_options(o_in, (B, S), E, K)
    N = B * S
    tiling = _tiling(N, E, K, hw, o, np.dtype(dtype))
    timeline = _launch(_gms(N, E, K, o, True, dtype=dtype), tiling, hw, True)
    return timeline, tiling
