"""The pipe-level simulator: per-core pipes, block scheduling, costs and the Timeline."""

from .core import ALL_PIPES, CUBE_PIPES, PIPE_MEANING, VECTOR_PIPES, BlockTrace, CoreState, SimulationError
from .schedule import schedule_blocks
from .timeline import LaunchRecord, Timeline

__all__ = ["ALL_PIPES", "CUBE_PIPES", "PIPE_MEANING", "VECTOR_PIPES", "BlockTrace", "CoreState",
           "SimulationError", "schedule_blocks", "LaunchRecord", "Timeline"]
