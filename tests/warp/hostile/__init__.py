"""Hostile input: random and malformed dims, options, values, ``vmap`` axes, writes, bounds and 64-bit values.

Each call must give the NumPy answer or an error naming what was wrong, and leave the caller's arrays intact; after
any failure, the same modules and fresh ones must still give the right answer. The shared case table and checks are
in ``tests/support/hostile.py``.
"""
