"""Kernels that call a ``@wp.func`` by a name Warp resolves when it builds them, for
``tests/warp/plan/test_rebinding.py``: a module global (``by_global``), a module attribute (``by_attribute``:
``rebinding_helpers.helper``) and a closure cell (``by_closure``). Each sets ``y[i] = <helper>(x, i)``, the helper
being `rebinding_helpers.double` until a test rebinds the name (and puts it back).

The helpers live in another module, so a bare rebinding leaves this module's Warp hash as Warp computed it;
`redefine_helper` instead defines a new ``@wp.func`` in this module, which Warp sees (it marks the module modified).
"""

from typing import Any

import warp as wp

from tests.support import rebinding_helpers as helpers

helper = helpers.double


@wp.kernel
def by_global(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = helper(x, i)


@wp.kernel
def by_attribute(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = helpers.helper(x, i)


def _closure_kernel() -> Any:
    f = helpers.double

    @wp.kernel
    def by_closure(x: wp.array(dtype=float), y: wp.array(dtype=float)):
        i = wp.tid()
        y[i] = f(x, i)

    return by_closure


by_closure = _closure_kernel()


def rebind(kernel: Any, func: Any) -> Any:
    """Point the name ``kernel`` calls its helper by at ``func`` (no Warp definition); returns the old helper."""
    global helper
    if kernel is by_global:
        old, helper = helper, func
    elif kernel is by_attribute:
        old, helpers.helper = helpers.helper, func
    else:
        cell = kernel.func.__closure__[kernel.func.__code__.co_freevars.index("f")]
        old, cell.cell_contents = cell.cell_contents, func
    return old


def redefine_helper() -> None:
    """Define a ``@wp.func`` in this module that writes ``x``, and bind ``helper`` to it (as a notebook cell that
    redefines a function does)."""
    global helper

    @wp.func
    def overwriting(x: wp.array(dtype=float), i: int) -> float:
        x[i] = 7.0
        return 3.0

    helper = overwriting
