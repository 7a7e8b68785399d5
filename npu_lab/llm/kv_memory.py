"""The KV-cache memory calculator (issue 18 §3): bytes per token per layer, per sequence, for a
batch, against the weights' bytes.

KV cache = batch x context_len x num_hidden_layers x (2 x num_key_value_heads x head_dim) x bytes per
element (for MLA: kv_lora_rank + qk_rope_head_dim elements instead of 2 x kv_heads x head_dim).
Weights = parameters x bytes per weight. Byte counts are exact integers; GB = 1e9 B, GiB = 2**30 B.
int8/fp8 KV also needs a scale (and offset) per channel: 2 x kv_heads x head_dim values per layer,
independent of the context, so left out here (a few hundred KB for a whole model).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pandas as pd

from .model_configs import ModelConfig, get_model_config

#: Bytes per element of the storage types the calculator knows (int4: weights only in practice).
DTYPE_BYTES: dict[str, Fraction] = {"fp32": Fraction(4), "fp16": Fraction(2), "bf16": Fraction(2),
                                    "fp8": Fraction(1), "int8": Fraction(1), "int4": Fraction(1, 2)}
_ALIASES = {"float32": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16", "float8": "fp8"}


def dtype_bytes(dtype: str) -> Fraction:
    """Bytes per element of ``dtype`` (one of :data:`DTYPE_BYTES`, or float16/bfloat16/half/...)."""
    if not isinstance(dtype, str):
        raise TypeError(f"dtype must be a string such as 'fp16', got {type(dtype).__name__} {dtype!r}")
    key = _ALIASES.get(dtype.strip().lower(), dtype.strip().lower())
    if key not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPE_BYTES)}")
    return DTYPE_BYTES[key]


def _whole(name: str, value, minimum: int = 1, maximum: int = 10**9) -> int:
    """``value`` as an int in [minimum, maximum] (Python or numpy integers only), or an error naming it."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be a whole number >= {minimum}, got {type(value).__name__} {value!r}")
    value = int(value)
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return value


def kv_bytes_per_token_per_layer(model, dtype: str = "fp16") -> int:
    """Bytes one token adds to one layer's cache: K and V of every KV head (or MLA's latent + RoPE
    key). ``model``: a name of :data:`MODEL_CONFIGS` or a :class:`ModelConfig`. Llama-3-8B fp16:
    2 x 8 x 128 x 2 = 4096 B."""
    cfg = get_model_config(model)
    return _exact(cfg.kv_elements_per_token_per_layer() * dtype_bytes(dtype))


def _exact(value: Fraction) -> int:
    # int4 KV of an odd element count would need half bytes: round up to whole bytes
    return int(-(-value.numerator // value.denominator))


def kv_cache_bytes(model, context_len: int, batch: int = 1, dtype: str = "fp16") -> int:
    """Bytes of the KV cache of ``batch`` sequences of ``context_len`` tokens each, every layer.

    ``model``: a name of :data:`MODEL_CONFIGS` (e.g. ``"Llama-3-70B"``) or a :class:`ModelConfig`;
    ``context_len`` >= 1 tokens; ``batch`` >= 1 sequences; ``dtype`` the KV storage type
    (fp16, bf16, int8, fp8, fp32). Returns an int (bytes). Llama-3-8B fp16 at one token:
    2 x 32 layers x 8 kv heads x 128 x 2 B = 131072 B.
    """
    cfg = get_model_config(model)
    context_len, batch = _whole("context_len", context_len), _whole("batch", batch)
    per_token = _exact(cfg.num_hidden_layers * cfg.kv_elements_per_token_per_layer() * dtype_bytes(dtype))
    return per_token * context_len * batch


def weights_bytes(model, dtype: str = "bf16", active: bool = False) -> int:
    """Bytes of the weights: parameters (computed from the config) x bytes per weight in ``dtype``
    (fp32/fp16/bf16/fp8/int8/int4; scales of quantised weights not counted). ``active=True``: only
    the parameters one token uses (MoE)."""
    cfg = get_model_config(model)
    return _exact(cfg.param_count(active=active) * dtype_bytes(dtype))


def kv_memory_table(model, context_len: int = 8192, batch: int = 1,
                    dtypes=("fp16", "bf16", "int8", "fp8"), weights_dtype: str = "bf16") -> pd.DataFrame:
    """One row per KV dtype: bytes per token per layer, per token, per sequence at ``context_len``,
    for ``batch`` sequences (B and GB), the weights in ``weights_dtype`` (GB) and KV / weights.

    Columns: model, dtype, bytes_per_token_per_layer, bytes_per_token, bytes_per_sequence,
    batch_bytes, batch_gb, batch_gib, weights_gb, kv_over_weights. ``model`` may also be a list of
    names (one block of rows per model)."""
    if isinstance(model, (str, ModelConfig)):
        models = [model]
    elif isinstance(model, (list, tuple)):
        models = list(model)
    else:
        raise TypeError(f"model must be a name such as 'Llama-3-70B', a ModelConfig or a list of them, "
                        f"got {type(model).__name__} {model!r}")
    if not models:
        raise ValueError("model must name at least one model")
    if isinstance(dtypes, str) or not isinstance(dtypes, (list, tuple)) or not dtypes:
        raise ValueError(f"dtypes must be a non-empty list such as ['fp16', 'int8'], got {dtypes!r}")
    wdt = dtype_bytes(weights_dtype)  # validates before any row is made
    rows = []
    for m in models:
        cfg = get_model_config(m)
        weights = _exact(cfg.param_count() * wdt)
        for dt in dtypes:
            per_layer = kv_bytes_per_token_per_layer(cfg, dt)
            total = kv_cache_bytes(cfg, context_len, batch, dt)
            rows.append(dict(model=cfg.name, dtype=dt, bytes_per_token_per_layer=per_layer,
                             bytes_per_token=kv_cache_bytes(cfg, 1, 1, dt),
                             bytes_per_sequence=kv_cache_bytes(cfg, context_len, 1, dt),
                             batch_bytes=total, batch_gb=total / 1e9, batch_gib=total / 2**30,
                             weights_gb=weights / 1e9, kv_over_weights=total / weights))
    df = pd.DataFrame(rows)
    df.attrs.update(context_len=context_len, batch=batch, weights_dtype=weights_dtype)
    return df
