"""Exercise checks for the notebooks: ``check_<name>(answer)`` returns a message that says what
is right or wrong and gives a hint — never just True/False.

Every expected answer is computed here from the library (the preset, a timing-only run of the
kernel), never typed in, so a check stays true when the model changes. The message is a
:class:`CheckResult`: a ``str`` (print it) with a ``.correct`` attribute (True / False, or None
when no answer was given yet).
"""

from __future__ import annotations

import math

from .checks import checked_keywords
from .checks import (US, CheckResult, missing as _missing, parse_number as _as_number,
                     parse_whole as _whole, right as _right, wrong as _wrong)
from ..presets import get_preset
from ..sim.launch_cost import full_launch_overhead_us

__all__ = ["CheckResult", "check_launch_overhead", "check_copy_bandwidth", "check_busiest_pipe",
           "check_double_buffering_one_tile", "check_largest_tile_len", "expected_answers",
           "ONE_TILE_N", "LAUNCH_CHAIN", "COPY_STREAM_CASE", "LARGEST_TILE_CASE"]

#: The run notebook 01 times: scaled_add on 2**20 float32 elements on the 910B2, defaults.
NOTEBOOK01_N = 1 << 20
NOTEBOOK01_CHIP = "ascend-910b2"
#: Exercise 01.1 (varied from the lesson's single launch on the 910B2): a chain of launches on the 310P3.
LAUNCH_CHAIN = dict(chip="ascend-310p3", launches=3)
#: Exercise 01.2 (varied from the lesson's 910B2 copies): a long stream of copies of this burst on
#: one core of this chip, GM 512-B aligned; the answer is the effective bandwidth in GB/s.
COPY_STREAM_CASE = dict(chip="ascend-310p3", burst_bytes=2048, gm_align_bytes=512, cores=1)
#: Exercise 01.4: scaled-add on this many elements, one tile per core (both buffer counts fit the UB).
ONE_TILE_N = 1 << 18
#: Exercise 01.5 (varied from the 910B2 with two buffers, whose answer the lesson's error prints).
LARGEST_TILE_CASE = dict(chip="ascend-310p3", num_buffers=2)


def expected_answers() -> dict[str, object]:
    """Each check's truth for the case notebook 01 asks about (what the check itself compares to)."""
    return {"check_launch_overhead": launch_overhead_truth(**LAUNCH_CHAIN),
            "check_copy_bandwidth": copy_bandwidth_truth(**COPY_STREAM_CASE),
            "check_busiest_pipe": busiest_pipe_truth(),
            "check_double_buffering_one_tile": "yes" if double_buffering_one_tile_times()[2] else "no",
            "check_largest_tile_len": largest_tile_len_truth(**LARGEST_TILE_CASE)}


@checked_keywords
def launch_overhead_truth(chip: str = "ascend-310p3", launches: int = 3) -> float:
    """µs of launch overhead that ``launches`` kernel launches pay on ``chip``."""
    return launches * full_launch_overhead_us(get_preset(chip))


@checked_keywords
def busiest_pipe_truth(timeline=None) -> str:
    """The pipe with most busy time summed over cores in ``timeline`` (default: notebook 01's run)."""
    return max(_busy_by_pipe(timeline).items(), key=lambda kv: kv[1])[0]


def _busy_by_pipe(timeline=None) -> dict[str, float]:
    if timeline is None:
        from ..kernels.scaled_add import scaled_add

        _, timeline = scaled_add(NOTEBOOK01_N, None, timing_only=True, hw=NOTEBOOK01_CHIP)
    return {p: b for p, b in timeline.busy_us_by_pipe().items() if b > 0}


@checked_keywords
def double_buffering_one_tile_times(n: int = ONE_TILE_N, chip: str = "ascend-910b2"):
    """(1-buffer µs, 2-buffer µs, helps?) of scaled-add on ``n`` elements with one tile per core,
    the tile length the buffers explorer uses for 1 tile per core."""
    from ..kernels.scaled_add import scaled_add
    from .widgets import tile_len_for

    hw = get_preset(chip)
    tile_len = tile_len_for(n, hw, 1)
    single = scaled_add(n, None, timing_only=True, hw=hw, tile_len=tile_len, num_buffers=1)[1].total_us
    double = scaled_add(n, None, timing_only=True, hw=hw, tile_len=tile_len, num_buffers=2)[1].total_us
    return single, double, double < single * (1 - 1e-9)


