"""The second article's section-4 claims (sparse matmul, sparse-attention KV compression), checked
(issue 19 §1). :func:`sparse_kv_claims` gives one row per claim: the article's figure, what the
course's model gives for a stated setup, a verdict (consistent / wrong / unverifiable) and the
reason; :func:`write_sparse_kv_claims` writes ``data/sparse_kv_claims.csv`` (a test keeps it fresh;
regenerate with ``python -m npu_lab.kernels.sparse_kv.claims``).

Setup of the memory rows: Llama-3-70B (80 layers, 8 KV heads, head dim 128, fp16 K/V), the
article's own kernel default ``keep_ratio = 0.3``, and an int32 position kept per token and head
(:func:`~.reference.kv_bytes`). Setup of the accuracy row: :func:`~.synthetic.synthetic_kv`'s
defaults (4 heads, 512 tokens, D = 64, seed 0), 4 sinks, keep_ratio 0.3.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ...data import DATA_DIR
from ...llm import get_model_config, kv_cache_bytes
from ...presets import get_preset
from .reference import INDEX_BYTES, compress_kv
from .synthetic import synthetic_kv

SPARSE_KV_CLAIMS_CSV = DATA_DIR / "sparse_kv_claims.csv"
_COLUMNS = ["claim_id", "section", "claim", "article", "model", "verdict", "reason", "source"]
ARTICLE_KEEP_RATIO = 0.3          # the article's kernel: float keep_ratio = 0.3f
ARTICLE_GB = (22.3, 15.2)
MODEL = "Llama-3-70B"


def _memory_model():
    cfg = get_model_config(MODEL)
    per_token = kv_cache_bytes(MODEL, 1)                         # every layer, K and V, fp16
    pos = cfg.num_hidden_layers * cfg.num_key_value_heads * INDEX_BYTES
    before, after = ARTICLE_GB
    kept_gb = before * ARTICLE_KEEP_RATIO * (1 + pos / per_token)
    ratio_for_after = after / before / (1 + pos / per_token)      # the keep ratio that gives 15.2 GB
    seqs_8k = before * 1e9 / kv_cache_bytes(MODEL, 8192)
    return dict(per_token=per_token, pos=pos, kept_gb=kept_gb, ratio=ratio_for_after, seqs_8k=seqs_8k)


def _accuracy_model():
    d = synthetic_kv()
    out = {}
    for score in ("key_norm", "window"):
        out[score] = compress_kv(d.k, d.v, ARTICLE_KEEP_RATIO, 4, score, queries=d.queries,
                                 eval_queries=d.eval_queries).error
    return out


def sparse_kv_claims(hw="ascend-910b2") -> pd.DataFrame:
    """The section-4 claims table (columns claim_id, section, claim, article, model, verdict,
    reason, source; all strings, so the CSV round-trips). ``hw``: the preset for the UB row."""
    spec = get_preset(hw)
    m = _memory_model()
    a = _accuracy_model()
    before, after = ARTICLE_GB
    head_bytes = 8192 * 128 * 2
    rows = [
        ("sparse_2_4_fp16", "4.1", "the cube supports 2:4 structured sparsity, 1.8x speed-up in FP16", "1.8x at FP16",
         "MmadWithSparse: dst int32, fm and filter int8 only (the template rejects other types); supported on "
         "Atlas A2 / A3, not on the 310P, 310B, 950 or the first Atlas training series (910); the sparse operand is the right "
         "matrix B (filter, L0B), stored densified as K/2 x N with an index matrix loaded by LoadDataWithSparse; "
         "A (fm, L0A) is full-size M x K and is compressed on the fly by that index; its rate row equals dense "
         "int8 Mmad (16 x 16 x 32 per cycle); no speed-up figure is published",
         "wrong", "no FP16 form exists, so no FP16 speed-up; for int8 the vendor's rate table lists the same "
         "per-cycle shape as dense Mmad, so 1.8x is not a vendor figure either (and token-level KV compression "
         "does not use 2:4 at all)",
         "asc-devkit docs/zh/api/SIMD-API/基础API/矩阵计算（ISASI）/Mmad计算/MmadWithSparse.md; "
         "docs/zh/api/附录/Cube指令理论性能汇总.md"),
        ("mem_22_3_to_15_2", "4.2", "sparse KV compression: memory 22.3 GB -> 15.2 GB", "22.3 GB -> 15.2 GB",
         f"with the article's keep_ratio = 0.3 (K, V and an int32 position per kept token and head): "
         f"{before} GB -> {m['kept_gb']:.2f} GB; 15.2 GB needs keep_ratio = {m['ratio']:.3f}",
         "wrong", f"the article's own kernel keeps 30 % of the tokens, so the cache shrinks by about 70 %, not "
         f"31.8 %; and 22.3 GB is {m['seqs_8k']:.2f} Llama-3-70B sequences of 8K (fp16), not a whole batch",
         "npu_lab.kernels.sparse_kv.kv_bytes; npu_lab.llm.kv_cache_bytes('Llama-3-70B', ...)"),
        ("mem_31_8_percent", "4.2", "memory reduced by 31.8 %", "31.8 %",
         f"1 - {after} / {before} = {100 * (1 - after / before):.1f} %", "consistent",
         "the percentage is the two figures' ratio; the figures themselves are the problem (row mem_22_3_to_15_2)",
         "arithmetic"),
        ("accuracy_0_5", "4.2", "accuracy loss < 0.5 % on LongBench", "< 0.5 %",
         f"relative attention-output error at keep_ratio 0.3, 4 sinks, synthetic cache: key norm "
         f"{100 * a['key_norm']:.1f} %, accumulated window attention {100 * a['window']:.1f} %",
         "unverifiable", "a LongBench score needs the model, its weights and the benchmark; the course measures "
         "the attention-output error of one layer instead. On the synthetic cache the article's key-norm score "
         "errs several times more than an attention-based one, because a long key is not an attended one",
         "npu_lab.kernels.sparse_kv.compress_kv, synthetic_kv(seed=0)"),
        ("sparse_mm_85", "4.2", "sparse matmul utilisation 85 %, near peak", "85 %",
         "the article's kernel has no matrix multiply: it scores, selects and copies (vector and MTE pipes)",
         "wrong", "nothing in the shown operator runs on the cube; compression is a sort and a copy, on the "
         "vector and MTE pipes (see the course kernel's timeline and the monitor's verdict)", "npu_lab.kernels.sparse_kv.compress_kv_npu"),
        ("whole_head_in_ub", "4.2", "the kernel loads one head's whole K and V into the UB", "K and V of a head",
         f"at 8K tokens x 128 x fp16 one head's K is {head_bytes // 1024} KB (K + V {2 * head_bytes // 1024} KB) "
         f"against {spec.ub_bytes // 1024} KB of UB on {spec.name}",
         "wrong", "a head does not fit; the course kernel keeps only the scores and the sort in the UB and "
         "gathers the kept rows in tiles", f"preset {spec.name}: ub_bytes"),
    ]
    return pd.DataFrame(rows, columns=_COLUMNS).astype(str)


def write_sparse_kv_claims(path: str | Path | None = None) -> Path:
    """Write :func:`sparse_kv_claims` to ``path`` (default ``data/sparse_kv_claims.csv``)."""
    path = Path(path) if path is not None else SPARSE_KV_CLAIMS_CSV
    sparse_kv_claims().to_csv(path, index=False)
    return path


if __name__ == "__main__":  # pragma: no cover
    print(write_sparse_kv_claims())
