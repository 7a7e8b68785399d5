"""Plain-numpy reference for MoeGatingTopK: the numbers every kernel version must reproduce.

This module imports nothing from the simulator or the kernels, so a bug there cannot hide here.

Semantics (README.md, 'How the model works'; the notebook 02_discrete_pipeline), per row of E gate logits:

1. pick the K largest logits; order them by value, descending; equal values go to the **lower**
   expert index (what the hardware's Sort32 does);
2. routing weights = softmax over those K logits only (the row maximum is subtracted first).

Step 2 equals "softmax over all E, take the top K, renormalise" (see
:func:`softmax_topk_renormalise_reference`): the common factor ``1 / sum_E exp`` cancels in the
renormalisation, so a fused kernel may skip E - K of the exponentials.
"""

from __future__ import annotations

import numbers

import numpy as np

__all__ = [
    "NONFINITE_MODES",
    "moe_gating_topk_reference",
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


def moe_gating_topk_reference(gate_logits, k, *, nonfinite: str = "raise"):
    """Top-K expert selection with softmax routing weights over the selected K.

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

    Returns
    -------
    expert_indices : np.ndarray, int32, shape [..., K]
        Same leading shape as the input. Ordered by weight, descending; equal logits are
        ordered by lower expert index first.
    routing_weights : np.ndarray, float32, shape [..., K]
        Softmax over the K selected logits (max subtracted first); each row sums to 1 up to
        float32 rounding, and is non-increasing along K.

    Raises
    ------
    ValueError
        wrong rank, empty dimension, ``k`` out of ``[1, E]``, non-finite logits (default), or an
        unknown ``nonfinite`` mode.
    TypeError
        non-float logits (int, bool, complex, object ...) or a non-integer ``k``.
    """
    if nonfinite not in NONFINITE_MODES:
        raise ValueError(f"nonfinite must be one of {NONFINITE_MODES}; got {nonfinite!r}")
    x = _check_logits(gate_logits)
    num_experts = x.shape[-1]
    k = _check_k(k, num_experts)
    lead = x.shape[:-1]
    rows = x.reshape(-1, num_experts)

    if nonfinite == "raise":
        _raise_on_nonfinite(rows, x.shape)
    else:
        rows = np.where(np.isnan(rows), np.float32(-np.inf), rows)

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