@checked_keywords
def largest_tile_len_truth(chip: str = "ascend-310p3", num_buffers: int = 2) -> int:
    """The largest scaled-add tile_len (elements) whose 3 queues x ``num_buffers`` fit ``chip``'s UB."""
    from ..kernels.scaled_add import largest_tile_len

    return largest_tile_len(chip, num_buffers)


@checked_keywords
def check_launch_overhead(answer, chip: str = LAUNCH_CHAIN["chip"],
                          launches: int = LAUNCH_CHAIN["launches"]) -> CheckResult:
    """How many µs of launch overhead do ``launches`` kernel launches pay on the ``chip`` preset
    (before any block runs)? Answer: a number of microseconds."""
    if answer is None:
        return _missing("a number of microseconds, e.g. 3.5")
    hw = get_preset(chip)
    one = full_launch_overhead_us(hw)      # fixed part + per core, on all vector cores
    truth = launch_overhead_truth(chip, launches)
    value = _as_number(answer, US)
    kind, note = hw.provenance.get("launch_overhead_us", ("unspecified", ""))
    if value is None:
        return _wrong(f"{answer!r} is not a number of microseconds. Hint: look for the "
                      "launch_overhead_us row of the preset table.")
    if math.isclose(value, truth, rel_tol=0.01):
        return _right(f"{launches} \u00d7 {one:g} \u00b5s = {truth:g} \u00b5s: the {hw.name} preset charges "
                      f"{one:g} \u00b5s per launch on all {hw.vector_cores} vector cores: a fixed "
                      f"{hw.launch_overhead_us:g} \u00b5s (provenance: {kind}, {note}) plus "
                      f"{hw.launch_per_core_us:g} \u00b5s per core started. It is paid once per launch, "
                      "however many blocks run and however little they do, which is why a chain of small "
                      "kernels is launch-bound.")
    if math.isclose(value, truth * 1000, rel_tol=0.01):
        return _wrong(f"{value:g} looks like nanoseconds; the answer is wanted in microseconds.")
    if launches != 1 and math.isclose(value, one, rel_tol=0.01):
        return _wrong(f"{value:g} \u00b5s is what ONE launch costs; every one of the {launches} launches "
                      "pays it.")
    return _wrong(f"{value:g} \u00b5s is not what the preset says. Hint: "
                  f"the `host` bar at the start of the timeline, or get_preset({hw.name!r}): "
                  f"launch_overhead_us plus launch_per_core_us for each of its {hw.vector_cores} vector cores, "
                  "once per launch.")


@checked_keywords
def copy_bandwidth_truth(chip: str = "ascend-310p3", burst_bytes: int = 2048, gm_align_bytes: int = 512,
                         cores: int = 1) -> float:
    """GB/s one core gets from a long stream of ``burst_bytes`` copies (the copy-cost explorer's
    number, from the simulator's cost functions)."""
    from .explorers.copy_cost import copy_cost

    return copy_cost(chip, burst_bytes, gm_align_bytes, cores).effective_gbps


_GBPS = ("gb/s", "gbps", "gb/sec")


