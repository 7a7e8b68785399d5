"""The thresholds of the bottleneck verdict and the monitor's advice, one place (docs/monitor.md).

:meth:`npu_lab.sim.Timeline.bottleneck` and :func:`npu_lab.sim.monitor.monitor` read these names;
docs/glossary.md ("the four verdicts") states them in words and tests/test_docs.py checks that both
agree. They are the course's own choices, not vendor figures: msprof reports ratios and leaves the
judgement to the reader (its one published rule is ``memory_bound = mte2_ratio / max(mac_ratio,
vec_ratio)`` > 1, see :data:`MSPROF_MEMORY_BOUND`). Each value below says why it is where it is.
Moving one flips verdicts the notebooks print (tests/test_bottleneck_thresholds.py pins them).
"""

LAUNCH_SHARE = 0.5
"""Launch-bound when the launch overhead is at least this share of the latency: then removing
every instruction of the kernel would not even halve its time, so the launch is what to attack."""

DISPATCH_SHARE = 0.5
"""Launch-bound when serial block dispatch adds at least this share of the time after the
overhead: the same argument as LAUNCH_SHARE for the task scheduler handing out blocks."""

BUSY_PIPE = 0.4
"""A DMA pipe (memory) or a compute pipe (compute) of the busiest core busy at least this share
of the time after the launch is what limits it. 40 % rather than 50 %: a kernel whose busiest
pipe runs 40 % of the time and whose other pipes mostly wait for it gains most from making that
pipe's work smaller; below this, the waits matter more than any one pipe's work."""

HBM_SHARE = 0.6
"""Memory-bound when HBM runs at this share of its peak or more, whatever the pipes say: a
kernel at 60 % of peak bandwidth has little left to gain but from moving fewer bytes (streaming
kernels reach 70-90 % at best on the guide's Add case, docs/cost_model.md §8)."""

TURNS_EACH = 0.6
"""Pipes "take turns" (sync-bound) when none of them is busy this share of the time ..."""

TURNS_TOGETHER = 0.8
"""... but all the pipes of the busiest core added are busy at least this share: the work is
there, it is just serialised — overlap (double buffering) would shorten the run by up to the
smaller stage."""

SMALL_COPIES_HBM_SHARE = 0.1
"""A memory verdict with HBM below this share of its peak is DMA latency, not bandwidth: many
small copies (the evidence says so and the advice is to merge copies)."""

LOW_OVERLAP = 0.5
"""The monitor advises overlapping copies with compute when less than half of the DMA busy time
runs while V (or M) is busy too: at least half of the copies' time is then exposed, which double
buffering (BUFFER_NUM = 2) can hide. The article's monitor uses 80 % (its
``dma_overlap_rate < 80``); the course asks for less because a copy-out tail and a copy-in head
are exposed in any pipeline, which keeps short runs below 80 % however well they overlap."""

IMBALANCE = 1.25
"""The monitor flags load imbalance when the busiest core's block time is at least this multiple
of the mean over the cores that ran blocks: the run then takes a quarter longer than an even
split of the same work would. (Graham's LPT bound, 4/3 − 1/(3m), is of the same size: a schedule
within it is about as good as a greedy one gets.)"""

WAIT_DATA_SHARE = 0.25
"""The monitor says a compute pipe "starves" when it spends at least this share of its core's span
waiting on data (a DMA's completion): a quarter of the run with the compute unit waiting for
copies."""

MSPROF_MEMORY_BOUND = 1.0
"""msprof's ``memory_bound`` = ``mte2_ratio / max(mac_ratio, vec_ratio)``: above 1 the core spends
more cycles moving data in than computing (msprof's ai_core_utilization / ai_vector_core_utilization
field description: 计算结果大于1则表示有Memory瓶颈). Reported, not used by the verdict."""
