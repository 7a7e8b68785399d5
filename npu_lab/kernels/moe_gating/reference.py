"""Plain-numpy reference for MoeGatingTopK: the numbers every kernel version must reproduce.

This module imports nothing from the simulator or the kernels, so a bug there cannot hide here.

Semantics (README.md, 'How the model works'; the notebook 02_discrete_pipeline), per row of E gate logits:

1. pick the K largest logits; order them by value, descending; equal values go to the **lower**
   expert index (what the hardware's Sort32 does);
2. routing weights = softmax over those K logits only (the row maximum is subtracted first).

Step 2 equals "softmax over all E, take the top K, renormalise" (see
:func:`softmax_topk_renormalise_reference`): the common factor ``1 / sum_E exp`` cancels in the
renormalisation, so a fused kernel may skip E - K of the exponentials.

The keyword options of :func:`moe_gating_topk_reference` (``score``, ``bias``, grouped selection,
``renorm``, ``routed_scaling_factor``, ``eps``, ``finished``, ``extras``) give the semantics of the
production routers that CANN's MoeGatingTopK, MoeGatingTopKSoftmax and MoeGatingTopKSoftmaxV2 serve;
docs/moe_routing.md maps each option to its CANN attribute and says where the operators differ. With
every option at its default the function runs the code above, unchanged.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

__all__ = [
    "GATING_OPTION_DEFAULTS",
    "GROUP_SELECT_MODES",
    "GatingOutputs",
    "NONFINITE_MODES",
    "SCORE_FUNCTIONS",
    "moe_gating_topk_reference",
    "refuse_kernel_options",
    "softmax_topk_renormalise_reference",
]

#: Accepted values of the ``nonfinite`` argument.
NONFINITE_MODES = ("raise", "hardware")


def as_logits_array(gate_logits) -> np.ndarray:
    """np.asarray, with the library's message for what numpy cannot make an array of."""
    try:
        return np.asarray(gate_logits)
    except (ValueError, TypeError) as exc:      # ragged nested lists, odd objects
        raise ValueError(f"gate_logits must be an array [N, E] or [B, S, E] of floats; cannot make "
                         f"one of {type(gate_logits).__name__} ({exc})") from None


def _check_logits(gate_logits) -> np.ndarray:
    """Validate shape and dtype; return the logits as a float32 array of the same shape."""
    x = as_logits_array(gate_logits)
    if x.ndim not in (2, 3):
        raise ValueError(
            "gate_logits must have rank 2 [N, E] or 3 [B, S, E]; "
            f"got rank {x.ndim} with shape {x.shape}"
        )
    kind = x.dtype.kind
    if kind in "iub":
        raise TypeError(
            f"gate_logits must be float32 or float16; got {x.dtype}; cast to float32 "
            "first, e.g. logits.astype(np.float32)"
        )
    if kind != "f":
        raise TypeError(
            f"gate_logits must be float32 or float16; got {x.dtype}, which has no meaningful "
            "ordering for top-k; pass real-valued logits as float32"
        )
    names = ("N", "E") if x.ndim == 2 else ("B", "S", "E")
    for name, size in zip(names, x.shape):
        if size == 0:
            raise ValueError(
                f"gate_logits has an empty dimension: {name} = 0 in shape {x.shape}; "
                "every dimension must be at least 1"
            )
    # float16 -> float32 is exact; float64 is rounded to float32, as a host cast would do
    with np.errstate(over="ignore"):
        return x.astype(np.float32, copy=False)


def _check_k(k, num_experts: int) -> int:
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, numbers.Integral):
        raise TypeError(f"k must be an int; got {type(k).__name__} {k!r}")
    k = int(k)
    if not 1 <= k <= num_experts:
        raise ValueError(
            f"k must satisfy 1 <= k <= E = {num_experts} (the number of experts); got k = {k}"
        )
    return k


def _row_label(flat_row: int, shape: tuple[int, ...]) -> str:
    """Human-readable position of flattened row ``flat_row`` of an [N, E] or [B, S, E] array."""
    if len(shape) == 3:
        b, s = divmod(flat_row, shape[1])
        return f"row (b, s) = ({b}, {s})"
    return f"row n = {flat_row}"


_NONFINITE_HINT = ("Logits must be finite: fix the upstream computation, or pass nonfinite='hardware' "
                   "for the documented hardware-faithful behaviour.")
