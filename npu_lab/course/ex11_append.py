"""Kernel exercise 11.append (notebook 11): the KV-cache append kernel from a skeleton.

The learner fills the regions of :func:`append_exercise_solution` (the library's
``kv_append_kernel``, npu_lab/kernels/decode/append.py, without its ``sync`` test hook): the
element count of this head tile (the host's tiling splits a row's heads into tiles of
``heads_per_tile`` that fit the UB twice — two ping-pong slots —, so the last tile may hold
fewer), the GM offsets of this step's K/V row (source: row ``first + r`` of this block) and of
its slot in the cache (destination: the slot id the host computed from the sequence's length,
vLLM's ``slot_mapping``), and the flag order of the two-slot copy-through (MTE3_MTE2 before a slot
is refilled, MTE2_MTE3 between a load and its store, the last two stores drained).

Everything else is given: the slot ids in UB (DataCopyPad, MTE2_S), the buffers, the loops. The
host part is the library's: ids and lengths checked before the launch, a sequence already at
max_len reported (``on_full="report"``) and its row not given to the kernel, the lengths bumped
after it. :func:`check_kernel` compares both caches with ``kv_cache_append_reference`` /
``paged_kv_cache_append_reference`` over contiguous and paged caches, float16 and float32,
head_dim 64 and 128, a head count that ``heads_per_tile`` does not divide, blocks of several rows,
a page-boundary token and a full sequence; a dropped flag is a race the detector names; a wrong
number is explained by where the learner's rows actually went (computed from the caches).
"""

from __future__ import annotations

import numpy as np

from ..kernels.decode import (kv_append_tiling, kv_cache_append, kv_cache_append_reference,
                              paged_kv_cache_append_reference)
from ..kernels.decode.append import KvAppendTiling
from ..kernels.decode.validate import check_append, check_paged_append
from ..lang import DataCopyExtParams, DataCopyPadExtParams, GlobalTensor, TBuf, TPosition, launch, npu_kernel
from ..presets import get_preset
from .kernel_check import KernelExercise, register_exercise, sentinel_array

__all__ = ["append_exercise_solution", "append_host"]


