"""The explorer widget re-runs the kernel in timing-only mode when a control changes and
redraws its FigureWidget in place; a choice that does not fit shows the library's message."""

from __future__ import annotations

import numpy as np
import pytest

from npu_lab import get_preset
from npu_lab.kernels.scaled_add import scaled_add
from npu_lab.course.widgets import BuffersExplorer, buffers_explorer, tile_len_for


@pytest.fixture
def explorer():
    return buffers_explorer(n=1 << 18, tiles=4)


class _Bars:
    """The MTE2 bars of a timeline figure, over its traces (one per pipe and issuing line)."""

    def __init__(self, fig):
        self.traces = [tr for tr in fig.data if tr.name == "MTE2"]
        self.x = [v for tr in self.traces for v in tr.x]
        self.base = [v for tr in self.traces for v in tr.base]


def _mte2_bars(e):
    return _Bars(e.figure)


def test_controls_are_attributes(explorer):
    assert isinstance(explorer, BuffersExplorer)
    assert explorer.buffers.value == 2 and explorer.tiles.value == 4
    assert explorer.chip.value == "ascend-910b2"
    assert "ascend-310p3" in [v for _, v in explorer.chip.options]
    assert explorer.figure in explorer.children
    assert "latency" in explorer.status.value


def test_status_matches_the_library(explorer):
    hw = get_preset("ascend-910b2")
    _, t = scaled_add(1 << 18, None, timing_only=True, hw=hw, tile_len=tile_len_for(1 << 18, hw, 4))
    assert f"{t.total_us:.2f}" in explorer.status.value
    assert explorer.timeline.total_us == pytest.approx(t.total_us)


def test_slider_redraws_in_place(explorer):
    fig, trace = explorer.figure, _mte2_bars(explorer)
    before_status, before_len = explorer.status.value, len(trace.x)
    explorer.tiles.value = 8
    assert explorer.figure is fig and all(a is b for a, b in zip(_mte2_bars(explorer).traces, trace.traces))
    trace = _mte2_bars(explorer)
    assert len(trace.x) == 2 * before_len          # twice the tiles, twice the loads
    assert explorer.status.value != before_status
    assert explorer.last_update_s > 0


def test_buffers_toggle_changes_latency(explorer):
    explorer.tiles.value = 16
    two = explorer.timeline.total_us
    explorer.buffers.value = 1
    one = explorer.timeline.total_us
    assert one > two
    assert f"{one:.2f}" in explorer.status.value and "1 buffer," in explorer.figure.layout.title.text
    assert f"2 buffers: {two:.2f}" in explorer.status.value


def test_chip_dropdown(explorer):
    base = np.array(_mte2_bars(explorer).base, float)
    explorer.chip.value = "ascend-310p3"
    assert explorer.error is None
    assert explorer.timeline.hw.name == "ascend-310p3"
    assert not np.array_equal(np.array(_mte2_bars(explorer).base, float), base)


def test_invalid_choice_shows_the_error_instead_of_raising(explorer):
    explorer.chip.value = "ascend-310p3"
    explorer.tiles.value = 1       # 32768 elements per tile: 3 queues x 2 x 128 KB > 256 KB UB
    assert explorer.error is not None and "UB" in explorer.error
    assert "does not run" in explorer.status.value
    assert "smallest tiles/core that fits: 4." in explorer.status.value   # in the control's unit
    assert "does not fit" in explorer.figure.layout.title.text
    explorer.tiles.value = 4       # back to a valid choice: the error goes away
    assert explorer.error is None and "latency" in explorer.status.value


def test_custom_chip():
    slow = get_preset("ascend-910b2").replace(vector_cycles_per_repeat=40.0)
    e = buffers_explorer(n=1 << 18, hw=slow, tiles=4)
    assert e.chip.value.endswith("(custom)")
    assert e.timeline.hw.vector_cycles_per_repeat == 40.0


def test_bad_arguments():
    with pytest.raises(ValueError, match="buffers"):
        buffers_explorer(buffers=3)
    with pytest.raises(ValueError, match="tiles"):
        buffers_explorer(tiles=0)
    with pytest.raises(ValueError, match="starting point"):
        buffers_explorer(n=1 << 20, tiles=1)   # one tile per core does not fit with 2 buffers


def test_tile_len_for_cuts_each_cores_share():
    hw = get_preset("ascend-910b2")
    assert tile_len_for(48 * 1024, hw, 4) == 256
    assert tile_len_for(48 * 1000, hw, 3) % 8 == 0
    with pytest.raises(ValueError):
        tile_len_for(1024, hw, 0)


def test_a_browser_move_syncs_the_figure_state_after_a_pause_a_move_from_code_at_once():
    """The full figure copy (for pages built later, e.g. Voila) is not paid on every browser move:
    it runs once the kernel has been idle SYNC_DELAY_S; a change from code syncs at once."""
    import asyncio

    from npu_lab.course import viz
    from npu_lab.course.explorers import TileSweepExplorer

    e = TileSweepExplorer(chip="article")
    point = lambda: e.figure._widget_data[e.TRACE_CURRENT]["x"]   # noqa: E731
    e.tile_s.value = 9                                             # from code: synced now
    assert list(point()) == [9]

    async def browser_moves():
        e.tile_s.set_state({"value": 10})                          # what a front-end message does
        e.tile_s.set_state({"value": 11})
        assert list(e.figure.data[e.TRACE_CURRENT].x) == [11]      # the views got the move...
        assert list(point()) == [9]                                # ...the copy waits
        await asyncio.sleep(viz.SYNC_DELAY_S + 0.3)
        assert list(point()) == [11]                               # one copy after the burst

    asyncio.run(browser_moves())
    assert viz.from_browser({"owner": e.tile_s, "name": "value"}) is False
