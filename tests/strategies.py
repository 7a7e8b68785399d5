"""Shared hypothesis strategies for MoeGatingTopK tests (imported by several test modules).

Gate logits are drawn as (shape, dtype, value distribution, RNG seed) and filled with numpy, so a
300 x 300 case costs no more to draw than a 2 x 2 one and still shrinks (to small shapes, seed 0).

    from tests.strategies import gate_cases
    @given(gate_cases(max_s=64))
    def test_something(case):
        logits, k = case
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from hypothesis import strategies as st

__all__ = ["DISTRIBUTIONS", "FLOAT_DTYPES", "GateCase", "gate_cases", "gate_logits", "shapes"]

FLOAT_DTYPES = (np.float32, np.float16)

#: Value distributions. "ties": values from a set of 1-4 small integers, so most rows have many
#: exactly equal logits. "near_ties": 1.0 plus 0-3 float32 ulps (distinct in float32, equal after
#: a cast to float16). "normal": N(0, scale^2) with scale drawn from 1e-3 .. 30. "wide": uniform in
#: +-1e4, so exp(x - max) underflows to 0 for most experts.
#: "grid": multiples of 1/4 in [-10, 10]: ties, but distinct values are never close.
DISTRIBUTIONS = ("ties", "near_ties", "normal", "wide", "grid")


class GateCase(NamedTuple):
    """One test input: ``logits`` [B, S, E] (or [N, E]) float32/float16, and ``k`` (1 <= k <= E)."""

    logits: np.ndarray
    k: int


@st.composite
def shapes(draw, *, rank: int | None = 3, max_b: int = 4, max_s: int = 300, max_e: int = 300,
           min_e: int = 1) -> tuple[int, ...]:
    """(B, S, E) with 1 <= B <= max_b, 1 <= S <= max_s, min_e <= E <= max_e; or (N, E) for rank 2
    (N <= max_s). ``rank=None`` draws either rank."""
    if rank is None:
        rank = draw(st.sampled_from((3, 2)))
    if rank not in (2, 3):
        raise ValueError(f"rank must be 2, 3 or None; got {rank!r}")
    e = draw(st.integers(min_e, max_e))
    s = draw(st.integers(1, max_s))
    if rank == 2:
        return (s, e)
    return (draw(st.integers(1, max_b)), s, e)


def _fill(rng: np.random.Generator, shape, distribution: str, scale: float, levels: np.ndarray):
    if distribution == "ties":
        return rng.choice(levels, size=shape).astype(np.float32)
    if distribution == "near_ties":
        ulp = np.finfo(np.float32).eps
        return (np.float32(1.0) + rng.integers(0, 4, size=shape) * ulp).astype(np.float32)
    if distribution == "normal":
        return (rng.standard_normal(shape) * scale).astype(np.float32)
    if distribution == "wide":
        return rng.uniform(-1e4, 1e4, size=shape).astype(np.float32)
    if distribution == "grid":
        return (rng.integers(-40, 41, size=shape) / 4).astype(np.float32)
    raise ValueError(f"unknown distribution {distribution!r}; known: {DISTRIBUTIONS}")


@st.composite
def gate_logits(draw, shape=None, *, dtypes=FLOAT_DTYPES, ties: bool | None = None,
                distributions=None, **shape_kwargs) -> np.ndarray:
    """A finite gate-logit array.

    ``shape``: a fixed shape, or None to draw one with :func:`shapes` (``shape_kwargs`` go there).
    ``dtypes``: the dtypes to draw from. ``ties``: True always uses the "ties" distribution
    (many exactly equal logits), False never does, None lets hypothesis choose among all.
    ``distributions``: restrict the choice to these names from :data:`DISTRIBUTIONS`
    (overrides ``ties``).
    """
    if shape is None:
        shape = draw(shapes(**shape_kwargs))
    dtype = draw(st.sampled_from(tuple(dtypes)))
    if distributions is not None:
        unknown = set(distributions) - set(DISTRIBUTIONS)
        if unknown:
            raise ValueError(f"unknown distributions {sorted(unknown)}; known: {DISTRIBUTIONS}")
        distribution = draw(st.sampled_from(tuple(distributions)))
    elif ties is True:
        distribution = "ties"
    elif ties is False:
        distribution = draw(st.sampled_from([d for d in DISTRIBUTIONS if d != "ties"]))
    else:
        distribution = draw(st.sampled_from(DISTRIBUTIONS))
    scale = draw(st.sampled_from((1.0, 1e-3, 30.0)))
    n_levels = draw(st.integers(1, 4))
    levels = np.array(draw(st.lists(st.integers(-3, 3), min_size=n_levels, max_size=n_levels,
                                    unique=True)), dtype=np.float32)
    seed = draw(st.integers(0, 2**32 - 1))
    values = _fill(np.random.default_rng(seed), shape, distribution, scale, levels)
    return values.astype(dtype)


@st.composite
def gate_cases(draw, *, max_k: int = 16, **kwargs) -> GateCase:
    """A :class:`GateCase`: logits from :func:`gate_logits` (same keyword arguments) and
    ``k`` in ``1 .. min(E, max_k)``."""
    logits = draw(gate_logits(**kwargs))
    e = logits.shape[-1]
    k = draw(st.integers(1, min(e, max_k)))
    return GateCase(logits, k)
