"""What the MoE explorers share: chip/version choices, input checks, the error line, a small
LRU cache and the :class:`_Explorer` base (controls → update → figure state)."""

from __future__ import annotations

import html
import math
import numbers
import time
from collections import OrderedDict
from contextlib import contextmanager

import ipywidgets as W
import numpy as np
import pandas as pd
import plotly.graph_objects as go

from ...hardware import HardwareSpec, HardwareSpecError
from ...kernels.moe_gating import VERSIONS
from ...kernels.moe_gating.run import ROW_TILED
from ...lang import UbOverflowError
from ...presets import get_preset
from ...sim import SimulationError
from ..viz import sync_after_move, sync_widget_state

#: Chips the explorers offer: the article-fitted preset and the two datasheet presets.
MOE_CHIPS = ("article", "ascend-910b2", "ascend-310p3")
#: Fused kernel versions (everything but the discrete chain), in teaching order.
FUSED_VERSIONS = tuple(v for v in VERSIONS if v != "discrete")
#: Fused versions the host tiles by tileS (v4 tiles by rows per core, CANN's way: no tileS slider).
TILE_S_VERSIONS = tuple(v for v in FUSED_VERSIONS if v not in ROW_TILED)
#: The article's UB assumption, in bytes.
ARTICLE_UB_BYTES = 256 * 1024

# Errors a learner can provoke with the controls: shown in the status line, never raised.
_EXPECTED_ERRORS = (ValueError, UbOverflowError, HardwareSpecError, SimulationError)
_CACHE_SIZE = 512
_SHORT_VERSION = {"v1": "synchronous", "v2": "double-buffered", "v2_bad_sync": "the sync pitfall",
                  "v2c": "coalesced DMA", "v3": "vectorized", "v3_fast_exp": "polynomial exp",
                  "v4": "sorted, CANN-style"}
_DROPDOWN = dict(width="300px")
_ERROR_STYLE = "color:#b00020"


def _commit_grid_csv(frame, path):
    """Write an explorer's precomputed grid to ``path`` (data/): float64 exactly
    (``%.17g`` round-trips), and whole or not at all (a temporary file, then one rename), so a
    stopped regeneration never leaves a half-written grid that the staleness check might accept."""
    tmp = path.with_suffix(".tmp")
    frame.to_csv(tmp, index=False, float_format="%.17g")
    tmp.replace(path)
    return path


def _simulate_grid(keys, simulate, errors, refused, columns, progress=None):
    """The rows of an explorer's precomputed grid: per key (a tuple), ``(*key, *simulate(*key), "")``,
    or ``(*key, *refused, message)`` when the library refuses it with one of ``errors``; a frame
    with ``columns`` (keys, values, ``error``). ``progress(i, n)``: called after each key."""
    rows = []
    for i, key in enumerate(keys):
        try:
            rows.append((*key, *simulate(*key), ""))
        except errors as err:
            rows.append((*key, *refused, str(err)))
        if progress is not None:
            progress(i + 1, len(keys))
    return pd.DataFrame(rows, columns=columns)


def _read_grid_csv(path, columns, key_types, value_types) -> dict:
    """A grid written by :func:`_commit_grid_csv`, read back: ``{key: values}``, or the library's
    refusal (a str) for a row whose last column, ``error``, is not empty; {} when the file is
    missing. ``columns``: the file's columns, keys first, ``error`` last; ``key_types`` /
    ``value_types``: a converter per key / value column (``int``, ``float``, ``str``)."""
    if not path.exists():
        return {}
    frame = pd.read_csv(path, keep_default_na=False, na_values=[""])
    n = len(key_types)
    out = {}
    for row in frame[list(columns)].itertuples(index=False):
        key = tuple(f(x) for f, x in zip(key_types, row[:n]))
        err = row[-1]
        out[key] = str(err) if isinstance(err, str) and err else tuple(f(x) for f, x in zip(value_types, row[n:-1]))
    return out


def _checked_grid(grid: dict, probes, same) -> dict:
    """``grid`` when every probe (zero-argument callable returning ``(key, live values)``: a live
    run) agrees with it by ``same(grid value, live values)``, else {}: a cost model changed since
    the file was written shows live numbers, never stale ones."""
    for probe in probes:
        if not grid:
            break
        key, live = probe()
        got = grid.get(key)
        if not isinstance(got, tuple) or not same(got, live):
            return {}
    return grid


class _Refused(ValueError):
    """A position the library refuses, replayed from a precomputed grid (its message is the library's)."""