@npu_kernel
def append_exercise_solution(ctx, k_new, v_new, k_cache, v_cache, slot_ids, tiling_bytes: bytes):
    """This block's rows of k_new / v_new [rows, kv_heads, head_dim] into the caches (flat slots of
    [kv_heads, head_dim]) at the slot ids the host computed. MTE2 -> S (the ids), then per row, per
    head tile, K then V through two ping-pong UB slots: MTE2 (load) -> MTE3 (store)."""
    t = KvAppendTiling.unpack(tiling_bytes)
    first = ctx.get_block_idx() * t.rows_per_block
    rows = min(t.rows_per_block, t.rows - first)
    row_elems, tile_elems = t.kv_heads * t.head_dim, t.heads_per_tile * t.head_dim
    ids_buf, kv_buf = TBuf(TPosition.VECCALC), TBuf(TPosition.VECCALC)
    ctx.pipe.init_buffer(ids_buf, t.slot_ids_len * 4, name="slot_ids")
    ctx.pipe.init_buffer(kv_buf, 2 * tile_elems * k_new.dtype.itemsize, name="kv_pingpong")
    ids = ids_buf.get(np.int32)
    slots = [kv_buf.get(k_new.dtype)[i * tile_elems] for i in range(2)]
    ctx.data_copy_pad(ids, slot_ids[first], DataCopyExtParams(1, rows * 4, 0, 0, 0),
                      DataCopyPadExtParams(False, 0, 0, 0))
    ev_ids = ctx.pipe.fetch_event_id("MTE2_S")
    ctx.set_flag("MTE2_S", ev_ids)                  # the slot ids are in UB: S may read them
    ctx.wait_flag("MTE2_S", ev_ids)
    ev_loaded = [ctx.pipe.alloc_event_id("MTE2_MTE3") for _ in range(2)]
    ev_stored = [ctx.pipe.alloc_event_id("MTE3_MTE2") for _ in range(2)]
    j = 0                                           # tiles copied so far: tile j goes through slots[j % 2]
    for r in range(rows):
        slot = ids.get_value(r)                     # this row's slot in the cache
        for h0 in range(0, t.kv_heads, t.heads_per_tile):
            # YOUR CODE (11.append): nbytes = the bytes of this tile of heads h0, h0 + 1, ... (at most
            # t.heads_per_tile heads of t.head_dim elements; the last tile of a row may hold fewer).
            ### BEGIN SOLUTION [11.append]
            nbytes = min(t.heads_per_tile, t.kv_heads - h0) * t.head_dim * k_new.dtype.itemsize
            ### END SOLUTION [11.append]
            for src, dst in ((k_new, k_cache), (v_new, v_cache)):
                buf = slots[j % 2]
                # YOUR CODE (11.append): (1) from the third tile on, wait until the store of tile j - 2
                # has left this slot (MTE3_MTE2, ev_stored[j % 2]); (2) load the tile: row first + r of
                # src, from head h0 (ctx.data_copy_pad, DataCopyExtParams(1, nbytes, 0, 0, 0) and
                # DataCopyPadExtParams(False, 0, 0, 0)); (3) MTE2_MTE3 (ev_loaded[j % 2]): the store
                # waits for the load; (4) store it at its slot of dst, from head h0; (5) set MTE3_MTE2.
                ### BEGIN SOLUTION [11.append]
                if j >= 2:
                    ctx.wait_flag("MTE3_MTE2", ev_stored[j % 2])
                ctx.data_copy_pad(buf, src[(first + r) * row_elems + h0 * t.head_dim],
                                  DataCopyExtParams(1, nbytes, 0, 0, 0), DataCopyPadExtParams(False, 0, 0, 0))
                ctx.set_flag("MTE2_MTE3", ev_loaded[j % 2])
                ctx.wait_flag("MTE2_MTE3", ev_loaded[j % 2])
                ctx.data_copy_pad(dst[slot * row_elems + h0 * t.head_dim], buf, DataCopyExtParams(1, nbytes, 0, 0, 0))
                ctx.set_flag("MTE3_MTE2", ev_stored[j % 2])
                ### END SOLUTION [11.append]
                j += 1
    # YOUR CODE (11.append): every set_flag needs its wait: wait for the last two stores' MTE3_MTE2.
    ### BEGIN SOLUTION [11.append]
    for k in range(max(0, j - 2), j):
        ctx.wait_flag("MTE3_MTE2", ev_stored[k % 2])
    ### END SOLUTION [11.append]
    for e in ev_loaded:
        ctx.pipe.release_event_id("MTE2_MTE3", e)
    for e in ev_stored:
        ctx.pipe.release_event_id("MTE3_MTE2", e)


# ---- host, cases, reference -----------------------------------------------------------------------
_IMPORTS = ("import numpy as np\nfrom npu_lab import npu_kernel\n"
            "from npu_lab.lang import DataCopyExtParams, DataCopyPadExtParams, TBuf, TPosition\n"
            "from npu_lab.kernels.decode.append import KvAppendTiling")


def _case(layout, H, D, dtype, lens, ids, *, max_len=0, page_size=0, table=None, num_pages=0, hpt=None,
          block_dim=None, label=""):
    return dict(layout=layout, H=H, D=D, dtype=dtype, lens=tuple(int(x) for x in lens), ids=tuple(int(x) for x in ids),
                max_len=max_len, page_size=page_size, table=None if table is None else tuple(map(tuple, table)),
                num_pages=num_pages, hpt=hpt, block_dim=block_dim,
                label=f"{layout}, kv_heads={H}, head_dim={D}, {dtype}, lengths {list(lens)}, rows for sequences "
                      f"{list(ids)}" + (f", {hpt} heads a tile" if hpt else "")
                      + (f", {block_dim} block(s)" if block_dim else "") + (f": {label}" if label else ""))


