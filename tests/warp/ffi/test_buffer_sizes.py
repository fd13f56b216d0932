"""Every array a launch hands Warp covers exactly the buffer XLA allocated for it, or nothing launches.

The check (`jarp.warp._ffi._buffer_sizes`) compares, once per plan and device, each array's ``array_t`` as jarp
writes it (shape, strides, ndim) with Warp's own element size of the kernel's parameter or struct field, and
with the plan's buffer. Here a wrong plan is planted where the executor reads it (`_executors._plan`), with the
buffers XLA allocates left as traced, so the frame check passes and only this check stands between the plan and
a launch that would read or write past a buffer:

- Warp's element wider than jarp's (the plan's kernel swapped for one whose parameter has vec3 elements), for
  an input, a struct's array field, an in-out argument and a pure output;
- jarp's element wider than Warp's (an `ArgSpec` with the element dims of a vec3 over a float parameter);
- a callable's ``wp.array`` of a planted dtype.

Each must be a `BufferSizeError` naming the module and the parameter (and field), eagerly and under ``jax.jit``,
on both launch paths; a normal launch with vector elements of every kind runs as before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp

from jarp.warp import jax_callable, jax_kernel
from jarp.warp._ffi import _executors, _native
from jarp.warp._ffi._buffer_sizes import BufferSizeError
from jarp.warp._plan._values import Plan
from tests.support import kernels_buffer_sizes as kb

pytestmark = pytest.mark.launch_paths  # also run on the Python launch path (noxfile.py)

N = 5


def _narrow_args() -> tuple[jax.Array, dict[str, Any], jax.Array]:
    a = jnp.arange(N, dtype=jnp.float32)
    s = {"x": jnp.full(N, 0.5, jnp.float32), "k": 2.0}
    b = jnp.ones(N, jnp.float32)
    return a, s, b


@pytest.fixture
def plant(monkeypatch: pytest.MonkeyPatch) -> Callable[[Any, Callable[[Plan], Plan]], None]:
    """``plant(target, change)``: the executor of a plan of ``target`` is built from ``change(plan)`` instead.

    The executors' cache is keyed by plan handle: a plan refused here leaves no executor (and no native
    descriptor) behind, so each call builds it again from the planted plan.
    """
    real = _executors._plan
    changes: dict[int, Callable[[Plan], Plan]] = {}

    def planted(handle: int) -> Plan:
        plan = real(handle)
        change = changes.get(id(plan.target))
        return plan if change is None else change(plan)

    monkeypatch.setattr(_executors, "_plan", planted)
    return lambda target, change: changes.__setitem__(id(target), change)


def _published() -> int:
    native = _native.active()
    return native.published() if native is not None else 0


@pytest.mark.parametrize(
    ("kernel", "param", "field"),
    [
        (kb.wide_a, "a", ""),  # an input
        (kb.wide_s, "s", "s.x"),  # a struct's array field
        (kb.wide_b, "b", ""),  # an in-out argument
        (kb.wide_out, "out", ""),  # a pure output
    ],
    ids=["input", "struct-field", "in-out", "output"],
)
def test_a_wider_warp_element_is_refused(plant: Any, kernel: Any, param: str, field: str) -> None:
    # The plan is traced for float elements (4-byte buffers); the kernel it launches reads vec3 (12 bytes).
    m = jax_kernel(kb.narrow, num_outputs=2, in_out_argnames=("b",))
    plant(kb.narrow, lambda plan: dataclasses.replace(plan, target=kernel))
    published = _published()
    named = rf"kernel {kernel.key!r}\), parameter {param!r}" + (rf", struct field {field!r}" if field else "")
    with pytest.raises(
        BufferSizeError, match=named + r".* vec3f element\(s\) of 12 bytes .*\(20 bytes a batch slice\)"
    ):
        m(*_narrow_args())
    # under jax.jit the error reaches the caller through XLA, with the same message (and nothing crashed); the
    # struct's value field stays static (a traced one would launch a derived kernel, not the planted plan's)
    a, s, b = _narrow_args()
    with pytest.raises(jax.errors.JaxRuntimeError, match=named):
        jax.block_until_ready(jax.jit(lambda a, x, b: m(a, {"x": x, "k": 2.0}, b))(a, s["x"], b))
    assert _published() == published  # never handed to the native handler


def test_a_wider_jarp_element_is_refused(plant: Any) -> None:
    # jarp's spec of the float parameter 'a' planted with a vec3's element dims: its array_t would step 12 bytes
    # an element through a 4-byte-an-element buffer.
    m = jax_kernel(kb.narrow, num_outputs=2, in_out_argnames=("b",))

    def wider(plan: Plan) -> Plan:
        params = tuple(
            dataclasses.replace(p, spec=dataclasses.replace(p.spec, inner_shape=(3,))) if p.spec.name == "a" else p
            for p in plan.params
        )
        return dataclasses.replace(plan, params=params)

    plant(kb.narrow, wider)
    with pytest.raises(BufferSizeError, match=r"kernel 'narrow'\), parameter 'a': jarp would pass strides \[12\]"):
        m(*_narrow_args())


def test_a_callable_array_of_a_planted_dtype_is_refused(plant: Any) -> None:
    c = jax_callable(kb.copy_func, num_outputs=1)

    def wider(plan: Plan) -> Plan:
        params = tuple(
            dataclasses.replace(p, spec=dataclasses.replace(p.spec, dtype=wp.vec3)) if p.spec.name == "a" else p
            for p in plan.params
        )
        return dataclasses.replace(plan, params=params)

    plant(kb.copy_func, wider)
    with pytest.raises(BufferSizeError, match=r"jax_callable\(copy_func\), parameter 'a': .* vec3f element\(s\)"):
        c(jnp.arange(N, dtype=jnp.float32))


def test_a_normal_launch_is_unaffected() -> None:
    m = jax_kernel(kb.vectors, num_outputs=2, in_out_argnames=("b",), enable_backward=True)
    a = np.arange(3 * N, dtype=np.float32).reshape(N, 3)
    x = np.linspace(-1.0, 1.0, 3 * N, dtype=np.float32).reshape(N, 3)
    b = np.ones((N, 3), np.float32)
    want_b, want_out = b + 2.0 * a, np.sum(a * x, axis=1)
    for run in (m, jax.jit(m)):
        got_b, got_out = run(jnp.asarray(a), {"x": jnp.asarray(x), "k": 2.0}, jnp.asarray(b))
        np.testing.assert_allclose(got_b, want_b)
        np.testing.assert_allclose(got_out, want_out, rtol=1e-6)
    # the backward launch hands Warp gradient and adjoint arrays too (the struct field's among them)
    grads = jax.grad(lambda a, x: jnp.sum(m(a, {"x": x, "k": 2.0}, jnp.asarray(b))[1]), argnums=(0, 1))(
        jnp.asarray(a), jnp.asarray(x)
    )
    np.testing.assert_allclose(grads[0], x)
    np.testing.assert_allclose(grads[1], a)
    c = jax_callable(kb.copy_func, num_outputs=1)
    np.testing.assert_array_equal(c(jnp.arange(N, dtype=jnp.float32))[0], np.arange(N, dtype=np.float32))
