"""What a kernel is written with: an Ascend-C-flavoured API that computes with numpy and charges
every instruction to the simulator. See :class:`KernelContext` for the instruction list."""

from .context import KernelContext, RaceError
from .launch import launch, npu_kernel
from .memory import TBuf, TPipe, TQue, UbOverflowError
from .tensor import GlobalTensor, LocalTensor

__all__ = ["KernelContext", "RaceError", "launch", "npu_kernel", "TBuf", "TPipe", "TQue",
           "UbOverflowError", "GlobalTensor", "LocalTensor"]
