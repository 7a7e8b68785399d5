"""What a kernel is written with: a faithful subset of Ascend C that computes with numpy and
charges every instruction to the simulator. :data:`ASCEND_C_API` maps each Ascend C call to its
Python spelling, its C++ signature and its reference page."""

from .api_map import ASCEND_C_API, api_table
from .context import HardEvent, KernelContext
from .debug import KernelAssertionError
from .cube_params import (FixpipeParamsV220, LoadData2DParams, MmadParams, Nd2NzParams, QuantMode_t, deq_scale_float,
                          deq_scale_uint64)
from .dma import DataCopyExtParams, DataCopyPadExtParams, DataCopyParams
from .errors import AscendCRuleError, CapabilityError, RaceError, UnmatchedFlagError
from .launch import launch, npu_kernel
from .memory import EventIdError, QueueError, TBuf, TPipe, TPosition, TQue, UbOverflowError
from .reduce import ReduceOrder, reduce_max_tmp_elements
from .select import CMPMODE, SELMODE, BrcbRepeatParams, GatherMaskParams
from .sort import MrgSort4Info, MrgSortSrcList
from .tensor import GlobalTensor, LocalTensor, bfloat16_to_float, float_to_bfloat16, get_user_workspace
from .vector import MASK_PLACEHOLDER, BinaryRepeatParams, CopyRepeatParams, RoundMode, UnaryRepeatParams

__all__ = ["ASCEND_C_API", "api_table", "HardEvent", "KernelContext", "DataCopyExtParams",
           "DataCopyPadExtParams", "DataCopyParams", "AscendCRuleError", "CapabilityError", "RaceError", "UnmatchedFlagError",
           "launch", "npu_kernel", "EventIdError", "QueueError", "TBuf", "TPipe", "TPosition", "TQue", "UbOverflowError",
           "ReduceOrder", "reduce_max_tmp_elements", "CMPMODE", "SELMODE", "BrcbRepeatParams",
           "GatherMaskParams", "MrgSort4Info", "MrgSortSrcList", "GlobalTensor", "LocalTensor",
           "BinaryRepeatParams", "CopyRepeatParams", "RoundMode", "UnaryRepeatParams",
           "KernelAssertionError", "bfloat16_to_float", "float_to_bfloat16", "get_user_workspace",
           "MASK_PLACEHOLDER",
           "FixpipeParamsV220", "LoadData2DParams", "MmadParams", "Nd2NzParams", "QuantMode_t",
           "deq_scale_uint64", "deq_scale_float"]