@checked_keywords
def check_copy_bandwidth(answer, chip: str = COPY_STREAM_CASE["chip"],
                         burst_bytes: int = COPY_STREAM_CASE["burst_bytes"]) -> CheckResult:
    """A core of ``chip`` streams copies of ``burst_bytes`` each (one block per copy, GM 512-B
    aligned, no other core streaming). What bandwidth does it get, in GB/s? Answer: a number of
    GB/s, within 3 %."""
    if answer is None:
        return _missing("a number of GB/s, e.g. 12.5")
    from .explorers.copy_cost import copy_cost
    from ..sim.costs import burst_efficiency

    hw = get_preset(chip)
    c = copy_cost(hw, burst_bytes, COPY_STREAM_CASE["gm_align_bytes"], COPY_STREAM_CASE["cores"])
    value = _as_number(answer, _GBPS)
    if value is None:
        return _wrong(f"{answer!r} is not a number of GB/s.")
    transfer = c.occupancy_cycles - hw.dma_issue_cycles
    how = (f"A copy holds its DMA engine for {hw.dma_issue_cycles:g} cycles of issue + {burst_bytes} B at "
           f"{c.peak_gbps:.1f} GB/s x {c.efficiency:.0%} burst efficiency (≈ {transfer:.0f} cycles) = "
           f"{c.occupancy_cycles:.0f} cycles; the {c.latency_cycles:.0f}-cycle latency overlaps the next copies "
           f"(about {c.in_flight:.1f} in flight), so a copy leaves every {c.occupancy_cycles:.0f} cycles: "
           f"{burst_bytes} B / {c.occupancy_cycles:.0f} cycles x {hw.clock_ghz:g} GHz = {c.effective_gbps:.1f} GB/s")
    if math.isclose(value, c.effective_gbps, rel_tol=0.03):
        return _right(f"{how}, {c.effective_gbps / c.peak_gbps:.0%} of the core's peak. Small copies are "
                      "bound by issue and bandwidth efficiency, not by the latency: make each copy bigger "
                      f"(full bandwidth from about {hw.dma_burst_full_bytes // 1024} KB).")
    if math.isclose(value, c.effective_gbps * 1000, rel_tol=0.03):
        return _wrong(f"{value:g} looks like MB/s; the answer is wanted in GB/s.")
    waited = burst_bytes / (c.occupancy_cycles + c.latency_cycles) * hw.clock_ghz
    if math.isclose(value, waited, rel_tol=0.05):
        return _wrong(f"{value:g} GB/s is what copies get when each one is waited for (occupancy + latency). "
                      "In a stream the engine keeps several requests in flight: the latency overlaps.")
    if math.isclose(value, c.peak_gbps * burst_efficiency(hw, burst_bytes), rel_tol=0.03):
        return _wrong(f"{value:g} GB/s leaves out the {hw.dma_issue_cycles:g} cycles each copy spends on its "
                      "issue: the pipe holds a copy for issue + transfer.")
    if math.isclose(value, c.peak_gbps, rel_tol=0.03):
        return _wrong(f"{value:g} GB/s is the core's peak: a {burst_bytes}-B burst does not reach it. Hint: "
                      "the burst-efficiency table of the preset (dma_burst_efficiency_*), interpolated in log2(bytes).")
    return _wrong(f"{value:g} GB/s is not what the model gives. Hint: occupancy = dma_issue_cycles + bytes / "
                  "(bytes per cycle x burst efficiency); in a long stream one copy leaves per occupancy; "
                  "bandwidth = bytes / occupancy x clock.")


_PIPE_ALIASES = {"scalar": "S", "vector": "V", "dma in": "MTE2", "dma out": "MTE3", "cube": "M"}


@checked_keywords
def check_busiest_pipe(answer, timeline=None) -> CheckResult:
    """Which pipe is busiest (most busy time summed over cores) in notebook 01's scaled-add run
    (2**20 elements on the 910B2), or in ``timeline`` if one is given? Answer: a pipe name such
    as ``"V"``."""
    if answer is None:
        return _missing("a pipe name as a string: 'S', 'MTE2', 'V' or 'MTE3'")
    busy = _busy_by_pipe(timeline)
    truth = busiest_pipe_truth(timeline)
    table = ", ".join(f"{p} {b:.0f} \u00b5s" for p, b in sorted(busy.items(), key=lambda kv: -kv[1]))
    if not isinstance(answer, str):
        return _wrong(f"Answer with a pipe name as a string, one of {sorted(busy)}.")
    given = answer.strip()
    given = _PIPE_ALIASES.get(given.lower(), given.upper())
    if given == truth:
        return _right(f"{truth} is busiest (busy time summed over cores: {table}). Every element "
                      "is loaded twice (x and y) and stored once, while the vector work per 256 bytes "
                      "is one cycle: this kernel is about moving data, not computing.")
    if given not in {"S", "MTE2", "V", "MTE3", "MTE1", "M", "FIX"}:
        return _wrong(f"{answer!r} is not a pipe. A vector core's pipes are S, MTE2, V and MTE3.")
    return _wrong(f"{given} is busy {busy.get(given, 0.0):.0f} \u00b5s in total. Hint: "
                  "timeline.pipe_table(), or count the bytes: how many loads and stores does each "
                  "element need, and how cheap is one vector repeat?")


