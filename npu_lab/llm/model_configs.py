"""Published configurations of real LLMs, for the KV-cache calculator (issue 18 §3).

Each :class:`ModelConfig` holds the fields of the model's published Hugging Face ``config.json``
(``num_hidden_layers``, ``num_attention_heads``, ``num_key_value_heads``, ``hidden_size``, ...), the
address of that file in ``source`` and the parameter count its publisher states in
``published_params``. :meth:`ModelConfig.param_count` recomputes the count from the fields (the
tests check it against the published figure), so weight bytes never rest on a typed-in total.

MLA (DeepSeek-V3): the cache holds one compressed latent of ``kv_lora_rank`` elements plus one
shared RoPE key of ``qk_rope_head_dim`` elements per token per layer (the DeepSeek-V2/V3 papers'
"cache c_t^KV and k_t^R"), not K and V per head.
"""

from __future__ import annotations

from dataclasses import dataclass

_HF = "https://huggingface.co/{}/blob/main/config.json"


@dataclass(frozen=True)
class ModelConfig:
    """One model's published architecture (field names as in its ``config.json``)."""

    name: str
    hf_repo: str
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    hidden_size: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool = False
    attention_bias: bool = False          # Qwen2 has biases on q, k and v
    num_local_experts: int = 0            # routed experts (0: dense)
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0        # 0: the experts use intermediate_size (Mixtral)
    n_shared_experts: int = 0
    first_k_dense_replace: int = 0        # DeepSeek: the first k layers are dense
    kv_lora_rank: int = 0                 # MLA fields (0: not MLA)
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    published_params: float = 0.0         # the publisher's total, in parameters
    published_params_note: str = ""
    source: str = ""

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def gqa_group(self) -> int:
        """Query heads per KV head (1: MHA; for MLA, the heads share one latent: reported as heads)."""
        return self.num_attention_heads // self.num_key_value_heads

    def kv_elements_per_token_per_layer(self) -> int:
        """Elements cached per token per layer: 2 x kv_heads x head_dim (K and V), or for MLA
        kv_lora_rank + qk_rope_head_dim."""
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.num_key_value_heads * self.head_dim

    # ---- parameter count from the fields ---------------------------------------------------
    def _attention_params(self) -> int:
        h = self.hidden_size
        if self.is_mla:
            heads, qk = self.num_attention_heads, self.qk_nope_head_dim + self.qk_rope_head_dim
            q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * heads * qk   # q_a, norm, q_b
            kv = (h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank     # kv_a, norm
                  + self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim))  # kv_b
            return q + kv + heads * self.v_head_dim * h                                   # o
        q_out, kv_out = self.num_attention_heads * self.head_dim, self.num_key_value_heads * self.head_dim
        params = h * q_out + 2 * h * kv_out + q_out * h
        if self.attention_bias:
            params += q_out + 2 * kv_out
        return params

    def _mlp_params(self, moe: bool, active: bool) -> int:
        h = self.hidden_size
        if not moe:
            return 3 * h * self.intermediate_size                         # gate, up, down
        inter = self.moe_intermediate_size or self.intermediate_size
        routed = self.num_experts_per_tok if active else self.num_local_experts
        router = h * self.num_local_experts + (self.num_local_experts if self.first_k_dense_replace else 0)
        return (routed + self.n_shared_experts) * 3 * h * inter + router  # DeepSeek: + score bias

    def param_count(self, active: bool = False) -> int:
        """Parameters computed from the fields (embeddings, attention, MLP or experts, norms);
        ``active=True``: only the experts one token uses (MoE), as the publishers' "active" figure.
        MTP modules (DeepSeek-V3's extra 14 B) are not counted: they are not used in plain decode."""
        h, layers = self.hidden_size, self.num_hidden_layers
        embed = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        moe = self.num_local_experts > 0
        dense_layers = self.first_k_dense_replace if moe else layers
        per_norms = 2 * h
        total = embed + h  # final norm
        total += dense_layers * (self._attention_params() + self._mlp_params(False, active) + per_norms)
        total += (layers - dense_layers) * (self._attention_params() + self._mlp_params(True, active) + per_norms)
        return int(total)


