"""The record of a mixed (cube + vector) launch (issue 17 §2; :mod:`npu_lab.lang.mixed_launch`).

A :class:`MixedLaunchRecord` is a :class:`~npu_lab.sim.timeline.LaunchRecord` whose "blocks" are
the cores of each AI core group, in the order AIC, AIV0, AIV1 per group (``block_dim`` = 3 x
groups); ``traces`` holds three per block class (the kernel's ``block_classes``; one class per
group without), ``block_class`` = 3 x class + role. AIC ``c`` is core ``c``; its AIVs are cores ``cube_cores + 2c`` and ``cube_cores + 2c + 1``,
so a timeline shows the AIC's pipes (MTE2, MTE1, M, FIX) and the AIVs' (MTE2, V, MTE3) in their own
lanes. Utilisation counts every cube and vector core of the chip.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .core import ALL_PIPES
from .schedule import schedule_blocks
from .timeline import LaunchRecord

ROLES = ("AIC", "AIV0", "AIV1")


@dataclass
class MixedLaunchRecord(LaunchRecord):
    groups: int = 0              # AI core groups (the kernel's block_dim)

    def _durations(self) -> np.ndarray:
        """Each core's busy span (cycles), AIC, AIV0, AIV1 per group (traces are per block class:
        ``block_dim`` = 3 x groups entries of ``block_class`` index them)."""
        return np.array([t.duration_cycles for t in self.traces], dtype=np.float64)[self.block_class]

    def core_slots(self) -> int:
        """Cores a timeline of this launch has rows for: every AIC and AIV of the chip."""
        return self.hw.cube_cores + self.hw.vector_cores

    def core_label(self, core: int) -> str:
        cubes = self.hw.cube_cores
        if core < cubes:
            return f"AIC {core}"
        return f"AIV {core - cubes} (of AIC {(core - cubes) // 2})"

    @cached_property
    def undispatched_cycles(self) -> float:
        d = self._durations().reshape(self.groups, 3).max(axis=1)
        start, _ = schedule_blocks(d, self.hw.cube_cores, 0.0)
        return float((start + d).max()) if self.groups else 0.0

    def busy_cycles_by_core(self) -> np.ndarray:
        per_class = np.array([[t.busy_cycles_by_pipe()[p] for p in ALL_PIPES] for t in self.traces])
        out = np.zeros((self.core_slots(), len(ALL_PIPES)))
        if self.block_dim:
            np.add.at(out, self.block_core, per_class[self.block_class])
        return out

    def role_durations_us(self) -> dict:
        """{"AIC": [...], "AIV0": [...], "AIV1": [...]}: each core's busy span per group (µs)."""
        d = self._durations().reshape(self.groups, 3)
        return {r: [self.hw.cycles_to_us(float(x)) for x in d[:, i]] for i, r in enumerate(ROLES)}
