"""Reverse mode never writes the caller's arrays: a backward launch that may store into a primal input gets a copy.

Unit: ``jarp/warp/_jax/_adjoint.py`` (`adjoint_plan`), with the judgement of Warp's backward code
(``_plan/_analysis/_generated.backward_written_params`` on ``_upstream/_warp_codegen.CodegenRecord.backward``) and
``_plan/_builder.backward_writes``. Warp's backward entry point runs code the forward checks never see: the replay of
each ``@wp.func`` call, the user's ``@wp.func_grad`` and ``@wp.func_replay`` functions. Where that code may store
into an input, the backward launch must get a private copy of it (the caller's array keeps its value, and the
gradient is Warp's); where it only reads, the launch reads the caller's buffer, with no copy.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp

from jarp.warp import jax_callable, jax_kernel
from jarp.warp._ffi._registry import registry
from jarp.warp._plan._analysis import _generated, _writes
from jarp.warp._plan._values import Plan
from tests.support import kernels_backward_writes as kb
from tests.support.lowered import custom_calls

pytestmark = pytest.mark.launch_paths  # also run on the Python launch path (noxfile.py)

_VALUES = np.arange(1, kb.N + 1, dtype=np.float32) / 4.0

# The kernels whose backward code stores into their input ``a`` (forward: reads it), with the custom function.
_STORING = [kb.storing_gradient, kb.accumulating_gradient, kb.storing_replay]


def _tape_gradient(kernel: wp.Kernel, values: np.ndarray) -> np.ndarray:
    """The gradient of ``sum(out)`` with respect to ``a`` by ``wp.Tape`` on ``wp.launch`` (Warp's own)."""
    a = wp.array(values, dtype=float, device="cpu", requires_grad=True)
    out = wp.zeros(len(values), dtype=float, device="cpu", requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(kernel, dim=len(values), inputs=[a], outputs=[out], device="cpu")
    tape.backward(grads={out: wp.ones(len(values), dtype=float, device="cpu")})
    return a.grad.numpy()


def _adjoint_plan(f: Any, *args: Any) -> Plan:
    """The plan of the one backward launch in ``f``'s lowered program."""
    handles = [call["plan"] for call in custom_calls(jax.jit(f).trace(*args).lower().as_text())]
    (adjoint,) = [p for p in (registry.plan(h) for h in handles if h is not None) if p.adjoint]
    return adjoint


def _primal_of(plan: Plan, name: str) -> Any:
    return next(p.primal for p in plan.params if p.spec.name == name)


@pytest.mark.parametrize("kernel", _STORING, ids=lambda k: k.key)
def test_a_backward_pass_storing_into_an_input_leaves_the_callers_array(kernel: wp.Kernel) -> None:
    f = jax_kernel(kernel, enable_backward=True)
    x = jnp.asarray(_VALUES.copy())
    before = np.array(x)

    def loss(a: jax.Array) -> jax.Array:
        return jnp.sum(f(a)[0])

    grad = jax.jit(jax.grad(loss))(x)
    np.testing.assert_array_equal(np.asarray(x), before)  # the backward launch stored into a copy
    np.testing.assert_allclose(np.asarray(grad), _tape_gradient(kernel, _VALUES), rtol=1e-6)
    # the copy: one more result, aliased to the input and discarded
    plan = _adjoint_plan(jax.grad(loss), x)
    primal = _primal_of(plan, "a")
    assert primal.source == "result"
    assert primal.index in plan.protected
    assert (0, primal.index) in plan.aliases


def test_a_replayed_function_storing_into_an_in_out_array_leaves_the_callers_array() -> None:
    # Warp's backward entry point calls bump() again on the value of `a` from before the launch: the caller's
    f = jax_kernel(kb.bump_in_out, num_outputs=2, in_out_argnames=("a",), enable_backward=True)
    x = jnp.asarray(_VALUES.copy())
    before = np.array(x)

    def loss(a: jax.Array) -> jax.Array:
        return jnp.sum(f(a)[1])

    grad = jax.jit(jax.grad(loss))(x)
    np.testing.assert_array_equal(np.asarray(x), before)
    np.testing.assert_allclose(np.asarray(grad), 2.0 * (_VALUES + 1.0), rtol=1e-6)  # d/da (a + 1)^2


def test_a_custom_gradient_that_only_reads_its_input_gets_no_copy() -> None:
    f = jax_kernel(kb.reading_gradient, enable_backward=True)
    x = jnp.asarray(_VALUES.copy())

    def loss(a: jax.Array) -> jax.Array:
        return jnp.sum(f(a)[0])

    grad = jax.jit(jax.grad(loss))(x)
    np.testing.assert_allclose(np.asarray(grad), _tape_gradient(kb.reading_gradient, _VALUES), rtol=1e-6)
    plan = _adjoint_plan(jax.grad(loss), x)
    assert _primal_of(plan, "a").source == "operand"  # the caller's buffer, read in place
    assert plan.protected == ()


def test_a_callables_backward_replay_writes_a_copy_of_a_protected_input() -> None:
    # The forward call gives the function a private copy of `a` (protect_inputs); so does its taped replay
    f = jax_callable(kb.storing_callable, num_outputs=1, enable_backward=True)
    x = jnp.asarray(_VALUES.copy())
    before = np.array(x)

    def loss(a: jax.Array) -> jax.Array:
        return jnp.sum(f(a)[0])

    jax.jit(jax.grad(loss))(x)
    np.testing.assert_array_equal(np.asarray(x), before)
    plan = _adjoint_plan(jax.grad(loss), x)
    assert _primal_of(plan, "a").index in plan.protected


@pytest.mark.parametrize(
    ("kernel", "forward", "backward"),
    [
        (kb.storing_gradient, ("out",), ("a",)),
        (kb.accumulating_gradient, ("out",), ("a",)),
        (kb.storing_replay, ("out",), ("a",)),
        (kb.bump_in_out, ("a", "out"), ("a",)),
        (kb.reading_gradient, ("out",), ()),
        (kb.storing_field_gradient, ("out",), ()),  # (a struct field: `backward_write_sites`, tested above)
        (kb.reading_field, ("out",), ()),
    ],
    ids=lambda v: v.key if isinstance(v, wp.Kernel) else None,
)
def test_the_backward_code_is_judged_apart_from_the_forward_code(
    kernel: wp.Kernel, forward: tuple[str, ...], backward: tuple[str, ...]
) -> None:
    record = _writes.codegen_record(kernel)
    # a custom gradient shares its function's C++ name: the forward judgement must read the function's own code
    assert _generated.written_params(record.functions) == forward
    assert _writes.written_inputs(kernel, ("a",)) == tuple(n for n in forward if n == "a")
    assert _generated.backward_written_params(record.functions, record.backward) == backward


def test_a_struct_field_the_backward_code_may_write_is_refused_naming_the_gradient() -> None:
    # The launch reads a struct's array fields from the caller's buffers: no copy to give, so refused when traced
    f = jax_kernel(kb.storing_field_gradient, enable_backward=True)
    x = jnp.asarray(_VALUES.copy())
    before = np.array(x)
    with pytest.raises(
        ValueError, match=r"struct field 's\.arr'.*field_scaled_grad, the @wp\.func_grad of field_scaled"
    ):
        jax.jit(jax.grad(lambda a: jnp.sum(f({"arr": a, "k": 2.0})[0])))(x)
    np.testing.assert_array_equal(np.asarray(x), before)


def test_a_struct_field_the_backward_code_only_reads_is_differentiated() -> None:
    f = jax_kernel(kb.reading_field, enable_backward=True)
    grad = jax.jit(jax.grad(lambda a: jnp.sum(f({"arr": a, "k": 2.0})[0])))(jnp.asarray(_VALUES))
    np.testing.assert_allclose(np.asarray(grad), np.full(kb.N, 3.0), rtol=1e-6)  # d/da (2 a + a)
