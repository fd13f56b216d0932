"""``@wp.func`` helpers that `tests/support/rebinding.py`'s kernels reach by a name the tests rebind: two that read
``x`` and one that writes it. ``helper`` is the module attribute the kernel ``by_attribute`` calls."""

import warp as wp


@wp.func
def double(x: wp.array(dtype=float), i: int) -> float:
    return 2.0 * x[i]


@wp.func
def add_ten(x: wp.array(dtype=float), i: int) -> float:
    return x[i] + 10.0


@wp.func
def overwrite(x: wp.array(dtype=float), i: int) -> float:
    x[i] = 100.0
    return 1.0


helper = double
