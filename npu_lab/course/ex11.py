"""Exercise checks for notebook 11 (the KV cache and decode attention).

Each ``check_<name>(answer)`` returns a :class:`~npu_lab.course.checks.CheckResult` (a ``str``;
print it) saying whether the answer is right, why, and — when it is not — which slip the number
matches (one layer instead of all, query heads instead of KV heads, K without V, ...), computed
from the answer. Every truth comes from the library (the model configurations, the decode tiling),
never typed in; :func:`expected_answers` gives each check's truth.

Kernel exercises for this notebook (the append kernel from a skeleton, the online-softmax update,
placing the FlashDecode combine) are not registered yet: ``kernel_check.register_exercise``
accepts notebook ids 01..09 and 08b only.
"""

from __future__ import annotations

import math

import numpy as np

from ..kernels.decode import flash_decode_splits, largest_chunk
from ..llm import get_model_config, kv_cache_bytes
from ..presets import get_preset
from .checks import BYTES, CheckResult, missing as _missing, parse_whole as _whole, right as _right, wrong as _wrong

__all__ = ["check_kv_bytes_per_token", "check_v1_limit", "check_flash_decode_splits", "expected_answers",
           "KV_TOKEN_CASE", "V1_CASE", "SPLIT_CASE"]

CHIP = "ascend-910b2"
#: 11.1: KV-cache bytes one token adds, every layer, fp16 K and V.
KV_TOKEN_CASE = dict(model="Llama-3-70B", dtype="fp16")
#: 11.2: the most cached positions v1 (whole S2 in the UB, one buffer) holds: head_dim 128, float16
#: K/V, G = 8 query heads per KV head.
V1_CASE = dict(head_dim=128, itemsize=2, group=8)
#: 11.3: S2 pieces per (sequence, KV head) CANN's tiling picks: batch 1, 8 KV heads, 4096 positions,
#: chunks of 512.
SPLIT_CASE = dict(batch=1, kv_heads=8, context=4096, chunk=512)


def expected_answers() -> dict[str, object]:
    """The truth of every check of notebook 11, by check name."""
    return {"check_kv_bytes_per_token": kv_bytes_per_token_truth(), "check_v1_limit": v1_limit_truth(),
            "check_flash_decode_splits": flash_decode_splits_truth()}


def kv_bytes_per_token_truth() -> int:
    return kv_cache_bytes(KV_TOKEN_CASE["model"], 1, 1, KV_TOKEN_CASE["dtype"])


def v1_limit_truth(chip: str = CHIP) -> int:
    c = V1_CASE
    return largest_chunk(get_preset(chip), c["head_dim"], c["itemsize"], c["group"], 1)


def flash_decode_splits_truth(chip: str = CHIP) -> int:
    c = SPLIT_CASE
    return flash_decode_splits(c["batch"], c["kv_heads"], c["context"], get_preset(chip).vector_cores, c["chunk"])


def check_kv_bytes_per_token(answer) -> CheckResult:
    """How many bytes of KV cache does one more token of one Llama-3-70B sequence need (all
    layers, fp16 K and V)? Answer: bytes."""
    if answer is None:
        return _missing("a number of bytes")
    value = _whole(answer, BYTES)
    if value is None:
        return _wrong(f"{answer!r} is not a whole number of bytes.")
    cfg = get_model_config(KV_TOKEN_CASE["model"])
    L, nkv, nq, d = cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.num_attention_heads, cfg.head_dim
    truth = kv_bytes_per_token_truth()
    why = (f"2 (K and V) x {L} layers x {nkv} KV heads x head_dim {d} x 2 B = {truth:,} B "
           f"({truth / 1024:.0f} KiB): at 8K tokens {truth * 8192 / 1e9:.2f} GB per sequence")
    if value == truth:
        return _right(why + ".")
    slips = {truth // L: "that is one layer: every layer keeps its own K and V",
             truth // 2: "that counts K or V, not both",
             truth * nq // nkv: f"that uses the {nq} query heads: with GQA only the {nkv} KV heads are cached",
             truth // 2 // L: "that is one layer's K (or V) only",
             truth * 2: "that is 4 bytes an element: fp16 is 2"}
    for v, hint in slips.items():
        if value == v:
            return _wrong(f"{value:,} B: {hint}. " + "Count: " + why.split(" = ")[0] + ".")
    return _wrong(f"{value:,} B is {value / truth:.3g}x the answer. Count K and V, each layer, each KV head, "
                  "head_dim elements of 2 bytes.")


def check_v1_limit(answer, chip: str = CHIP) -> CheckResult:
    """v1 keeps a sequence's whole S2 in the UB (one buffer). At head_dim 128, float16 K/V and
    G = 8, how many cached positions fit at most (the tiling rounds down to a multiple of 8)?"""
    if answer is None:
        return _missing("a number of positions")
    value = _whole(answer)
    if value is None:
        return _wrong(f"{answer!r} is not a whole number of positions.")
    from ..kernels.decode.tiling import ub_bytes_per_position, ub_fixed_bytes
    hw = get_preset(chip)
    c = V1_CASE
    truth = v1_limit_truth(chip)
    per = ub_bytes_per_position(c["head_dim"], c["itemsize"], c["group"], 1)
    fixed = ub_fixed_bytes(c["head_dim"], c["group"])
    why = (f"({hw.ub_usable_bytes:,} B usable - {fixed:,} B fixed) / {per} B a position = "
           f"{(hw.ub_usable_bytes - fixed) / per:.1f}, down to a multiple of 8: {truth}")
    if value == truth:
        return _right(why + f". A 4K context needs {math.ceil(4096 / truth)} chunks: v2's online softmax.")
    raw = hw.ub_usable_bytes // (2 * c["head_dim"] * c["itemsize"])
    if value == raw or value == raw // 8 * 8:
        return _wrong(f"{value} counts only the K and V rows; each position also needs float32 copies of K and V, "
                      "a product row, its score and a Brcb block — and the UB has fixed buffers too.")
    return _wrong(f"{value} positions: off by {value - truth:+}. Divide the free UB by the bytes one position "
                  "costs (K and V rows, their float32 copies, the product row, score, Brcb block).")


def check_flash_decode_splits(answer, chip: str = CHIP) -> CheckResult:
    """Batch 1 with 8 KV heads on the 910B2: into how many pieces does CANN's tiling split each
    (sequence, KV head)'s S2 (4096 positions, chunks of 512)?"""
    if answer is None:
        return _missing("a number of pieces")
    value = _whole(answer)
    if value is None:
        return _wrong(f"{answer!r} is not a whole number of pieces.")
    c = SPLIT_CASE
    cores = get_preset(chip).vector_cores
    bn = c["batch"] * c["kv_heads"]
    truth = flash_decode_splits_truth(chip)
    why = (f"B·N2 = {bn} < 0.4 x {cores} cores, so S2 is split; {cores} // {bn} = {cores // bn} pieces fill the "
           f"cores, and no piece is shorter than a chunk ({math.ceil(c['context'] / c['chunk'])} chunks): {truth}")
    if value == truth:
        return _right(why + ".")
    if value == 1:
        return _wrong(f"1 means no split; but B·N2 = {bn} is below 0.4 x {cores} = {0.4 * cores:.1f}: most cores "
                      "would idle.")
    if value == cores:
        return _wrong(f"{cores} pieces per (b, n2) would be {cores * bn} tasks on {cores} cores; the pieces fill "
                      "the cores once, not once per head.")
    return _wrong(f"{value} pieces: the tiling takes cores // (B·N2), capped by the number of chunks.")