_YES = {"yes", "y", "true", "it helps", "helps"}
_NO = {"no", "n", "false", "it does not", "does not help", "no help", "not"}


@checked_keywords
def check_double_buffering_one_tile(answer, n: int = ONE_TILE_N) -> CheckResult:
    """With exactly 1 tile per core (scaled-add on ``n`` elements, the 910B2), does double
    buffering (2 buffers per queue) make it faster? Answer ``"yes"`` or ``"no"`` (or True / False).
    The run is the buffers explorer's at ``buffers_explorer(n=n, tiles=1)``."""
    if answer is None:
        return _missing("'yes' or 'no'")
    single, double, helps = double_buffering_one_tile_times(n)
    if isinstance(answer, bool):
        said = answer
    elif isinstance(answer, str) and answer.strip().lower().rstrip(".!") in _YES | _NO:
        said = answer.strip().lower().rstrip(".!") in _YES
    else:
        return _wrong(f"Answer 'yes' or 'no' (or True / False), not {answer!r}.")
    evidence = (f"on the 910B2 with {n:,} elements and one tile per core: 1 buffer {single:.2f} \u00b5s, "
                f"2 buffers {double:.2f} \u00b5s")
    if said == helps:
        if helps:
            return _right(f"It helps here ({evidence}).")
        return _right(f"No gain ({evidence}). A second buffer lets the load of the NEXT tile "
                      "overlap the compute of this one; with one tile there is no next tile, and "
                      "load -> compute -> store of the same tile must stay in order.")
    return _wrong(f"The model says {'it helps' if helps else 'no'} ({evidence}). Hint: what could "
                  "the second buffer hold while the vector unit works on the first, if every core "
                  "has only one tile?")


@checked_keywords
def check_largest_tile_len(answer, chip: str = LARGEST_TILE_CASE["chip"],
                           num_buffers: int = LARGEST_TILE_CASE["num_buffers"]) -> CheckResult:
    """The scaled-add kernel holds 3 queues (x, y, z) of float32 tiles. With ``num_buffers``
    buffers per queue, what is the largest ``tile_len`` (elements, a multiple of 8) that fits the
    Unified Buffer of ``chip``? Answer: a whole number of elements."""
    if answer is None:
        return _missing("a whole number of elements")
    hw = get_preset(chip)
    per_element = 3 * num_buffers * 4          # 3 queues x buffers x 4 bytes
    truth = largest_tile_len_truth(chip, num_buffers)
    value = _whole(answer, ("elements",))
    if value is None:
        return _wrong(f"Answer a whole number of elements, not {answer!r}.")
    if value == truth:
        return _right(f"{truth} elements: 3 queues x {num_buffers} buffers x {truth} x 4 B = "
                      f"{per_element * truth:,} B of the {hw.ub_usable_bytes:,} B ({hw.ub_usable_bytes / 1024:.2f} KB usable) UB "
                      f"of the {hw.name}; {truth + 8} would need {per_element * (truth + 8):,} B.")
    if value % 8:
        return _wrong(f"{value} is not a multiple of 8: UB buffers are whole 32-byte blocks.")
    if value * per_element > hw.ub_usable_bytes:
        return _wrong(f"{value} elements need {value * per_element} B but the UB has "
                      f"{hw.ub_usable_bytes} B. Hint: ub_bytes / (queues x buffers x bytes per element).")
    return _wrong(f"{value} fits, but a larger tile does too. Hint: ub_bytes / (3 queues x "
                  f"{num_buffers} buffers x 4 bytes), rounded down to a multiple of 8.")