def minimum_hbm_bytes(B: int, S: int, E: int, K: int, dtype_bytes: int = 4) -> int:
    """The least HBM traffic any MoeGatingTopK can move: read the logits once
    (B·S·E·dtype) and write the outputs once (B·S·K indices int32 + weights float32 = 8 B each)."""
    return B * S * E * dtype_bytes + B * S * K * 8


# ---------------------------------------------------------------------------- helpers
def _check_int(name: str, value, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= value <= hi:
        raise ValueError(f"{name} must be a whole number from {lo} to {hi}, got {value!r}")
    return int(value)


def _check_float(name: str, value, lo: float, hi: float) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) or not math.isfinite(value) \
            or not lo <= value <= hi:
        raise ValueError(f"{name} must be a number from {lo:g} to {hi:g}, got {value!r}")
    return float(value)


def _check_bool(name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def _check_hw(name: str, value) -> HardwareSpec:
    """A preset name or a HardwareSpec, else an error naming ``name`` and the presets."""
    if isinstance(value, HardwareSpec):
        return value
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a preset name or a HardwareSpec, got {value!r}")
    try:
        return get_preset(value)
    except KeyError as exc:
        raise ValueError(f"{name}: {exc.args[0] if exc.args else exc}") from None


class _GuardedValue:
    """Mixed into a control's class by :meth:`_Explorer._watch`: assigning ``.value`` from code
    runs the library's check first (a ValueError naming the control, not ipywidgets' TraitError
    or a silent clamp). Front-end moves go through ``set_state``, not here."""

    def __setattr__(self, attr, value):
        if attr == "value" and getattr(self, "_npu_name", None):
            _check_control_value(self._npu_name, self, value)
        super().__setattr__(attr, value)


_GUARDED_CLASSES: dict = {}


def _guard(control, name: str) -> None:
    cls = type(control)
    if not issubclass(cls, _GuardedValue):
        guarded = _GUARDED_CLASSES.get(cls)
        if guarded is None:
            guarded = _GUARDED_CLASSES[cls] = type(cls.__name__, (_GuardedValue, cls), {"__module__": cls.__module__})
        control.__class__ = guarded
    object.__setattr__(control, "_npu_name", name)


def _check_list(name: str, values, lo: int = 1, hi: int = 1 << 30, most: int = 1024) -> list[int]:
    """A non-empty list/tuple/range of whole numbers in [lo, hi] (at most ``most`` of them)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple, range, np.ndarray)):
        raise TypeError(f"{name} must be a list of whole numbers such as [1, 8, 32]; got {values!r}")
    out = list(values)
    if not 1 <= len(out) <= most:
        raise ValueError(f"{name} must list 1 to {most} values, got {len(out)}")
    return [_check_int(f"every value of {name}", v, lo, hi) for v in out]


def _chip_options(chips=MOE_CHIPS) -> list[tuple[str, str]]:
    options = []
    for name in chips:
        try:
            spec = get_preset(name)
        except (FileNotFoundError, HardwareSpecError):
            continue  # e.g. the fitted preset before its data file is generated
        label = "article (fitted)" if name == "article" else name
        options.append((f"{label} \u00b7 UB {spec.ub_bytes // 1024} KB", name))
    return options


def _check_choice(name: str, value, options) -> str:
    values = [v for _, v in options]
    # only plain scalars compare (an array's == is elementwise); a bool is not the number 1
    # (None is a choice too: e.g. the level-0 picture's 'normal mode' entry of its mask-mode menu)
    # a tuple of plain scalars is a choice too (the GEMM explorer's base tile (baseM, baseN, baseK))
    def plain(x):
        return isinstance(x, (str, numbers.Number, np.generic)) and not isinstance(x, np.ndarray)

    scalar = value is None or plain(value) or (isinstance(value, tuple) and all(plain(x) for x in value))
    if not scalar or not any((value is v if value is None or v is None else value == v) and isinstance(value, (bool, np.bool_)) == isinstance(v, bool)
                             for v in values):
        raise ValueError(f"{name} must be one of {values}, got {value!r}")
    return value


def _error_html(prefix: str, message: str) -> str:
    return (f"<span style='{_ERROR_STYLE}'><b>{html.escape(prefix)} does not run:</b> "
            f"{html.escape(message)}</span>")


def _check_control_value(name: str, control, value) -> None:
    """The library's message for a value a control would refuse (instead of a TraitError)."""
    if isinstance(control, W.Dropdown):
        _check_choice(name, value, [(None, v) for v in (o[1] if isinstance(o, tuple) else o
                                                        for o in control.options)])
    elif isinstance(control, (W.IntSlider, W.BoundedIntText)):
        _check_int(name, value, control.min, control.max)
    elif isinstance(control, W.SelectionSlider):
        _check_choice(name, value, [(None, v) for v in (o[1] if isinstance(o, tuple) else o
                                                        for o in control.options)])
    elif isinstance(control, W.FloatSlider):
        _check_float(name, value, control.min, control.max)
    elif isinstance(control, (W.Checkbox, W.ToggleButton)):
        if not isinstance(value, (bool, np.bool_)):
            raise ValueError(f"{name} must be True or False, got {value!r}")
    elif isinstance(control, W.ToggleButtons):
        _check_choice(name, value, [(None, v) for v in (o[1] if isinstance(o, tuple) else o
                                                        for o in control.options)])


#: Pause between two idle-time jobs, so a front-end message waits at most one job.
_WARM_GAP_S = 0.005


def warm_when_idle(holder, jobs) -> None:
    """Run ``jobs`` (zero-argument callables that fill an explorer's caches) one per turn of the
    kernel's event loop, after the messages already waiting: a slider move arriving meanwhile waits
    for one job at most (a timing-only run, milliseconds), then finds its configuration cached.
    A later call for the same ``holder`` replaces the jobs left. Without a running event loop
    (plain Python, tests) nothing runs: the caches fill on demand as before. Errors a configuration
    raises are the explorer's to show when it is chosen (it runs again then): here they are
    dropped, so a warm-up never writes into a cell's output."""
    import asyncio

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    it = iter(jobs)
    holder._npu_warm = it

    def step():
        if getattr(holder, "_npu_warm", None) is not it:
            return                                  # superseded by a newer move
        job = next(it, None)
        if job is None:
            holder._npu_warm = None
            return
        try:
            job()
        except Exception:     # noqa: BLE001 - shown by the move that picks it, not by the warm-up
            pass
        loop.call_later(_WARM_GAP_S, step)
    loop.call_later(_WARM_GAP_S, step)


class _LRU(OrderedDict):
    """A small least-recently-used cache: ``get_or(key, make)``."""

    def get_or(self, key, make):
        if key in self:
            self.move_to_end(key)
            return self[key]
        value = make()
        self[key] = value
        if len(self) > _CACHE_SIZE:
            self.popitem(last=False)
        return value


class _Explorer:
    """Shared plumbing: observers, ``set(...)``, display, timing of the last update."""

    figure: go.FigureWidget
    status: W.HTML
    widget: W.Box
    error: str | None = None
    last_update_s: float = 0.0
    _controls: tuple = ()

    def _watch(self, *controls) -> None:
        self._controls = controls
        self._held = False
        names = {id(v): k for k, v in vars(self).items()}
        for control in controls:
            control.observe(self._on_change, names="value")
            _guard(control, names.get(id(control), control.description or "value"))

    def _on_change(self, change=None) -> None:
        if self._held:
            return
        start = time.perf_counter()
        self.update()
        self._warm_later()
        # views in the browser have drawn the move: the synced state for pages built later waits
        sync_after_move(self, self._sync_figure_state, change)
        self.last_update_s = time.perf_counter() - start

    def _sync_figure_state(self) -> None:
        sync_widget_state(self.figure)

    def _neighbours(self):
        """Zero-argument jobs that fill the caches for the controls' next values (nearest first);
        :meth:`_warm_later` runs them while the kernel is idle. None here: an explorer whose
        moves simulate defines them."""
        return ()

    def _warm_later(self) -> None:
        """Precompute what the next slider moves will need, one job at a time, whenever the kernel
        is idle (see :func:`warm_when_idle`); a new move re-aims it."""
        warm_when_idle(self, self._neighbours())

    @contextmanager
    def hold(self):
        """Change several controls inside ``with explorer.hold(): ...``; redraw once at the end."""
        self._held = True
        try:
            yield self
        finally:
            self._held = False
            self._on_change()

    def set(self, **values) -> None:
        """``explorer.set(S=2048, E=256)``: set several controls, then redraw once."""
        names = [k for k, v in vars(self).items() if any(v is c for c in self._controls)]
        unknown = [k for k in values if k not in names]   # outputs such as .status are not controls
        if unknown:
            raise AttributeError(f"no control named {unknown}; controls: {names}")
        for key, value in values.items():                 # check all before changing any
            _check_control_value(key, getattr(self, key), value)
        with self.hold():
            for key, value in values.items():
                getattr(self, key).value = value

    def update(self) -> None:  # pragma: no cover - each explorer defines it
        raise NotImplementedError

    def _spec(self, chip: str) -> HardwareSpec:
        return get_preset(chip)

    def _repr_mimebundle_(self, **kwargs):
        self._sync_figure_state()
        self._warm_later()            # shown: the first moves will find their runs cached
        return self.widget._repr_mimebundle_(**kwargs)


# ---------------------------------------------------------------------------- tileS sweep