#: What callers without a ``nonfinite`` argument (the kernels) say instead.
KERNEL_NONFINITE_HINT = ("The kernels take finite logits only: fix the upstream computation "
                         "(moe_gating_topk_reference(..., nonfinite='hardware') shows what the "
                         "hardware would do with them).")


def _raise_on_nonfinite(x: np.ndarray, original_shape: tuple[int, ...], hint: str = _NONFINITE_HINT) -> None:
    bad = ~np.isfinite(x)  # x is [N, E]
    if not bad.any():
        return
    rows = np.flatnonzero(bad.any(axis=1))
    first = int(rows[0])
    expert = int(np.flatnonzero(bad[first])[0])
    value = x[first, expert]
    raise ValueError(
        f"gate_logits contains non-finite values in {rows.size} row(s); the first is "
        f"{_row_label(first, original_shape)}, which holds {value} at expert {expert}. " + hint
    )


def _topk_indices(keys: np.ndarray, k: int) -> np.ndarray:
    """Indices [N, k] of the k largest keys per row, descending, ties to the lower index.

    A stable sort of the negated keys keeps equal keys in index order. ``-key`` maps -0.0 and 0.0
    to values that compare equal, so they tie too, as they do on the hardware's compare.
    """
    order = np.argsort(-keys, axis=-1, kind="stable")
    return order[:, :k]


# ----------------------------------------------------------------------------------------------
# Routing options: the production routers' semantics (docs/moe_routing.md)
# ----------------------------------------------------------------------------------------------

#: ``score`` values, in CANN ``normType`` order (0 softmax, 1 sigmoid).
SCORE_FUNCTIONS = ("softmax", "sigmoid")
#: ``group_select`` values, in CANN ``groupSelectMode`` order (0 max, 1 top-2 sum).
GROUP_SELECT_MODES = ("max", "top2_sum")
#: Every routing option and the value that reproduces the article's operator.
GATING_OPTION_DEFAULTS = {"score": "softmax", "bias": None, "num_groups": 1, "topk_groups": 1,
                          "group_select": "max", "renorm": True, "routed_scaling_factor": 1.0,
                          "eps": 1e-20, "finished": None, "extras": False}
#: options only MoeGatingTopK has (its limits apply when one of them is not at its default)
_GATING_TOP_K_OPTIONS = ("score", "bias", "num_groups", "topk_groups", "group_select",
                         "routed_scaling_factor", "eps")

#: CANN's limits and where they are checked (ops-transformer, moe/...)
CANN_MAX_EXPERTS = 2048           # MAX_EXPERT_COUNT, moe_gating_top_k/op_host/moe_gating_top_k_tiling.cpp
CANN_SOFTMAX_MAX_K = 1024         # MAX_K, moe_gating_top_k_softmax/op_host/..._tiling_base.cpp; V2 README
CANN_SORT_ALIGN = 32              # a group is padded to a multiple of 32 experts (Sort32 lanes)
_TOP_K_TILING = "moe/moe_gating_top_k/op_host/moe_gating_top_k_tiling.cpp (CheckAttr)"


@dataclass(frozen=True)
class GatingOutputs:
    """What ``moe_gating_topk_reference(..., extras=True)`` returns. Leading shape ``...`` is the
    input's ([N] or [B, S]).

    indices : int32 [..., K] -- chosen experts (E in a finished row);
    weights : float32 [..., K] -- routing weights (0 in a finished row);
    row_idx : int32 [..., K] -- ``row_idx[i, j] = j * N + i`` over the flattened rows, as CANN's
        MoeGatingTopKSoftmax ``rowIdxOut`` (the input MoeInitRouting V1 takes);
    norm_out : float32 [..., E] -- softmax or sigmoid of the logits, without the bias (CANN's
        ``normOut`` / ``out``, written when ``outFlag`` is true);
    expert_counts : int64 [E] -- how many (row, slot) pairs chose each expert; finished rows count
        for none.
    """

    indices: np.ndarray
    weights: np.ndarray
    row_idx: np.ndarray
    norm_out: np.ndarray
    expert_counts: np.ndarray


