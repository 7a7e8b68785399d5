"""What a kernel is written with: a faithful subset of Ascend C that computes with numpy and
charges every instruction to the simulator. :data:`ASCEND_C_API` maps each Ascend C call to its
Python spelling, its C++ signature and its reference page."""

from .api_map import ASCEND_C_API, api_table
from .context import HardEvent, KernelContext
from .cube_params import FixpipeParamsV220, LoadData2DParams, MmadParams, Nd2NzParams, QuantMode_t
from .dma import DataCopyExtParams, DataCopyPadExtParams, DataCopyParams
from .errors import AscendCRuleError, CapabilityError, RaceError
from .launch import launch, npu_kernel
from .memory import QueueError, TBuf, TPipe, TPosition, TQue, UbOverflowError
from .reduce import ReduceOrder, reduce_max_tmp_elements
from .select import CMPMODE, SELMODE, BrcbRepeatParams, GatherMaskParams
from .sort import MrgSort4Info, MrgSortSrcList
from .tensor import GlobalTensor, LocalTensor
from .vector import BinaryRepeatParams, CopyRepeatParams, RoundMode, UnaryRepeatParams

__all__ = ["ASCEND_C_API", "api_table", "HardEvent", "KernelContext", "DataCopyExtParams",
           "DataCopyPadExtParams", "DataCopyParams", "AscendCRuleError", "CapabilityError", "RaceError",
           "launch", "npu_kernel", "QueueError", "TBuf", "TPipe", "TPosition", "TQue", "UbOverflowError",
           "ReduceOrder", "reduce_max_tmp_elements", "CMPMODE", "SELMODE", "BrcbRepeatParams",
           "GatherMaskParams", "MrgSort4Info", "MrgSortSrcList", "GlobalTensor", "LocalTensor",
           "BinaryRepeatParams", "CopyRepeatParams", "RoundMode", "UnaryRepeatParams",
           "FixpipeParamsV220", "LoadData2DParams", "MmadParams", "Nd2NzParams", "QuantMode_t"]
