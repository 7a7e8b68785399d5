"""What the simulator raises when a kernel breaks a rule of the device.

Each message names the rule (with the Ascend C page it comes from), what the kernel did, what real
hardware would have done instead (often: nothing visible — a silently wrong result), and the fix.
"""

from __future__ import annotations

from ..sim.core import SimulationError


class RaceError(SimulationError):
    """An instruction touched UB data another pipe had not finished with (a missing sync)."""


class AscendCRuleError(SimulationError, ValueError):
    """A call Ascend C would not compile, or one the hardware would silently get wrong."""


class CapabilityError(AscendCRuleError):
    """The chip's core has no such instruction (or not for this dtype / mode)."""
