"""Operators, one sub-package per operator.

Each operator package holds an independent numpy reference (the numbers every kernel version is
checked against), the host-side tiling that decides how the work is cut into blocks, and the kernel
versions in teaching order.
"""
