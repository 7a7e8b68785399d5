"""The largest K (experts per token) each MoeGatingTopK version takes, from the modules' own rules.

* ``discrete``: its renormalise kernel keeps a row of K weights inside one 256-byte repeat from a
  32-byte-aligned start (:data:`.discrete.RENORM_MAX_K`);
* ``v3`` / ``v3_fast_exp``: each row's K winners sit in one 256-byte repeat of float32
  (:data:`V3_MAX_K`, the rule :func:`.ub_budget.v3_layout` enforces);
* ``v4``: CANN's perf template keeps 8 pairs per sorted list (:data:`.sorted_topk.MAX_K`);
* ``v1``, ``v2``, ``v2_bad_sync``, ``v2c``: the scalar heap takes any K <= E.

Error messages that advise "another version for this K" compute it here, never type it.
"""

from __future__ import annotations

#: v3 keeps a row's K winners in one 256-byte repeat: 64 float32 lanes
V3_MAX_K = 64


def max_k_of_versions() -> dict[str, int | None]:
    """Version -> the largest K it takes (None: any K <= E), in teaching order."""
    from .discrete import RENORM_MAX_K
    from .sorted_topk import MAX_K as V4_MAX_K

    return {"discrete": RENORM_MAX_K, "v1": None, "v2": None, "v2_bad_sync": None, "v2c": None,
            "v3": V3_MAX_K, "v3_fast_exp": V3_MAX_K, "v4": V4_MAX_K}


def versions_for_k(K: int) -> list[str]:
    """The versions that take ``K`` experts per token (E permitting)."""
    return [v for v, top in max_k_of_versions().items() if top is None or K <= top]


def larger_k_advice(K: int) -> str:
    """'Use v1, v2, ... for K=…' naming exactly the versions whose limit admits ``K``."""
    ok = versions_for_k(K)
    return f"for K={K} use {', '.join(ok)}" if ok else f"no version takes K={K}"
