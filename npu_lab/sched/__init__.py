"""Host-side scheduling of variable-length work over cores (issue 19 §2): LPT, the simple
schedules, the brute-force optimum, seeded length distributions and the article's figures."""

from .compare import article_balance_check, article_spread_sweep, compare_schedules, p99_completion, sample_lengths
from .lpt import (Schedule, contiguous_schedule, lpt_bound, lpt_schedule, optimal_makespan,
                  optimal_makespan_exhaustive, round_robin_schedule, split_long_schedule, validate_work)

__all__ = ["Schedule", "lpt_schedule", "round_robin_schedule", "contiguous_schedule", "split_long_schedule",
           "optimal_makespan", "optimal_makespan_exhaustive", "lpt_bound", "validate_work", "sample_lengths",
           "compare_schedules", "p99_completion", "article_balance_check",
           "article_spread_sweep"]