def _cases(rng) -> list[dict]:
    """Contiguous: one row a block, a tail head tile (8 heads in tiles of 3) with two rows a block,
    a full sequence (reported, not written); paged: a token that starts a fresh page (the block
    table's next page) and one inside a page, float32 at head_dim 64; then two random shapes."""
    out = [_case("contiguous", 2, 128, "float16", (3, 0, 7), (0, 1, 2), max_len=16, label="one row a block"),
           _case("contiguous", 8, 64, "float16", (5, 9, 1, 0, 2), (4, 0, 2, 1, 3), max_len=12, hpt=3, block_dim=2,
                 label="a tail head tile, rows 3 to a block"),
           _case("contiguous", 4, 128, "float16", (6, 8, 2), (0, 1, 2), max_len=8, hpt=2, block_dim=2,
                 label="sequence 1 is full: the host reports it and does not give the kernel its row"),
           _case("paged", 2, 64, "float32", (16, 5, 31), (0, 1, 2), page_size=16, num_pages=7,
                 table=((4, 1, -1), (6, -1, -1), (0, 2, -1)), hpt=1, block_dim=2,
                 label="paged: sequence 0's token starts its second page (page 1), sequence 2's ends page 2")]
    for _ in range(2):
        S = int(rng.integers(1, 7))
        H, D = int(rng.integers(1, 9)), int(rng.choice([64, 128]))
        max_len = int(rng.integers(2, 20))
        lens = rng.integers(0, max_len, S)
        rows = rng.permutation(S)[:int(rng.integers(1, S + 1))]
        out.append(_case("contiguous", H, D, str(rng.choice(["float16", "float32"])), lens, rows, max_len=max_len,
                         hpt=int(rng.integers(1, H + 1)), block_dim=int(rng.integers(1, 4)), label="random"))
    return out


def _inputs(case):
    """(k_new, v_new [rows, H, D], k_cache, v_cache, block_table or None): the caches hold earlier
    tokens (random) and NaN in every slot this step writes, so a slot left unwritten shows."""
    rng = np.random.default_rng([case["H"], case["D"], len(case["lens"]), *case["lens"], *case["ids"]])
    dt = np.dtype(case["dtype"])
    H, D, n = case["H"], case["D"], len(case["ids"])
    k_new = rng.standard_normal((n, H, D)).astype(dt)
    v_new = rng.standard_normal((n, H, D)).astype(dt)
    if case["layout"] == "paged":
        shape, table = (case["num_pages"], case["page_size"], H, D), np.array(case["table"])
    else:
        shape, table = (len(case["lens"]), case["max_len"], H, D), None
    k_cache = rng.standard_normal(shape).astype(dt)
    v_cache = rng.standard_normal(shape).astype(dt)
    flat_k, flat_v = k_cache.reshape(-1, H, D), v_cache.reshape(-1, H, D)
    slots, _, _ = append_host(case, k_new, v_new, k_cache, v_cache, table)
    flat_k[slots] = np.nan
    flat_v[slots] = np.nan
    return k_new, v_new, k_cache, v_cache, table


