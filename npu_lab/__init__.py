"""npu_lab — learn to write fast Ascend-style NPU operators without an NPU.

Kernels written against :mod:`npu_lab.lang` return real numerical results and a timeline from
the stated hardware model in :mod:`npu_lab.hardware` / :mod:`npu_lab.presets`.
"""

from .hardware import HardwareSpec, HardwareSpecError
from .lang import GlobalTensor, KernelContext, LocalTensor, RaceError, UbOverflowError, launch, npu_kernel
from .presets import compare_presets, get_preset, list_presets
from .sim import SimulationError, Timeline

__version__ = "0.1.0"

__all__ = ["HardwareSpec", "HardwareSpecError", "GlobalTensor", "KernelContext", "LocalTensor",
           "RaceError", "UbOverflowError", "launch", "npu_kernel", "compare_presets", "get_preset",
           "list_presets", "SimulationError", "Timeline"]
