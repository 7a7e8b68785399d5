"""What the simulator raises when a kernel breaks a rule of the device.

Each message names the rule (with the Ascend C page it comes from), what the kernel did, what real
hardware would have done instead (often: nothing visible — a silently wrong result), and the fix.
"""

from __future__ import annotations

from ..sim.core import SimulationError, UnmatchedFlagError

__all__ = ["RaceError", "AscendCRuleError", "CapabilityError", "UnmatchedFlagError", "SimulationError"]


class RaceError(SimulationError):
    """Two pipes touched overlapping UB bytes (at least one writing) with nothing ordering them:
    a missing sync, found by happens-before whatever the timing (see ``KernelContext._exec``).

    Attributes (None when raised elsewhere): ``buffer`` (its name), ``kind`` ("read after write",
    "write after read", "write after write"), ``event`` (the HardEvent that would order them,
    "SRC_DST"), ``earlier`` / ``later`` (instruction name, pipe, (file, line))."""

    def __init__(self, message: str, *, buffer=None, kind=None, event=None, earlier=None, later=None):
        super().__init__(message)
        self.buffer, self.kind, self.event, self.earlier, self.later = buffer, kind, event, earlier, later


class AscendCRuleError(SimulationError, ValueError):
    """A call Ascend C would not compile, or one the hardware would silently get wrong."""


class CapabilityError(AscendCRuleError):
    """The chip's core has no such instruction (or not for this dtype / mode)."""