# ---- kernel exercises ---------------------------------------------------------------------------
# 01.scaled_add_double_buffer: write the scaled-add kernel with two buffers per queue.
import numpy as np  # noqa: E402

from ..kernels.scaled_add import ScaledAddTiling, scaled_add, scaled_add_reference  # noqa: E402
from ..lang import (DataCopyExtParams, DataCopyPadExtParams, GlobalTensor, TPosition, TQue,  # noqa: E402
                    launch, npu_kernel)
from .kernel_check import KernelExercise, register_exercise, sentinel_array  # noqa: E402

SCALED_ADD_TILE_LEN = 1024       # elements per tile in the exercise's tiling
SCALED_ADD_ALPHA = 1.5


@npu_kernel
def scaled_add_double_buffer_solution(ctx, x_gm, y_gm, z_gm, tiling_bytes):
    """z = alpha·x + y over this block's slice, tile by tile, two slots per queue, so MTE2 loads
    tile i+1 while V computes tile i. x, y, z: float32 GM; the tiling: ScaledAddTiling (alpha
    is its last field: a kernel's arguments are GM addresses only)."""
    t = ScaledAddTiling.unpack(tiling_bytes)
    alpha = t.alpha
    start, length = t.block_range(ctx.get_block_idx())
    x_in, y_in, z_out = TQue(TPosition.VECIN, 2), TQue(TPosition.VECIN, 2), TQue(TPosition.VECOUT, 2)
    # YOUR CODE: give each queue 2 slots of t.tile_len float32 (ctx.pipe.init_buffer, sizes in
    # bytes); then for each tile of this block: CopyIn x and y (alloc_tensor, data_copy — or
    # data_copy_pad for a tail that is not whole 32-byte blocks — enque), Compute
    # z = alpha*x + y (deque, ctx.muls, ctx.add, enque, free_tensor), CopyOut z.
    ### BEGIN SOLUTION
    ctx.pipe.init_buffer(x_in, 2, t.tile_len * 4, name="x_in")
    ctx.pipe.init_buffer(y_in, 2, t.tile_len * 4, name="y_in")
    ctx.pipe.init_buffer(z_out, 2, t.tile_len * 4, name="z_out")
    for offset in range(0, length, t.tile_len):
        n, lo = min(t.tile_len, length - offset), start + offset
        x, y = x_in.alloc_tensor(np.float32), y_in.alloc_tensor(np.float32)
        if n % 8 == 0:
            ctx.data_copy(x, x_gm[lo], n)
            ctx.data_copy(y, y_gm[lo], n)
        else:
            ctx.data_copy_pad(x, x_gm[lo], DataCopyExtParams(1, n * 4, 0, 0, 0), DataCopyPadExtParams(False, 0, 0, 0))
            ctx.data_copy_pad(y, y_gm[lo], DataCopyExtParams(1, n * 4, 0, 0, 0), DataCopyPadExtParams(False, 0, 0, 0))
        x_in.enque(x)
        y_in.enque(y)
        x, y = x_in.deque(np.float32), y_in.deque(np.float32)
        z = z_out.alloc_tensor(np.float32)
        ctx.muls(z, x, alpha, n)
        ctx.add(z, z, y, n)
        z_out.enque(z)
        x_in.free_tensor(x)
        y_in.free_tensor(y)
        z = z_out.deque(np.float32)
        if n % 8 == 0:
            ctx.data_copy(z_gm[lo], z, n)
        else:
            ctx.data_copy_pad(z_gm[lo], z, DataCopyExtParams(1, n * 4, 0, 0, 0))
        z_out.free_tensor(z)
    ### END SOLUTION


