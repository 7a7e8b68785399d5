"""Which fields the article fit frees, and the range each fitted value must stay inside.

Chosen before looking at the result (issue 9 §4; this file was committed before the new cost
model's fit was ever run, which the git history shows). A fitted value is only worth reporting
when it is a plausible number for a real chip; a fit that reaches a low error by moving a field
to an implausible value has found what the model misses, not what the chip does.

The four free fields and why:

* ``launch_overhead_us`` — the fixed part of a launch (the part per core started,
  ``launch_per_core_us``, stays at the preset's value). The article's tileS table spans 32 to
  1024 blocks of one launch, so the table's floor pins it.
* ``block_dispatch_us`` — the task scheduler's cost per block: the table's left arm (1024 blocks
  at tileS = 1) pins it.
* ``dma_latency_cycles`` — the time from a copy's issue to its data: every tile waits for its
  input once; v1 has nothing else to do meanwhile.
* ``scalar_ub_access_cycles`` — v1 spends its per-point time in the scalar heap (GetValue /
  SetValue on UB).

The last two both price per-point work; under the old model they traded off along a valley of
equal error. Whether the new model (copies that overlap, a pipelined vector unit) tells them apart
is a question the appendix notebook answers, not an assumption made here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FitRange:
    """The plausible interval [low, high] of one field, in the field's unit, and its source."""

    low: float
    high: float
    source: str

    def __post_init__(self):
        if not 0 < self.low < self.high:
            raise ValueError(f"a fit range needs 0 < low < high, got [{self.low}, {self.high}]")

    def contains(self, value: float) -> bool:
        # a bound hit to within float noise is inside (the optimiser stops on the bound)
        return self.low * (1 - 1e-9) <= value <= self.high * (1 + 1e-9)


#: The fields the ``article`` preset fits, in the order reported.
ARTICLE_FREE = ("launch_overhead_us", "block_dispatch_us", "dma_latency_cycles", "scalar_ub_access_cycles")

#: Plausible ranges: a fitted value outside its range is reported as such (``FitResult.fields``).
FIT_RANGES: dict[str, FitRange] = {
    "launch_overhead_us": FitRange(
        5.0, 40.0,
        "the FIXED part of a launch (sim/launch_cost.py: launch = fixed + launch_per_core_us x cores "
        "started). docs/cost_model_system.md, 'Launch overhead': about 20 us measured for an empty kernel on all 48 vector cores (medium "
        "confidence), of which the 910B2 preset puts 48 x 0.1 us in the part per core and 15.2 us in the "
        "fixed part; the vendor guide (头尾开销优化/设置合适的核数和算子Kernel类型.md) gives the shape, "
        "not the numbers. Range (stated before the fit): a quarter to twice the 20 us figure, 5-40 us. "
        "Read as the fixed part it puts the whole launch on 48 cores at 9.8-44.8 us, about half to a "
        "little over twice the measured 20 us: still the plausible band, so the values stand"),
    "block_dispatch_us": FitRange(
        0.02, 0.5,
        "assumed: the task scheduler is hardware and hands a block to a free core in tens to a few "
        "hundred nanoseconds (the preset assumes 0.1 us); not published"),
    "dma_latency_cycles": FitRange(
        300.0, 2000.0,
        "assumed: 0.17-1.1 us at 1.8 GHz. Measured HBM round trips on GPUs of the same generation are "
        "0.4-0.7 us (microbenchmark papers on V100/A100); a DMA engine adds its set-up on top"),
    "scalar_ub_access_cycles": FitRange(
        2.0, 40.0,
        "assumed: the scalar unit reads UB through its data cache; an L1-class access costs a few to a "
        "few tens of cycles on in-order cores"),
}