def _cfg(**kw) -> ModelConfig:
    kw.setdefault("source", _HF.format(kw["hf_repo"]) + " (the values checked against copies of that file in "
                  "public repositories, 2026-12-01)")
    return ModelConfig(**kw)


#: The known models, keyed by name. ``source`` is the published config.json; the values were read
#: from copies of those files found in public repositories (the search of 2026-12-01), e.g. Llama 3
#: 70B and Qwen2-72B config.json dumps and oumi's configs/recipes/llama3_1/README.md.
MODEL_CONFIGS: dict[str, ModelConfig] = {c.name: c for c in [
    _cfg(name="Llama-3-8B", hf_repo="meta-llama/Meta-Llama-3-8B", num_hidden_layers=32, num_attention_heads=32,
         num_key_value_heads=8, hidden_size=4096, head_dim=128, intermediate_size=14336, vocab_size=128256,
         published_params=8.03e9, published_params_note="Meta: 8B (the hub lists 8.03 B parameters)"),
    _cfg(name="Llama-3-70B", hf_repo="meta-llama/Meta-Llama-3-70B", num_hidden_layers=80, num_attention_heads=64,
         num_key_value_heads=8, hidden_size=8192, head_dim=128, intermediate_size=28672, vocab_size=128256,
         published_params=70.6e9, published_params_note="Meta: 70B (the hub lists 70.6 B parameters)"),
    _cfg(name="Qwen2-72B", hf_repo="Qwen/Qwen2-72B", num_hidden_layers=80, num_attention_heads=64,
         num_key_value_heads=8, hidden_size=8192, head_dim=128, intermediate_size=29568, vocab_size=152064,
         attention_bias=True, published_params=72.7e9, published_params_note="Qwen: 72.7 B (model card)"),
    _cfg(name="Mixtral-8x7B", hf_repo="mistralai/Mixtral-8x7B-v0.1", num_hidden_layers=32, num_attention_heads=32,
         num_key_value_heads=8, hidden_size=4096, head_dim=128, intermediate_size=14336, vocab_size=32000,
         num_local_experts=8, num_experts_per_tok=2, published_params=46.7e9,
         published_params_note="Mistral: 46.7 B total, 12.9 B active per token"),
    _cfg(name="DeepSeek-V3", hf_repo="deepseek-ai/DeepSeek-V3", num_hidden_layers=61, num_attention_heads=128,
         num_key_value_heads=128, hidden_size=7168, head_dim=128, intermediate_size=18432, vocab_size=129280,
         num_local_experts=256, num_experts_per_tok=8, moe_intermediate_size=2048, n_shared_experts=1,
         first_k_dense_replace=3, kv_lora_rank=512, q_lora_rank=1536, qk_rope_head_dim=64, qk_nope_head_dim=128,
         v_head_dim=128, published_params=671e9,
         published_params_note="DeepSeek: 671 B main model (+14 B MTP module = 685 B on the hub), 37 B active"),
]}


def get_model_config(model) -> ModelConfig:
    """The :class:`ModelConfig` called ``model`` (a key of :data:`MODEL_CONFIGS`, case-insensitive),
    or ``model`` itself if it already is one. Unknown names raise ``ValueError`` listing the known ones."""
    if isinstance(model, ModelConfig):
        return model
    if not isinstance(model, str):
        raise TypeError(f"model must be a name such as 'Llama-3-70B' or a ModelConfig, got {type(model).__name__}")
    lowered = {k.lower(): v for k, v in MODEL_CONFIGS.items()}
    if model.strip().lower() not in lowered:
        raise ValueError(f"unknown model {model!r}; known models: {', '.join(MODEL_CONFIGS)} "
                         "(or pass a ModelConfig of your own)")
    return lowered[model.strip().lower()]