def scaled_add_tiling(n: int, hw) -> ScaledAddTiling:
    """The host side of the exercise: one block per core (capped by the tiles), whole 32-byte
    blocks per block, tiles of SCALED_ADD_TILE_LEN, two buffers, alpha = SCALED_ADD_ALPHA."""
    from ..presets import get_preset as _preset
    cores = _preset(hw).vector_cores
    block_dim = min(cores, -(-n // SCALED_ADD_TILE_LEN))
    block_len = -(-(-(-n // block_dim)) // 8) * 8
    return ScaledAddTiling(n, block_len, SCALED_ADD_TILE_LEN, 2, SCALED_ADD_ALPHA)


def _scaled_add_cases(rng):
    fixed = [4096, 1000, 1003, 1, 8, 20_000]
    return [{"n": int(n), "label": f"n={n}"} for n in fixed + [int(v) for v in rng.integers(1, 30_000, 2)]]


def _scaled_add_launch(fn, case, hw, timing_only):
    n = case["n"]
    t = scaled_add_tiling(n, hw)
    if timing_only:
        x = y = GlobalTensor.empty(n, np.float32, "x", timing_only=True)
        z = GlobalTensor.empty(n, np.float32, "z", timing_only=True)
    else:
        rng = np.random.default_rng(n)
        x = GlobalTensor.from_array(rng.standard_normal(n).astype(np.float32), "x")
        y = GlobalTensor.from_array(rng.standard_normal(n).astype(np.float32), "y")
        z = GlobalTensor.from_array(sentinel_array(n, np.float32), "z")
    timeline = launch(fn, t.block_dim, x, y, z, t.pack(), hw=hw, timing_only=timing_only)
    return (None if timing_only else {"z": z.data}), timeline


def _scaled_add_reference(case):
    rng = np.random.default_rng(case["n"])
    x = rng.standard_normal(case["n"]).astype(np.float32)
    y = rng.standard_normal(case["n"]).astype(np.float32)
    return {"z": scaled_add_reference(x, y, SCALED_ADD_ALPHA)}


def _scaled_add_locate(case, name, i):
    t = scaled_add_tiling(case["n"], "ascend-910b2")
    return f"block {i // t.block_len}, tile {(i % t.block_len) // t.tile_len}"


SCALED_ADD_TIMED_N = 1 << 20
_LESSON_TILE_LEN = __import__("inspect").signature(scaled_add).parameters["tile_len"].default


def _scaled_add_target(hw):
    """Halfway between the library's scaled_add with one and with two buffers per queue, at the
    timed shape and the exercise's tile length: a kernel meets it only if its loads overlap."""
    one, two = (scaled_add(SCALED_ADD_TIMED_N, SCALED_ADD_TIMED_N, SCALED_ADD_ALPHA, hw=hw, tile_len=SCALED_ADD_TILE_LEN,
                           num_buffers=b, timing_only=True)[1].total_us for b in (1, 2))
    return (one + two) / 2, (f"halfway between the course kernel with one buffer ({one:.1f} µs) and two "
                             f"({two:.1f} µs), both with this exercise's tiles of {SCALED_ADD_TILE_LEN} elements "
                             f"(the lesson's runs use scaled_add's default of {_LESSON_TILE_LEN}, so their times differ)")


register_exercise(KernelExercise(
    id="01.scaled_add_double_buffer", notebook="ex01", title="z = α·x + y with two buffers per queue",
    teaches="the copy-in → compute → copy-out skeleton of every Ascend C kernel, TQue slots, DataCopyPad "
            "for a tail, and double buffering emerging from two slots",
    solution=scaled_add_double_buffer_solution, cell_name="my_scaled_add",
    imports="import numpy as np\nfrom npu_lab import npu_kernel\n"
            "from npu_lab.lang import DataCopyExtParams, DataCopyPadExtParams, TPosition, TQue\n"
            "from npu_lab.kernels.scaled_add import ScaledAddTiling",
    place_after="after ### Why DataCopy needs whole 32-byte blocks, before ### The course's kernel (the learner writes it before seeing it)",
    cases=_scaled_add_cases, launch=_scaled_add_launch, reference=_scaled_add_reference,
    locate=_scaled_add_locate, target=_scaled_add_target,
    target_case={"n": SCALED_ADD_TIMED_N, "label": "n=2^20"}, speed=True,
    slow_hint="look at MTE2 and V in the timeline: with one slot per queue they take turns; two slots "
              "let the load of tile i+1 run under the compute of tile i"))
