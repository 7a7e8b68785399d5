"""Router and layer configurations of three public MoE model families, for the course (issue 20 §5).

The numbers are the models' published configs (Hugging Face ``config.json``):

* **Mixtral-8x7B-like**: E = 8, K = 2, softmax, renormalised over the K; hidden 4096, expert FFN 14336.
* **Qwen1.5-MoE-A2.7B-like**: E = 60, K = 4, softmax, ``norm_topk_prob = false`` (no renorm);
  hidden 2048, expert FFN 1408.
* **DeepSeek-V3-like**: E = 256, K = 8, sigmoid scores, ``e_score_correction_bias`` (selection only),
  8 groups, top-4 groups by the sum of their top-2 scores, renorm, ``routed_scaling_factor`` 2.5;
  hidden 7168, expert FFN 2048.

:func:`route_preset` runs the full-options gating reference on logits. :meth:`RouterPreset.layer_config`
gives the layer the preset's routing options (and, for a biased preset, a seeded bias [E]): a preset
whose options are all at their defaults (Mixtral-like) routes with v4, the others with the grouped
kernel (Qwen-MoE-like: softmax without renorm; DeepSeek-V3-like: grouped sigmoid with bias).
``layer_config(softmax_path=True)`` drops the options: the article's softmax top-K of the same E and
K, which the ladder's versions (v4, the discrete chain) compute.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..moe_gating.reference import _is_default, moe_gating_topk_reference
from ..moe_gating.run import VERSIONS as GATING_VERSIONS
from .layer import MoeLayerConfig, moe_layer_timing

__all__ = ["ROUTER_PRESETS", "RouterPreset", "gating_share_table", "route_preset"]


@dataclass(frozen=True)
class RouterPreset:
    name: str
    num_experts: int
    top_k: int
    hidden_dim: int
    ffn_dim: int
    options: dict = field(default_factory=dict)      # moe_gating_topk_reference's keyword options
    biased: bool = False                             # an e_score_correction_bias is drawn

    @property
    def ladder_semantics(self) -> bool:
        """Every routing option at its default: the article's ladder (v4, discrete) computes it."""
        return not self.biased and all(_is_default(n, v) for n, v in self.options.items())

    def bias(self, seed: int = 0) -> np.ndarray | None:
        """The preset's e_score_correction_bias [E] float32 (seeded, N(0, 0.1²)); None when unbiased."""
        if not self.biased:
            return None
        return (np.random.default_rng(seed).standard_normal(self.num_experts) * 0.1).astype(np.float32)

    def layer_config(self, *, softmax_path: bool = False, bias_seed: int = 0, **kw) -> MoeLayerConfig:
        """The preset's MoeLayerConfig with its routing options (``gating_options``; a biased preset
        gets :meth:`bias` ``(bias_seed)``). ``softmax_path=True``: no options (the article's semantics,
        for the ladder's versions). ``kw``: the other MoeLayerConfig fields."""
        if not isinstance(softmax_path, bool):
            raise TypeError(f"softmax_path must be True or False; got {softmax_path!r}")
        if "gating_options" not in kw and not softmax_path:
            opts = dict(self.options)
            if self.biased:
                opts["bias"] = self.bias(bias_seed)
            kw["gating_options"] = opts
        return MoeLayerConfig(self.num_experts, self.top_k, self.ffn_dim, **kw)


ROUTER_PRESETS = {
    "Mixtral-like": RouterPreset("Mixtral-like", 8, 2, 4096, 14336, {"score": "softmax", "renorm": True}),
    "Qwen-MoE-like": RouterPreset("Qwen-MoE-like", 60, 4, 2048, 1408, {"score": "softmax", "renorm": False}),
    "DeepSeek-V3-like": RouterPreset("DeepSeek-V3-like", 256, 8, 7168, 2048,
                                     {"score": "sigmoid", "num_groups": 8, "topk_groups": 4,
                                      "group_select": "top2_sum", "renorm": True, "routed_scaling_factor": 2.5},
                                     biased=True),
}


def route_preset(name: str, num_tokens: int = 8, seed: int = 0):
    """Random logits [N, E] (seeded) routed by preset ``name`` with the gating reference (extras on).
    Returns (logits, GatingOutputs)."""
    if name not in ROUTER_PRESETS:
        raise ValueError(f"preset must be one of {', '.join(ROUTER_PRESETS)}; got {name!r}")
    if isinstance(num_tokens, bool) or not isinstance(num_tokens, (int, np.integer)) or num_tokens < 1:
        raise ValueError(f"num_tokens must be an int >= 1, got {num_tokens!r}")
    p = ROUTER_PRESETS[name]
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((int(num_tokens), p.num_experts)).astype(np.float32)
    opts = dict(p.options)
    if p.biased:
        opts["bias"] = (rng.standard_normal(p.num_experts) * 0.1).astype(np.float32)
    return logits, moe_gating_topk_reference(logits, p.top_k, extras=True, **opts)


def gating_share_table(tokens=(8, 4096), presets=("Mixtral-like", "Qwen-MoE-like", "DeepSeek-V3-like"),
                       gating_versions=("fused", "discrete"), hw="ascend-910b2"):
    """Gating's share of the layer (timing-only, experts loaded evenly) per preset, token count and
    gating: a DataFrame with the layer's total µs, gating µs and share. ``gating_versions``:
    ``"fused"`` is the preset's own kernel (:meth:`RouterPreset.layer_config`: v4 or grouped); a
    version of the ladder (``"v4"``, ``"discrete"``, ...) times the softmax path of the same E and K
    on a preset with routing options (column ``routing``: "preset" or "softmax path")."""
    import pandas as pd

    rows = []
    for name in presets:
        p = ROUTER_PRESETS[name]
        for n in tokens:
            for v in gating_versions:
                if v == "fused":
                    cfg = p.layer_config()
                elif v in GATING_VERSIONS and not p.ladder_semantics:
                    cfg = p.layer_config(gating_version=v, softmax_path=True)
                else:
                    cfg = p.layer_config(gating_version=v)
                r = moe_layer_timing(int(n), p.hidden_dim, cfg, hw=hw)
                rows.append({"preset": name, "tokens": int(n), "gating": cfg.gating_version,
                             "routing": "preset" if cfg.gating_options or p.ladder_semantics else "softmax path",
                             "layer_us": r.total_us, "gating_us": float(r.stages.loc["gating", "us"]),
                             "gating_share": r.gating_share, "router_us": float(r.stages.loc["router", "us"])})
    return pd.DataFrame(rows)
