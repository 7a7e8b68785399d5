"""Token dispatch with capacity, and the combine that inverts it: host-side numpy reference.

After gating, each token n has K (expert, weight) slots. Dispatch lays the slots out expert by expert,
so each expert's FFN reads one contiguous block of rows; combine brings the expert outputs back to
their tokens and sums them with the routing weights. This is what CANN's MoeInitRouting family does
(ops-transformer ``moe/moe_init_routing_v2``: README.md and op_kernel/moe_v2_src_to_dst_with_capacity.h,
moe_v2_expert_token_out.h, moe_v2_gather_out.h), and the names follow it:

* the K slots of token n are the flat positions ``n * K + k`` of ``expert_indices`` (V2 numbers them
  with ``ArithProgression`` over the flattened [N, K] input);
* ``sorted_row_idx`` -- the flat positions sorted by expert, **stably** (equal experts keep position
  order: the key-value sort of V2 breaks ties by the value, the position);
* ``expanded_row_idx[n * K + k]`` -- where that slot's row lands in ``expanded_x``: its rank in the
  sorted order (dropless), or ``expert * capacity + j`` for the j-th token of its expert (drop/pad
  mode, V2's ``dropPadMode`` 1), or -1 when the slot is dropped or has no expert (V2 initialises
  expandedRowIdx to -1 and the gather skips those);
* ``expanded_x`` (:meth:`MoeDispatch.gather`) -- ``x[sorted_row_idx // K]``: [M, H] dropless, or
  [E, capacity, H] in drop/pad mode, the rows past an expert's count left 0 (V2 pads with 0);
* ``expert_tokens_count`` (V2 ``expertTokensCountOrCumsumOut`` with flag 2; the cumulative form is
  :attr:`MoeDispatch.expert_tokens_cumsum`) and ``expert_tokens_before_capacity`` (V2
  ``expertTokensBeforeCapacityOut``: the histogram of the choices before any drop).

Beyond CANN (which drops the slots past the capacity in position order and has no second chance):
``drop_policy="weight"`` keeps each expert's highest-weight slots instead, and a ``ranking`` (each
token's experts in order of preference, e.g. a top-R from the gating reference with R > K) turns on
capacity-aware selection: a dropped slot falls to the token's next-ranked expert that still has room
and is not already one of its experts. The slot of a finished row (expert index E, see
``moe_gating_topk_reference(finished=...)``) goes to no expert: it is neither dispatched nor dropped.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

__all__ = ["DROP_POLICIES", "MAX_EXPERTS", "MoeDispatch", "moe_combine", "moe_dispatch"]

#: The model's bound on E (the per-expert outputs are E long; CANN's gating stops at 2048 experts).
MAX_EXPERTS = 65536

#: ``drop_policy`` values: which slots an over-full expert keeps.
#: "position" -- the first ``capacity`` in position order n * K + k (CANN MoeInitRoutingV2);
#: "weight" -- the ``capacity`` largest weights (equal weights: the earlier position).
DROP_POLICIES = ("position", "weight")


@dataclass(frozen=True)
class MoeDispatch:
    """The result of :func:`moe_dispatch`. N tokens, K slots each, E experts, M dispatched slots.

    expert_indices : int32 [N, K] -- the expert each slot is sent to after capacity and rerouting;
        E where it goes to none (dropped, or a finished row).
    weights : float32 [N, K] -- its routing weight (a rerouted slot takes the ranking's weight of its
        new expert); 0 where the slot goes to no expert.
    sorted_row_idx : int32 [M] -- flat slot positions n * K + k, sorted by expert (stable).
    sorted_expert_idx : int32 [M] -- the expert of each, non-decreasing (CANN expandedExpertIdx).
    expanded_row_idx : int32 [N * K] -- the slot's row in ``expanded_x`` (see the module doc), -1 if none.
    expert_tokens_count : int64 [E] -- slots each expert receives.
    expert_tokens_before_capacity : int64 [E] -- slots that chose each expert, before any drop.
    dropped : bool [N, K] -- slots that had an expert and were not dispatched.
    rerouted : bool [N, K] -- slots dispatched to a later choice of their token.
    capacity : int or None -- slots per expert (None: dropless).
    """

    num_experts: int
    top_k: int
    capacity: int | None
    expert_indices: np.ndarray
    weights: np.ndarray
    sorted_row_idx: np.ndarray
    sorted_expert_idx: np.ndarray
    expanded_row_idx: np.ndarray
    expert_tokens_count: np.ndarray
    expert_tokens_before_capacity: np.ndarray
    dropped: np.ndarray
    rerouted: np.ndarray

    @property
    def num_tokens(self) -> int:
        return int(self.expert_indices.shape[0])

    @property
    def tokens_dropped(self) -> int:
        """Slots dropped (a token dropped from two experts counts twice)."""
        return int(self.dropped.sum())

    @property
    def tokens_rerouted(self) -> int:
        """Slots sent to a later choice because their first expert was full."""
        return int(self.rerouted.sum())

    @property
    def expert_tokens_cumsum(self) -> np.ndarray:
        """int64 [E]: cumulative counts (V2's expertTokensCountOrCumsumFlag = 1): expert e's rows in a
        dropless ``expanded_x`` end at ``cumsum[e]``."""
        return np.cumsum(self.expert_tokens_count)

    @property
    def expert_token_lists(self) -> list[np.ndarray]:
        """Each expert's token indices n (int64), in dispatch order."""
        tokens = self.sorted_row_idx.astype(np.int64) // self.top_k
        ends = self.expert_tokens_cumsum
        return [tokens[end - count:end] for count, end in zip(self.expert_tokens_count, ends)]

    @property
    def expanded_shape_rows(self) -> tuple[int, ...]:
        """Leading shape of ``expanded_x``: (M,) dropless, (E, capacity) in drop/pad mode."""
        if self.capacity is None:
            return (int(self.sorted_row_idx.size),)
        return (self.num_experts, self.capacity)

    def gather(self, x) -> np.ndarray:
        """``expanded_x`` from the tokens ``x`` [N, H]: [M, H] dropless, [E, capacity, H] zero-padded."""
        x = _check_tokens(x, self.num_tokens)
        h = x.shape[1]
        src = x[self.sorted_row_idx.astype(np.int64) // self.top_k]
        if self.capacity is None:
            return src
        out = np.zeros((self.num_experts * self.capacity, h), dtype=x.dtype)
        dest = self.expanded_row_idx[self.sorted_row_idx]
        out[dest] = src
        return out.reshape(self.num_experts, self.capacity, h)


def _check_tokens(x, n_tokens: int) -> np.ndarray:
    try:
        x = np.asarray(x)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"x must be an array [N, H] of floats; cannot make one ({exc})") from None
    if x.ndim != 2 or x.shape[0] != n_tokens:
        raise ValueError(f"x must have shape [N, H] with N = {n_tokens} tokens (the dispatch's); "
                         f"got shape {x.shape}")
    if x.dtype.kind != "f":
        raise TypeError(f"x must be a float array; got {x.dtype}")
    return x


def _int_arg(name: str, value, low: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int; got {type(value).__name__} {value!r}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}; got {value}")
    return int(value)


def _check_index_array(name: str, a, num_experts: int) -> np.ndarray:
    try:
        a = np.asarray(a)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{name} must be an int array [N, K]; cannot make one ({exc})") from None
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array (int32, as the gating returns); got {a.dtype}")
    if a.ndim != 2 or 0 in a.shape:
        raise ValueError(f"{name} must have shape [N, K] with N, K >= 1 (reshape [B, S, K] to [B*S, K]); "
                         f"got shape {a.shape}")
    bad = (a < 0) | (a > num_experts)
    if bad.any():
        n, k = (int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{name}[{n}, {k}] = {a[n, k]} is not an expert: indices must be in [0, E) with "
                         f"E = num_experts = {num_experts}, or E itself for 'no expert' (a finished row); "
                         "pass the num_experts the gating ran with")
    return a.astype(np.int64)


def _check_weight_array(name: str, w, shape: tuple[int, ...]) -> np.ndarray:
    try:
        w = np.asarray(w)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{name} must be a float array {shape}; cannot make one ({exc})") from None
    if w.shape != shape:
        raise ValueError(f"{name} must have the shape of its indices {shape}; got {w.shape}")
    if w.dtype.kind != "f":
        raise TypeError(f"{name} must be a float array; got {w.dtype}")
    bad = ~np.isfinite(w)
    if bad.any():
        n, k = (int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{name} must be finite; {name}[{n}, {k}] = {w[n, k]}")
    return w.astype(np.float32)


def _capacity(capacity, capacity_factor, n_slots: int, num_experts: int) -> int | None:
    if capacity is not None and capacity_factor is not None:
        raise ValueError("give capacity or capacity_factor, not both (capacity = ceil(capacity_factor * "
                         "N * K / E) when only the factor is given)")
    if capacity is not None:
        capacity = _int_arg("capacity", capacity, 0)
        if capacity > n_slots:
            raise ValueError(f"capacity = {capacity} is more than the N * K = {n_slots} slots there are: no "
                             f"expert can receive more (CANN asks numRows > expertCapacity); use at most "
                             f"{n_slots}, or no capacity for dropless dispatch")
        return capacity
    if capacity_factor is None:
        return None
    if isinstance(capacity_factor, (bool, np.bool_)) or not isinstance(capacity_factor, numbers.Real):
        raise TypeError(f"capacity_factor must be a real number; got {type(capacity_factor).__name__}")
    factor = float(capacity_factor)
    if not math.isfinite(factor) or factor <= 0:
        raise ValueError(f"capacity_factor must be a finite number > 0 (1.0: room for an even share "
                         f"N * K / E per expert); got {capacity_factor}")
    return min(n_slots, math.ceil(factor * n_slots / num_experts))   # more could never fill


def moe_dispatch(expert_indices, weights, *, num_experts: int, capacity: int | None = None,
                 capacity_factor: float | None = None, drop_policy: str = "position",
                 ranking=None, ranking_weights=None) -> MoeDispatch:
    """Sort the (token, slot) pairs by expert, apply the capacity, optionally reroute what overflows.

    Parameters
    ----------
    expert_indices : int array [N, K]
        Each token's K experts, in ``[0, E)``; E means "no expert" (a finished row).
    weights : float array [N, K]
        Their routing weights, finite.
    num_experts : int
        E (CANN ``expertNum``).
    capacity, capacity_factor : int >= 0 / float > 0, at most one of them
        Slots per expert (CANN ``expertCapacity``, drop/pad mode); from the factor it is
        ``ceil(capacity_factor * N * K / E)``, at most N * K. Neither: dropless. Capacity 0 (every
        slot dropped) is allowed here; CANN's drop/pad mode asks expertCapacity >= 1.
    drop_policy : {"position", "weight"}
        Which slots an over-full expert keeps (:data:`DROP_POLICIES`).
    ranking, ranking_weights : int / float arrays [N, R], or None
        Capacity-aware selection (needs a capacity): every token's experts in order of preference
        with their weights (e.g. ``moe_gating_topk_reference(x, R)``). After the first pass, each
        dropped slot, in position order, goes to the token's best-ranked expert that has room and is
        not already one of its experts, with that expert's ranking weight; if none has room it stays
        dropped. Entries equal to E are skipped.

    Returns
    -------
    MoeDispatch
        The permutation, its inverse, the counts, and what was dropped and rerouted; ``.gather(x)``
        builds ``expanded_x`` and :func:`moe_combine` inverts the layout.
    """
    E = _int_arg("num_experts", num_experts, 1)
    if E > MAX_EXPERTS:
        raise ValueError(f"num_experts = {E} is more than the {MAX_EXPERTS} experts this model dispatches "
                         "(CANN's gating operators stop at 2048)")
    idx = _check_index_array("expert_indices", expert_indices, E)
    n_tokens, top_k = idx.shape
    w = _check_weight_array("weights", weights, idx.shape)
    cap = _capacity(capacity, capacity_factor, n_tokens * top_k, E)
    if not isinstance(drop_policy, str) or drop_policy not in DROP_POLICIES:
        raise ValueError(f"drop_policy must be one of {DROP_POLICIES}; got {drop_policy!r}")
    if (ranking is None) != (ranking_weights is None):
        raise ValueError("ranking and ranking_weights go together: the experts in order of preference "
                         "and the weight each would get")
    if ranking is not None:
        if cap is None:
            raise ValueError("a ranking reroutes what a full expert drops: give capacity or capacity_factor")
        rank = _check_index_array("ranking", ranking, E)
        if rank.shape[0] != n_tokens:
            raise ValueError(f"ranking must have one row per token: shape [N, R] with N = {n_tokens}; "
                             f"got {rank.shape}")
        rank_w = _check_weight_array("ranking_weights", ranking_weights, rank.shape)

    flat = idx.reshape(-1)
    has_expert = flat < E
    before = np.bincount(flat[has_expert], minlength=E).astype(np.int64)
    # stable sort of the positions by expert: CANN's key-value sort (value = position)
    order = np.argsort(flat, kind="stable")
    order = order[has_expert[order]]

    kept = has_expert.copy()
    if cap is not None:
        kept[:] = False
        sorted_experts = flat[order]
        starts = np.searchsorted(sorted_experts, np.arange(E))
        ends = np.searchsorted(sorted_experts, np.arange(E), side="right")
        w_flat = w.reshape(-1)
        for e in np.flatnonzero(ends > starts):
            members = order[starts[e]:ends[e]]           # position order
            if drop_policy == "weight" and members.size > cap:
                members = members[np.argsort(-w_flat[members], kind="stable")]
            kept[members[:cap]] = True

    final = np.where(kept, flat, E)
    final_w = np.where(kept, w.reshape(-1), np.float32(0.0)).astype(np.float32)
    dropped = has_expert & ~kept
    rerouted = np.zeros_like(dropped)
    if ranking is not None:
        load = np.bincount(final[final < E], minlength=E)
        for pos in np.flatnonzero(dropped):
            n = pos // top_k
            mine = set(final[n * top_k:(n + 1) * top_k].tolist())
            for r, choice in enumerate(rank[n].tolist()):
                if choice < E and choice not in mine and load[choice] < cap:
                    final[pos], final_w[pos] = choice, rank_w[n, r]
                    load[choice] += 1
                    dropped[pos], rerouted[pos] = False, True
                    break

    go = final < E
    order = np.argsort(final, kind="stable")
    order = order[go[order]]
    sorted_experts = final[order]
    counts = np.bincount(sorted_experts, minlength=E).astype(np.int64)
    expanded = np.full(n_tokens * top_k, -1, dtype=np.int64)
    if cap is None:
        expanded[order] = np.arange(order.size)
    else:
        first = np.concatenate(([0], np.cumsum(counts)[:-1]))
        rank_in_expert = np.arange(order.size) - first[sorted_experts]
        expanded[order] = sorted_experts * cap + rank_in_expert
    return MoeDispatch(
        num_experts=E, top_k=top_k, capacity=cap,
        expert_indices=final.reshape(n_tokens, top_k).astype(np.int32),
        weights=final_w.reshape(n_tokens, top_k),
        sorted_row_idx=order.astype(np.int32), sorted_expert_idx=sorted_experts.astype(np.int32),
        expanded_row_idx=expanded.astype(np.int32), expert_tokens_count=counts,
        expert_tokens_before_capacity=before, dropped=dropped.reshape(n_tokens, top_k),
        rerouted=rerouted.reshape(n_tokens, top_k))


def moe_combine(expert_outputs, dispatch: MoeDispatch) -> np.ndarray:
    """Invert the dispatch: ``out[n] = sum_k weights[n, k] * expert_outputs[expanded_row_idx[n*K + k]]``.

    ``expert_outputs``: the experts' results in the layout of ``dispatch.gather(x)`` -- [M, H']
    dropless, [E, capacity, H'] in drop/pad mode (H' may differ from H). Slots with no row (dropped,
    finished) contribute nothing; a token all of whose slots were dropped gets zeros. Returns float32
    [N, H'], the K terms added in slot order k = 0, 1, ...

    CANN's MoeFinalizeRouting(V2) computes the same sum (plus residual inputs and a per-expert bias,
    moe/moe_finalize_routing_v2/README.md); its README indexes expandedRowIdx as ``i + k * N``, the
    order of V1's row_idx, where this module uses MoeInitRoutingV2's ``n * K + k``.
    """
    if not isinstance(dispatch, MoeDispatch):
        raise TypeError(f"dispatch must be the MoeDispatch moe_dispatch returned; got {type(dispatch).__name__}")
    try:
        y = np.asarray(expert_outputs)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"expert_outputs must be a float array; cannot make one ({exc})") from None
    lead = dispatch.expanded_shape_rows
    if y.ndim != len(lead) + 1 or y.shape[:-1] != lead:
        layout = "[M, H']" if dispatch.capacity is None else "[E, capacity, H']"
        raise ValueError(f"expert_outputs must have the layout of dispatch.gather(x), {layout} = "
                         f"{lead + ('H',)}; got shape {y.shape}")
    if y.dtype.kind != "f":
        raise TypeError(f"expert_outputs must be a float array; got {y.dtype}")
    rows = y.reshape(-1, y.shape[-1]).astype(np.float32, copy=False)
    n, top_k = dispatch.expert_indices.shape
    dest = dispatch.expanded_row_idx.reshape(n, top_k)
    out = np.zeros((n, rows.shape[1]), dtype=np.float32)
    for k in range(top_k):
        valid = dest[:, k] >= 0
        out[valid] += dispatch.weights[valid, k][:, None] * rows[dest[valid, k]]
    return out
