"""A plain-Python reference of splitmix64, against which the numba kernels are checked."""

from __future__ import annotations

MASK = (1 << 64) - 1


def python_splitmix64(state: int) -> tuple[int, int]:
    """One step of splitmix64 in plain Python integers: (new state, 64 random bits)."""
    state = (state + 0x9E3779B97F4A7C15) & MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return state, z ^ (z >> 31)
