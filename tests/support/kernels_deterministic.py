"""Kernels of a Warp module built in deterministic mode (for ``tests/warp/cuda/test_deterministic.py``).

The module option ``"deterministic"`` is ``RUN_TO_RUN``: Warp appends hidden parameters to the CUDA forward and
backward signatures of the kernels whose forward *or adjoint* accumulates with atomics. That is ``sum_kernel`` and
``scatter_add_kernel`` (atomics in the source), but also ``triple_kernel``, which has none: its adjoint accumulates
the gradient of ``a`` (``adj_a[i] += ...``), and Warp makes that reduction deterministic too. Kernels without
either (``iota_kernel`` reads no array, ``int_triple_kernel`` reads integers, which have no gradient) keep their
signatures. The CPU signatures are unchanged. `make_config_sum_kernel` builds a kernel in a new module, which takes
its mode from ``wp.config.deterministic`` when it is created.
"""

import warp as wp

wp.set_module_options({"deterministic": wp.DeterministicMode.RUN_TO_RUN})


@wp.kernel
def sum_kernel(a: wp.array(dtype=float), total: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(total, 0, a[i])


@wp.kernel
def scatter_add_kernel(a: wp.array(dtype=float), index: wp.array(dtype=wp.int32), out: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(out, index[i], a[i])


@wp.kernel
def triple_kernel(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = 3.0 * a[i]


@wp.kernel
def iota_kernel(out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = float(i)


@wp.kernel
def int_triple_kernel(a: wp.array(dtype=wp.int32), out: wp.array(dtype=wp.int32)):
    i = wp.tid()
    out[i] = 3 * a[i]


def make_config_sum_kernel() -> wp.Kernel:
    """A ``sum_kernel`` twin in a new module: its deterministic mode is ``wp.config.deterministic`` at this call."""

    @wp.kernel(module="unique")
    def config_sum_kernel(a: wp.array(dtype=float), total: wp.array(dtype=float)):
        i = wp.tid()
        wp.atomic_add(total, 0, a[i])

    return config_sum_kernel