@dataclass(frozen=True)
class _Options:
    score: str
    bias: np.ndarray | None
    num_groups: int
    topk_groups: int
    group_select: str
    renorm: bool
    scale: np.float32
    eps: np.float32
    finished: np.ndarray | None     # bool [N]
    extras: bool
    is_default: bool

    @property
    def grouped(self) -> bool:
        """Groups restrict the choice (CANN's generalized template; otherwise "without group")."""
        return self.num_groups > 1 and self.topk_groups < self.num_groups

    @property
    def selects_on_logits(self) -> bool:
        """V2 renorm = 1: ``TopK(x)`` on the logits themselves."""
        return self.score == "softmax" and self.renorm and self.bias is None and not self.grouped


def _int_option(name: str, value) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int; got {type(value).__name__} {value!r}")
    return int(value)


def _real_option(name: str, value) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number; got {type(value).__name__} {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite; got {value}")
    if abs(value) > float(np.finfo(np.float32).max):
        # CANN's attribute is a float: a larger value overflows to inf in the kernel
        raise ValueError(f"{name} must fit a float32 (|value| <= {float(np.finfo(np.float32).max):.4g}), as CANN's "
                         f"float attribute does; got {value}")
    return value


def _check_options(o: dict, lead: tuple[int, ...], num_experts: int, k: int) -> _Options:
    """Validate every routing option against the input; return them normalised."""
    E = num_experts
    score, group_select = o["score"], o["group_select"]
    if not isinstance(score, str) or score not in SCORE_FUNCTIONS:
        raise ValueError(f"score must be one of {SCORE_FUNCTIONS} (CANN normType 0 / 1); got {score!r}")
    if not isinstance(group_select, str) or group_select not in GROUP_SELECT_MODES:
        raise ValueError(f"group_select must be one of {GROUP_SELECT_MODES} (CANN groupSelectMode 0 / 1); "
                         f"got {group_select!r}")
    for name in ("renorm", "extras"):
        if not isinstance(o[name], (bool, np.bool_)):
            raise TypeError(f"{name} must be True or False; got {type(o[name]).__name__} {o[name]!r}")
    renorm, extras = bool(o["renorm"]), bool(o["extras"])
    groups = _int_option("num_groups", o["num_groups"])
    kgroups = _int_option("topk_groups", o["topk_groups"])
    scale = _real_option("routed_scaling_factor", o["routed_scaling_factor"])
    eps = _real_option("eps", o["eps"])
    if eps < 0:
        raise ValueError(f"eps must be >= 0 (it guards the division by the sum of the K weights); got {eps}")

    # groups: the rules of CheckAttr, always (at the defaults they hold trivially)
    if groups < 1:
        raise ValueError(f"num_groups must be >= 1 (CANN: group_count > 0, {_TOP_K_TILING}); got {groups}")
    if E % groups:
        raise ValueError(f"num_groups = {groups} does not divide E = {E} (CANN: the expert count must be "
                         f"divisible by group_count, {_TOP_K_TILING}); choose a divisor of {E}")
    if not 1 <= kgroups <= groups:
        raise ValueError(f"topk_groups must satisfy 1 <= topk_groups <= num_groups = {groups} (CANN: "
                         f"1 <= kGroup <= groupCount, {_TOP_K_TILING}); got {kgroups}")
    per_group = E // groups
    if group_select == "top2_sum" and per_group < 2:
        raise ValueError(f"group_select='top2_sum' needs at least 2 experts per group; E / num_groups = "
                         f"{E} / {groups} = {per_group} (CANN: group expert count should be greater "
                         f"than 1 in groupSelectMode 1, {_TOP_K_TILING})")
    if k > kgroups * per_group:
        raise ValueError(f"k = {k} is larger than the {kgroups * per_group} experts in the selected groups "
                         f"(topk_groups * E / num_groups = {kgroups} * {per_group}); CANN: "
                         f"k <= kGroup * E / groupCount ({_TOP_K_TILING})")

    bias = o["bias"]
    if bias is not None:
        try:
            b = np.asarray(bias)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"bias must be an array of shape [E] = [{E}]; cannot make one of "
                             f"{type(bias).__name__} ({exc})") from None
        if b.shape != (E,):
            raise ValueError(f"bias must have shape [E] = ({E},) (CANN: rank 1, its dim equal to the "
                             f"expert count of x, {_TOP_K_TILING} CheckInputShape); got shape {b.shape}")
        if b.dtype.kind != "f":
            raise TypeError(f"bias must be float32 or float16 (or float64, rounded to float32); got {b.dtype}")
        with np.errstate(over="ignore"):
            b = b.astype(np.float32)
        if not np.all(np.isfinite(b)):
            bad = int(np.flatnonzero(~np.isfinite(b))[0])
            raise ValueError(f"bias must be finite; expert {bad} holds {b[bad]} (after the cast to float32)")
        bias = b

    finished = o["finished"]
    if finished is not None:
        f = np.asarray(finished)
        if f.dtype != np.bool_:
            raise TypeError(f"finished must be a bool array (CANN: DT_BOOL); got {f.dtype}; "
                            "e.g. np.asarray(mask, dtype=bool)")
        if f.shape != lead:
            raise ValueError(f"finished must have the logits' leading shape {lead} (one flag per row); "
                             f"got shape {f.shape}")
        finished = f.reshape(-1).copy()

    values = dict(o, bias=bias, finished=finished)
    uses_top_k = any(not _is_default(n, values[n]) for n in _GATING_TOP_K_OPTIONS)
    if uses_top_k:
        if E > CANN_MAX_EXPERTS:
            raise ValueError(f"E = {E} experts: MoeGatingTopK takes at most {CANN_MAX_EXPERTS} "
                             f"(MAX_EXPERT_COUNT, {_TOP_K_TILING})")
        padded = groups * (-(-per_group // CANN_SORT_ALIGN) * CANN_SORT_ALIGN)
        if groups not in (1, E) and kgroups != groups and padded > CANN_MAX_EXPERTS:
            raise ValueError(f"num_groups * ceil32(E / num_groups) = {groups} * "
                             f"{padded // groups} = {padded} > {CANN_MAX_EXPERTS}: each group is padded "
                             f"to a multiple of 32 for Sort32 and the padded row must fit "
                             f"({_TOP_K_TILING}); use fewer, larger groups")
    if (finished is not None or (not renorm and not uses_top_k)) and k > CANN_SOFTMAX_MAX_K:
        raise ValueError(f"k = {k} > {CANN_SOFTMAX_MAX_K}: MoeGatingTopKSoftmax(V2), the operators with "
                         f"finished rows and the un-renormalised softmax top-K, take k <= "
                         f"{CANN_SOFTMAX_MAX_K} (MAX_K, moe/moe_gating_top_k_softmax/op_host/"
                         f"moe_gating_top_k_softmax_tiling_base.cpp; moe_gating_top_k_softmax_v2/README.md)")

    is_default = all(_is_default(n, values[n]) for n in GATING_OPTION_DEFAULTS)
    return _Options(score, bias, groups, kgroups, group_select, renorm, np.float32(scale),
                    np.float32(eps), finished, extras, is_default)


def _is_default(name: str, value) -> bool:
    default = GATING_OPTION_DEFAULTS[name]
    if default is None:
        return value is None
    if isinstance(default, str):
        return isinstance(value, str) and value == default
    if isinstance(default, bool):
        return isinstance(value, (bool, np.bool_)) and bool(value) == default
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        return False
    return float(value) == float(default)


def refuse_kernel_options(options: dict, entry: str = "moe_gating_topk") -> None:
    """What a kernel entry point does with routing options: names must be known; options at their
    defaults are accepted; any other value raises ``NotImplementedError`` naming it (no kernel
    version computes the full semantics yet -- none may silently ignore an option)."""
    unknown = sorted(set(options) - set(GATING_OPTION_DEFAULTS))
    if unknown:
        raise TypeError(f"{entry}() got unknown routing option(s) {', '.join(unknown)}; the options are: "
                        f"{', '.join(GATING_OPTION_DEFAULTS)}")
    used = [f"{n}={_brief(v)}" for n, v in options.items() if not _is_default(n, v)]
    if used:
        raise NotImplementedError(
            f"{entry}: routing option(s) {', '.join(used)} are not supported by any kernel version yet; "
            "the fused kernel for the full gating semantics (sigmoid, bias, groups, renorm, scaling, "
            "finished rows, extra outputs) is pending. The numbers are available from "
            "moe_gating_topk_reference(x, k, ...) with the same options.")


def _brief(value) -> str:
    if isinstance(value, np.ndarray):
        return f"<array {value.dtype} {value.shape}>"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _routed(rows: np.ndarray, k: int, o: _Options, lead: tuple[int, ...]):
    """The full semantics on finite-or-handled float32 rows [N, E] (see the public docstring)."""
    n_rows, E = rows.shape
    f32 = np.float32
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        if o.score == "softmax":
            e = np.exp(rows - rows.max(axis=-1, keepdims=True))
            norm = e * (f32(1.0) / e.sum(axis=-1, keepdims=True, dtype=f32))
        else:
            norm = f32(1.0) / (f32(1.0) + np.exp(-rows))
        norm = norm.astype(f32, copy=False)
        if o.selects_on_logits:
            key = rows
        else:
            key = norm if o.bias is None else norm + o.bias

        allowed = np.ones((n_rows, E), dtype=bool)
        if o.grouped:
            per_group = E // o.num_groups
            g = key.reshape(n_rows, o.num_groups, per_group)
            if o.group_select == "max":
                group_score = g.max(axis=-1)
            else:
                top2 = -np.sort(-g, axis=-1)[..., :2]
                group_score = top2[..., 0] + top2[..., 1]
            kept = np.argsort(-group_score, axis=-1, kind="stable")[:, :o.topk_groups]
            group_mask = np.zeros((n_rows, o.num_groups), dtype=bool)
            np.put_along_axis(group_mask, kept, True, axis=-1)
            allowed = np.repeat(group_mask, per_group, axis=1)
        masked = np.where(allowed, key, f32(-np.inf))
        # primary: inside a kept group; then key descending; then lower index (the merge order)
        index = np.broadcast_to(np.arange(E), rows.shape)
        idx = np.lexsort((index, -masked, ~allowed), axis=-1)[:, :k]

        if o.renorm and o.score == "softmax":
            xs = np.take_along_axis(rows, idx, axis=-1)
            ex = np.exp(xs - xs.max(axis=-1, keepdims=True))
            weights = ex / (ex.sum(axis=-1, keepdims=True, dtype=f32) + o.eps)
        elif o.renorm:
            sel = np.take_along_axis(norm, idx, axis=-1)
            weights = sel / (sel.sum(axis=-1, keepdims=True, dtype=f32) + o.eps)
        else:
            weights = np.take_along_axis(norm, idx, axis=-1)
        weights = (weights * o.scale).astype(f32, copy=False)

    idx = idx.astype(np.int32)
    if o.finished is not None:
        idx[o.finished] = E
        weights[o.finished] = f32(0.0)
    indices, weights = idx.reshape(*lead, k), weights.reshape(*lead, k)
    if not o.extras:
        return indices, weights
    row_idx = (np.arange(k, dtype=np.int64)[None, :] * n_rows + np.arange(n_rows)[:, None]).astype(np.int32)
    counts = np.bincount(idx[idx < E].ravel(), minlength=E).astype(np.int64)
    return GatingOutputs(indices, weights, row_idx.reshape(*lead, k), norm.reshape(*lead, E), counts)


def moe_gating_topk_reference(gate_logits, k, *, nonfinite: str = "raise", score: str = "softmax",
                              bias=None, num_groups: int = 1, topk_groups: int = 1,
                              group_select: str = "max", renorm: bool = True,
                              routed_scaling_factor: float = 1.0, eps: float = 1e-20,
                              finished=None, extras: bool = False):
    """Top-K expert selection with softmax routing weights over the selected K.

    With the routing options at their defaults this is the article's operator (and CANN's
    MoeGatingTopKSoftmaxV2 with renorm = 1), computed by exactly the code it always was. The
    options, each a CANN attribute (table in docs/moe_routing.md), are described under *Routing
    options* below.

    Parameters
    ----------
    gate_logits : array_like, shape [B, S, E] or [N, E]
        Router logits, float32 or float16 (float64 is accepted and rounded to float32). All
        arithmetic is float32.
    k : int
        Experts per token, ``1 <= k <= E``.
    nonfinite : {"raise", "hardware"}
        What to do with NaN / +-Inf logits.

        ``"raise"`` (default): raise ``ValueError`` naming the first bad row (its ``(b, s)`` for
        rank-3 input, ``n`` for rank 2), the bad value and its expert index.

        ``"hardware"``: the behaviour of a branch-free vector kernel, which this reference
        defines as follows (no chip documents its NaN handling; this is the model's choice):

        * NaN is replaced by -inf on entry, as a kernel does with one compare + select over
          the row. So NaN and -inf never beat a finite or +inf logit, and among themselves
          (like any tie) the lower expert index wins;
        * the weights are then plain IEEE-754 float32 arithmetic of
          ``exp(x - max) / sum(exp(x - max))`` over the K selected values, no special cases:
          a selected -inf (or NaN) gets weight exactly 0 when the largest selected logit is
          finite; if the largest selected logit is +inf, or every selected logit is -inf/NaN,
          ``max - max`` is ``inf - inf = NaN`` and every weight of that row is NaN.

    Routing options (float32 arithmetic throughout, in the order of CANN's MoeGatingTopK kernel,
    ``moe/moe_gating_top_k/op_kernel/moe_gating_top_k_generalized.h``)
    -----------------------------------------------------------------------------------------
    score : {"softmax", "sigmoid"}
        CANN ``normType`` 0 / 1. The normalised scores ``norm = softmax(x)`` over all E (the row
        maximum subtracted, then multiplied by ``1 / sum``, as the kernel's ``Muls``) or
        ``sigmoid(x) = 1 / (1 + exp(-x))``. ``extras`` returns them as ``norm_out``.
    bias : None or array [E]
        ``e_score_correction_bias``: the selection key is ``norm + bias``; the weights are taken
        from ``norm`` without it (the kernel gathers from its un-biased buffer). Float, finite.
    num_groups, topk_groups, group_select : int, int, {"max", "top2_sum"}
        CANN ``groupCount``, ``kGroup``, ``groupSelectMode`` 0 / 1. The E experts form
        ``num_groups`` equal groups of consecutive indices; each group is scored by the largest
        key in it, or by the sum of its two largest keys; the ``topk_groups`` best groups are kept
        (equal scores: the lower group index) and the others' experts are excluded from the top-K
        (as ``-inf``; they rank below every expert of a kept group whatever its key).
    renorm : bool
        True: the K weights are divided by their sum plus ``eps`` -- for sigmoid
        ``w = s / (sum s + eps)`` (CANN MoeGatingTopK with normType 1); for softmax the softmax
        over the K selected logits, ``w = e / (sum e + eps)`` with ``e = exp(x - max selected x)``
        (MoeGatingTopKSoftmaxV2 renorm 1; ``sum e >= 1``, so the default eps changes no bit).
        False: the chosen experts' ``norm`` values as they are (softmax: CANN V1, V2 renorm 0,
        MoeGatingTopK normType 0).
    routed_scaling_factor : float
        Multiplies the weights after the division (the kernel's ``Div`` then ``Muls``). Finite.
    eps : float
        Added to the sum in the division; finite, >= 0.
    finished : None or bool array, shape = the input's leading shape ([N] or [B, S])
        Rows marked True get expert index E (the "no expert" index of MoeGatingTopKSoftmax) in
        every slot and weight 0. (CANN overwrites only the indices of such rows and leaves their
        weights as computed; weight 0 here makes a finished row contribute nothing downstream.)
    extras : bool
        True returns a :class:`GatingOutputs` (indices, weights, ``row_idx``, ``norm_out``,
        ``expert_counts``) instead of the ``(indices, weights)`` tuple.

    Selection key: the logits for the default chain (softmax, renorm, no bias, one group: V2's
    ``TopK(x)``); ``norm + bias`` in every other case, as MoeGatingTopK, V1 and V2 renorm 0 do.
    The two orders agree except where float32 rounding makes two probabilities equal. Output slots
    are ordered by the key, descending (equal keys: lower expert index first); with a bias the
    weights need not be non-increasing.

    Limits (each raises ``ValueError`` naming the CANN rule and its source file): ``num_groups``
    divides E, ``1 <= topk_groups <= num_groups``, ``k <= topk_groups * E / num_groups``, at least two
    experts per group for ``top2_sum`` -- always; E <= 2048 and ``num_groups * ceil32(E / num_groups)
    <= 2048`` when a MoeGatingTopK-only option is used (score, bias, groups, scaling, eps);
    ``k <= 1024`` when ``finished`` is given or ``renorm=False`` selects the softmax top-K of
    MoeGatingTopKSoftmax(V2). The default chain keeps no operator limit.

    Returns
    -------
    expert_indices : np.ndarray, int32, shape [..., K]
        Same leading shape as the input. Ordered by weight, descending; equal logits are
        ordered by lower expert index first.
    routing_weights : np.ndarray, float32, shape [..., K]
        Softmax over the K selected logits (max subtracted first); each row sums to 1 up to
        float32 rounding, and is non-increasing along K.
    (or, with ``extras=True``, a :class:`GatingOutputs` holding both and the extra outputs)

    Raises
    ------
    ValueError
        wrong rank, empty dimension, ``k`` out of ``[1, E]``, non-finite logits (default), an
        unknown ``nonfinite`` mode, or a routing option out of its range / a CANN limit broken.
    TypeError
        non-float logits (int, bool, complex, object ...), a non-integer ``k``, or a routing
        option of the wrong type.
    """
    if nonfinite not in NONFINITE_MODES:
        raise ValueError(f"nonfinite must be one of {NONFINITE_MODES}; got {nonfinite!r}")
    x = _check_logits(gate_logits)
    num_experts = x.shape[-1]
    k = _check_k(k, num_experts)
    lead = x.shape[:-1]
    rows = x.reshape(-1, num_experts)
    # every option is checked before any arithmetic: nothing is half-computed on a bad option
    opts = _check_options(dict(score=score, bias=bias, num_groups=num_groups, topk_groups=topk_groups,
                               group_select=group_select, renorm=renorm,
                               routed_scaling_factor=routed_scaling_factor, eps=eps, finished=finished,
                               extras=extras), lead, num_experts, k)

    if nonfinite == "raise":
        _raise_on_nonfinite(rows, x.shape)
    else:
        rows = np.where(np.isnan(rows), np.float32(-np.inf), rows)

    if not opts.is_default:
        return _routed(rows, k, opts, lead)

    idx = _topk_indices(rows, k)
    selected = np.take_along_axis(rows, idx, axis=-1)  # [N, k], descending
    with np.errstate(invalid="ignore", over="ignore"):
        shifted = selected - selected[:, :1]  # the first selected is the row's maximum
        e = np.exp(shifted)
        weights = e / e.sum(axis=-1, keepdims=True, dtype=np.float32)
    return (
        idx.astype(np.int32).reshape(*lead, k),
        weights.astype(np.float32, copy=False).reshape(*lead, k),
    )


def softmax_topk_renormalise_reference(gate_logits, k):
    """The discrete chain's answer: softmax over all E, top-K of the probabilities, renormalise.

    This is what the framework's separate Softmax -> TopK -> (Gather, renormalise) kernels
    compute. Mathematically it equals :func:`moe_gating_topk_reference` (the ``1 / sum_E exp``
    factor cancels); numerically the weights agree to float32 rounding. The *indices* agree too,
    except where rounding makes two different logits' probabilities equal (e.g. both underflow to
    0, or they differ by less than one float32 ulp after ``exp``): then this function, which
    compares probabilities, sends the tie to the lower expert index, while the fused reference
    still sees the logits apart. That is one more reason to select on logits.

    Parameters
    ----------
    gate_logits : array_like, shape [B, S, E] or [N, E], float32 or float16, finite
    k : int, ``1 <= k <= E``

    Returns
    -------
    (expert_indices int32 [..., K], routing_weights float32 [..., K]), as the fused reference.
    """
    x = _check_logits(gate_logits)
    num_experts = x.shape[-1]
    k = _check_k(k, num_experts)
    lead = x.shape[:-1]
    rows = x.reshape(-1, num_experts)
    _raise_on_nonfinite(rows, x.shape, KERNEL_NONFINITE_HINT.replace("The kernels take", "The chain takes"))

    with np.errstate(over="ignore", under="ignore"):
        e = np.exp(rows - rows.max(axis=-1, keepdims=True))
        probs = e / e.sum(axis=-1, keepdims=True, dtype=np.float32)  # [N, E]
    idx = _topk_indices(probs, k)
    top = np.take_along_axis(probs, idx, axis=-1)
    weights = top / top.sum(axis=-1, keepdims=True, dtype=np.float32)
    return (
        idx.astype(np.int32).reshape(*lead, k),
        weights.astype(np.float32, copy=False).reshape(*lead, k),
    )