def append_host(case, k_new, v_new, k_cache, v_cache, table=None):
    """The library's host part of the append (npu_lab/kernels/decode/append.py): checks, full
    sequences reported, each remaining row's slot id. Returns (slots [int64], rows given to the
    kernel, full sequence ids)."""
    lens = np.array(case["lens"])
    if table is None:
        ids, lens, full = check_append(k_new, v_new, k_cache, v_cache, list(case["ids"]), lens, on_full="report")
        max_len = k_cache.shape[1]
        rows = np.array([i for i, s in enumerate(ids) if lens[s] < max_len], np.int64)
        slots = ids[rows] * max_len + lens[ids[rows]]
    else:
        ids, lens, table, full = check_paged_append(k_new, v_new, k_cache, v_cache, list(case["ids"]), lens, table,
                                                    on_full="report")
        page = k_cache.shape[1]
        rows = np.array([i for i, s in enumerate(ids) if lens[s] < table.shape[1] * page], np.int64)
        pos = lens[ids[rows]]
        slots = table[ids[rows], pos // page] * page + pos % page
    return np.asarray(slots, np.int64), rows, full


def _tiling(case, hw, n_rows):
    return kv_append_tiling(n_rows, case["H"], case["D"], np.dtype(case["dtype"]).itemsize, hw, case["hpt"],
                            case["block_dim"])


def _launch(fn, case, hw, timing_only):
    hw = get_preset(hw) if isinstance(hw, str) else hw
    k_new, v_new, k_cache, v_cache, table = _inputs(case)
    slots, rows, _full = append_host(case, k_new, v_new, k_cache, v_cache, table)
    t = _tiling(case, hw, len(slots))
    gm = lambda a, name: GlobalTensor.from_array(np.ascontiguousarray(a).ravel(), name, timing_only=timing_only)  # noqa: E731
    before = {"k_cache": k_cache.reshape(-1).copy(), "v_cache": v_cache.reshape(-1).copy()}
    kc, vc = gm(k_cache, "k_cache"), gm(v_cache, "v_cache")
    tl = launch(fn, t.block_dim, gm(k_new[rows], "k_new"), gm(v_new[rows], "v_new"), kc, vc,
                gm(slots.astype(np.int32), "slot_ids"), t.pack(), hw=hw, timing_only=timing_only)
    if timing_only:
        return None, tl
    got = {"k_cache": kc.data.copy(), "v_cache": vc.data.copy()}
    if all(np.array_equal(got[n], before[n], equal_nan=True) for n in got):
        # the caches hold earlier tokens, so "nothing written" is "nothing changed": say so with the
        # sentinel check_kernel knows (its "No answer yet"), not as a table of NaN mismatches
        got = {n: sentinel_array(a.size, a.dtype) for n, a in got.items()}
    return got, tl


def _reference(case) -> dict:
    """The numpy reference over the rows the host gives the kernel (a full sequence's row is reported,
    not written)."""
    k_new, v_new, k_cache, v_cache, table = _inputs(case)
    _, rows, full = append_host(case, k_new, v_new, k_cache, v_cache, table)
    ids = [case["ids"][i] for i in rows]
    if table is None:
        k, v, _ = kv_cache_append_reference(k_new[rows], v_new[rows], k_cache, v_cache, ids, np.array(case["lens"]))
    else:
        k, v, _ = paged_kv_cache_append_reference(k_new[rows], v_new[rows], k_cache, v_cache, ids,
                                                  np.array(case["lens"]), table)
    return {"k_cache": k.reshape(-1), "v_cache": v.reshape(-1)}


def _where(case, slot: int) -> str:
    if case["layout"] == "paged":
        page, row = divmod(slot, case["page_size"])
        return f"page {page} row {row}"
    seq, pos = divmod(slot, case["max_len"])
    return f"sequence {seq} position {pos}"


def _locate(case, name, i) -> str:
    k_new, v_new, k_cache, v_cache, table = _inputs(case)
    slots, rows, _ = append_host(case, k_new, v_new, k_cache, v_cache, table)
    t = _tiling(case, get_preset("ascend-910b2"), len(slots))
    slot, rest = divmod(i, case["H"] * case["D"])
    head, d = divmod(rest, case["D"])
    where = f"slot {slot} ({_where(case, slot)}), head {head}, dim {d}"
    hits = np.flatnonzero(slots == slot)
    if not hits.size:
        return where + ": no row of this step goes here"
    row = int(hits[0])
    return where + (f": kernel row {row} (sequence {case['ids'][rows[row]]}), block {row // t.rows_per_block}, "
                    f"head tile {head // t.heads_per_tile}")


def _diagnose(case, got, want) -> str:
    """Where the learner's rows went, computed from the caches they left: K and V swapped, a head
    tile left unwritten, a row at another slot, another row's data at a slot."""
    k_new, v_new, k_cache, v_cache, table = _inputs(case)
    slots, rows, _ = append_host(case, k_new, v_new, k_cache, v_cache, table)
    H, D = case["H"], case["D"]
    caches = {"K": np.asarray(got["k_cache"]).reshape(-1, H, D), "V": np.asarray(got["v_cache"]).reshape(-1, H, D)}
    new = {"K": k_new[rows], "V": v_new[rows]}
    for i, s in enumerate(slots):
        for name, other in (("K", "V"), ("V", "K")):
            here, mine = caches[name][s], new[name][i]
            if np.array_equal(here, mine):
                continue
            if np.array_equal(here, new[other][i]):
                return (f"Diagnosis: slot {s} ({_where(case, s)}) of the {name} cache holds kernel row {i}'s {other}: "
                        "K goes to k_cache and V to v_cache (src and dst in the same pair).")
            unwritten = np.flatnonzero(np.isnan(here.astype(np.float64)).all(axis=1))
            if unwritten.size and unwritten.size < H:
                return (f"Diagnosis: at slot {s} the {name} heads {unwritten.tolist()} were never written: a row's "
                        f"{H} heads go in tiles of heads_per_tile, and the last tile holds the rest — "
                        "min(heads_per_tile, kv_heads - h0) x head_dim elements, from head h0 (offset h0 * head_dim).")
            elsewhere = [x for x in range(caches[name].shape[0]) if x != s and np.array_equal(caches[name][x], mine)]
            if elsewhere:
                return (f"Diagnosis: kernel row {i}'s {name} went to slot {elsewhere[0]} ({_where(case, elsewhere[0])}), "
                        f"not to slot {s} ({_where(case, s)}): the destination is the slot id the host gave "
                        "(slot * kv_heads * head_dim + h0 * head_dim), not the row index.")
            same = [x for x in range(len(slots)) if x != i and np.array_equal(here, new[name][x])]
            if same:
                return (f"Diagnosis: slot {s} holds kernel row {same[0]}'s {name}, not row {i}'s: the source row of "
                        "this block's r-th row is first + r, first = block index x rows_per_block.")
    return "Compare your GM offsets (source row first + r, destination the row's slot, both from head h0)."


_TIMED = dict(_case("contiguous", 8, 128, "float16", tuple(range(40)), tuple(range(40)), max_len=64),
              label="40 sequences, kv_heads=8, head_dim=128, float16, one row a block")


def _target(hw):
    k_new, v_new, k_cache, v_cache, _ = _inputs(_TIMED)
    run = kv_cache_append(k_new, v_new, k_cache, v_cache, list(_TIMED["ids"]), np.array(_TIMED["lens"]), hw=hw,
                          timing_only=True)
    return run.timeline.total_us, "the library's kv_cache_append at this shape"


register_exercise(KernelExercise(
    id="11.append", notebook="ex11", title="The KV-cache append kernel from a skeleton",
    teaches="the append only copies: each row of this step's K and V goes GM -> UB -> GM at the slot the host "
            "computed from the sequence's length (slot_mapping; contiguous or paged, the kernel is the same); a row's "
            "heads go in tiles that fit the UB twice (two ping-pong slots), the last tile holding the rest; the "
            "two-slot copy-through needs MTE2_MTE3 between a load and its store and MTE3_MTE2 before a slot is "
            "refilled, and the last two stores drained; a full sequence is the host's to report, not the kernel's "
            "to skip",
    solution=append_exercise_solution, cell_name="my_kv_append", imports=_IMPORTS,
    place_after="## The append (after the append's timeline)",
    cases=_cases, launch=_launch, reference=_reference, locate=_locate, target=_target, target_case=_TIMED,
    tolerance=(0.0, 0.0), diagnose=_diagnose,
    slow_hint="compare with the library's timeline: do the two UB slots overlap a load with the previous store?"))
