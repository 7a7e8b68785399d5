"""The second article's section-3 claims (KV-cache incremental decode), checked (issue 18 §4).

:func:`section3_claims` returns one row per quantitative claim of section 3 of
``shared/seeds/003_*.txt``: the article's figure, what this library gives where it can, a verdict
(consistent / wrong / unverifiable / pending) and the reason. Rows a decode kernel must measure say
"to be measured by the decode kernel" rather than a number. :func:`write_section3_claims` writes the
table to ``data/article_kv_claims.csv``; a test keeps that file fresh.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..data import DATA_DIR
from ..lang.select import SCRATCH_RESERVE_BYTES
from ..presets import get_preset
from ..sched.compare import compare_schedules, sample_lengths
from .article_kv import ARTICLE_CONTEXT, article_kv_summary
from .kv_memory import kv_cache_bytes
from .model_configs import get_model_config

SECTION3_CLAIMS_CSV = DATA_DIR / "article_kv_claims.csv"
_COLUMNS = ["claim_id", "section", "claim", "article", "model", "verdict", "reason", "source"]
PENDING = "to be measured by the decode kernel"


def _recompute_saving(context_len: int = ARTICLE_CONTEXT) -> float:
    """Share of the projection and MLP FLOP (2 x active params per token) a KV cache saves in one
    decode step at ``context_len``, against re-running them for every cached position: 1 - 1/L.
    Attention over the context costs the same both ways."""
    return 1 - 1 / context_len


def section3_claims(hw="ascend-910b2") -> pd.DataFrame:
    """The section-3 claims table: columns claim_id, section, claim, article, model, verdict
    (consistent / wrong / unverifiable / pending), reason, source. All cells are strings (so the CSV
    round-trips exactly). ``hw``: the preset whose UB size the UB rows use."""
    spec = get_preset(hw)
    s = article_kv_summary()
    cfg = get_model_config("Llama-3-70B")
    ub_kb = spec.ub_bytes // 1024
    head_bytes = cfg.head_dim * 2
    article_heads = 256 * 1024 // (head_bytes * 2)
    honest_heads = (spec.ub_bytes - SCRATCH_RESERVE_BYTES) // (2 * 2 * head_bytes)   # K and V, two buffers each
    save = _recompute_saving()
    step_write = kv_cache_bytes(cfg, 1)                      # one token of one sequence, every layer
    lengths = sample_lengths(256, "lognormal", seed=0)      # stated: 256 sequences, median 1024, sigma 1
    util = compare_schedules(lengths, spec.vector_cores).set_index("schedule").utilisation
    rows = [
        ("kv_48_7_gb", "3.1", "Llama 3 70B at 8K context: KV cache 48.7 GB", "48.7 GB",
         f"{s['kv_per_seq_gb']:.3f} GB per sequence (fp16/bf16, 8 KV heads); 48.7 GB = {s['batch_for_48_7']:.2f} "
         "sequences", "unverifiable",
         "no batch or dtype is given; no whole batch gives 48.7 GB under any reading (GQA or MHA; fp16, int8, fp32; "
         "GB or GiB): see article_kv_check()", "npu_lab.llm.kv_cache_bytes, MODEL_CONFIGS['Llama-3-70B']"),
        ("kv_1_8x_weights", "3.1", "the KV cache is 1.8x the model weights", "1.8x",
         f"48.7 GB / {s['weights_gb']:.1f} GB bf16 weights = {s['ratio_if_48_7']:.2f}x; 1.8x needs "
         f"{s['batch_for_1_8x']:.1f} sequences at 8K", "wrong",
         "with the 48.7 GB the article states, the cache is about a third of bf16 weights, not 1.8x",
         "npu_lab.llm.weights_bytes (parameters computed from the config)"),
        ("kv_both", "3.1", "48.7 GB and 1.8x together", "48.7 GB = 1.8x weights",
         f"needs {s['bits_per_weight_for_both']:.2f} bits per weight", "wrong",
         "both hold only if the weights take 27.1 GB: about 3 bits a weight, no format the article uses "
         "(its section 7.1 names FP16 compute and INT8 storage)", "npu_lab.llm.article_kv_check"),
        ("ub_capacity", "3.2", "UB_CAPACITY = 256 KB in the operator", "256 KB",
         f"{ub_kb} KB on the {spec.name} preset", "consistent" if ub_kb == 256 else "wrong",
         f"the article's operator runs on the 910B; the {spec.name} preset's UB per vector core is {ub_kb} KB "
         "(256 KB is the 310P3's)", f"preset {spec.name}: ub_bytes"),
        ("heads_per_block", "3.2", "heads per block = min(heads, UB / (head_size x 2 B x 2))",
         f"{article_heads} heads (head_size 128)",
         f"{honest_heads} KV heads with K and V double-buffered in {ub_kb} KB minus the {SCRATCH_RESERVE_BYTES // 1024} KB reserve", "wrong",
         "the formula ignores the double buffers it claims and the query it loads (and MAX_HEADS_PER_BLOCK = 8 "
         "is declared, never used); harmless for Llama 3 70B (8 KV heads fit either way), wrong as a rule", "issue 18 §1; npu_lab.lang.select.SCRATCH_RESERVE_BYTES (8 KB)"),
        ("incremental_write", "3.2", "only the new position of the cache is written, no full copy", "(no figure)",
         f"{step_write / 1024:.0f} KiB per sequence per step (fp16, all 80 layers) against "
         f"{kv_cache_bytes(cfg, ARTICLE_CONTEXT) / 2**30:.1f} GiB for a full copy at 8K", "consistent",
         "an append writes 1/L of the cache; the article's kernel also computes K = query x W_k, which belongs "
         "to the projection before it (issue 18)", "npu_lab.llm.kv_cache_bytes"),
        ("balance_by_length", "3.2", "load balancing: tasks assigned by sequence length", "(no figure)",
         f"the code gives each block ceil(batch / blocks) consecutive sequences, whatever their length: "
         f"{util['contiguous']:.0%} utilisation against LPT's {util['LPT']:.0%} for 256 lognormal lengths "
         f"(median 1024, sigma 1, seed 0) on {spec.vector_cores} cores", "wrong",
         "the listed code does not do what the text says; npu_lab.sched shows what length-aware assignment gains",
         "npu_lab.sched.compare_schedules"),
        ("full_overlap", "3.2", "double buffering: compute and DMA fully overlapped", "100 %",
         "the append copies K and V and computes nothing; overlap is between its loads and stores", "wrong",
         "'fully' contradicts the 92 % of section 3.3; an append kernel has no compute to overlap", "section 3.3"),
        ("perf_table", "3.3", "measured Llama 3 70B comparison on the 910B", "(a table)", "nothing to compare: the table is missing", "unverifiable",
         "the text announces a comparison (实测性能数据) but the table is absent", "section 3.3"),
        ("compute_minus_40", "3.3", "incremental update avoids recomputation: computation -40 %", "-40 %",
         f"-{save * 100:.2f} % of projection/MLP FLOP per step at 8K against re-running the projections and MLP for every cached position",
         "wrong", "against the baseline the text names (recomputation) a KV cache saves 1 - 1/L of the "
         "projections; 40 % matches no stated baseline. The update itself writes K and V, it computes nothing",
         "npu_lab.llm.claims._recompute_saving"),
        ("ub_hit_rate", "3.3", "UB cache hit rate 45 % -> 78 %", "45 % -> 78 %",
         "not a quantity: the UB is a software-managed scratchpad (no tags, no misses); what exists is the L2 "
         "hit share of GM reads (Timeline.l2_hit_bytes / gm_read_bytes) and bytes moved against the minimum: "
         + PENDING, "unverifiable",
         "a 'hit rate' of a buffer the kernel fills itself is always what the kernel wrote; the measurable "
         "analogues come from the decode kernel's timeline", "npu_lab.sim.timeline.Timeline"),
        ("overlap_60_92", "3.3", "compute-DMA overlap 60 % -> 92 %", "60 % -> 92 %", PENDING, "pending",
         "measurable on a timeline (share of DMA busy time during which V or M is busy, per core) once the decode "
         "kernels exist", "npu_lab.sim.timeline.Timeline.events"),
    ]
    df = pd.DataFrame(rows, columns=_COLUMNS)
    return df.astype(str)


def write_section3_claims(path: str | Path | None = None) -> Path:
    """Write :func:`section3_claims` to ``path`` (default ``data/article_kv_claims.csv``) and return
    the path. Regenerate with ``python -m npu_lab.llm.claims``."""
    path = Path(path) if path is not None else SECTION3_CLAIMS_CSV
    section3_claims().to_csv(path, index=False)
    return path


if __name__ == "__main__":  # pragma: no cover
    print(write_section3_claims())
