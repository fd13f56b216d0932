"""Errors from inside a call: they name the module, keep their type where JAX allows it, and interrupts stay interrupts."""

from __future__ import annotations

import contextlib
import gc
import re
import signal
import time
import weakref
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp

from jarp.warp import jax_callable, jax_kernel
from jarp.warp._ffi import _errors, _executors
from tests.support import kernels as k

pytestmark = pytest.mark.launch_paths  # also run on the Python launch path (noxfile.py)


class _Custom(Exception):
    """A user's own exception type (weak-referenceable, unlike the built-in ones)."""


def first_model_step(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    raise ValueError("first step failed")


def second_model_step(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    raise _Custom("second step failed")


def interrupted_step(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    raise KeyboardInterrupt


def test_eager_call_raises_the_original_exception_naming_the_callable() -> None:
    with pytest.raises(ValueError, match="first step failed") as info:
        jax_callable(first_model_step)(jnp.ones(3, jnp.float32))
    assert "(raised inside jax_callable(first_model_step))" in info.value.__notes__
    # the traceback reaches into the user's function
    assert info.traceback[-1].name == "first_model_step"
    with pytest.raises(_Custom, match="second step failed") as info:
        jax_callable(second_model_step)(jnp.ones(3, jnp.float32))
    assert "(raised inside jax_callable(second_model_step))" in info.value.__notes__


def test_under_jit_the_error_names_the_callable_its_type_and_traceback() -> None:
    x = jnp.ones(3, jnp.float32)
    first, second = jax_callable(first_model_step), jax_callable(second_model_step)

    def model(x: jax.Array) -> jax.Array:
        return second(first(x)[0] * 0 + x)[0]

    with pytest.raises(jax.errors.JaxRuntimeError) as info:
        jax.jit(model)(x).block_until_ready()
    message = str(info.value)
    assert re.search(r"jarp error \d+: jax_callable\(first_model_step\) raised ValueError: first step failed", message)
    assert "Traceback" in message
    assert 'raise ValueError("first step failed")' in message
    assert "second_model_step" not in message


def test_under_vmap_and_grad_outside_jit_the_original_type_is_kept() -> None:
    xs = jnp.ones((2, 3), jnp.float32)
    with pytest.raises(ValueError, match="first step failed") as info:
        jax.vmap(jax_callable(first_model_step))(xs)
    assert "(raised inside jax_callable(first_model_step))" in info.value.__notes__
    with pytest.raises(ValueError, match="first step failed"):
        jax.grad(lambda x: jax_callable(first_model_step, enable_backward=True)(x)[0].sum())(xs[0])


def test_an_exception_whose_str_fails_still_becomes_an_error() -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no str")

    def unprintable_step(a: wp.array(dtype=float), out: wp.array(dtype=float)):
        raise Unprintable()

    with pytest.raises(jax.errors.JaxRuntimeError, match=r"raised Unprintable: <exception str\(\) failed>"):
        jax.jit(jax_callable(unprintable_step))(jnp.ones(3, jnp.float32)).block_until_ready()
    with pytest.raises(Unprintable):
        jax_callable(unprintable_step)(jnp.ones(3, jnp.float32))


def test_kernel_errors_name_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    m = jax_kernel(k.triple_kernel)
    x = jnp.arange(3, dtype=jnp.float32)
    np.testing.assert_allclose(m(x)[0], 3 * np.arange(3))

    def failing_prepare(self: Any, plan: Any, device: Any) -> None:
        raise RuntimeError("launch failed")

    # A plan's executor is prepared by Python at its first call on a device (on both launch paths);
    # a failure there is the error a kernel call can raise. Fresh shapes make fresh plans (sizes no other test
    # uses: an earlier test's plan of the same shape would already have its executor).
    monkeypatch.setattr(_executors.CpuKernelExecutor, "__init__", failing_prepare)
    y = jnp.arange(23, dtype=jnp.float32)
    with pytest.raises(RuntimeError, match="launch failed") as info:
        m(y)
    assert "(raised inside jax_kernel(triple_kernel))" in info.value.__notes__
    with pytest.raises(jax.errors.JaxRuntimeError, match=r"jax_kernel\(triple_kernel\) raised RuntimeError"):
        jax.jit(lambda x: m(x)[0] + 1)(jnp.arange(29, dtype=jnp.float32)).block_until_ready()
    monkeypatch.undo()
    np.testing.assert_allclose(m(y)[0], 3 * np.arange(23))  # a failed preparation is not cached
    np.testing.assert_allclose(m(x)[0], 3 * np.arange(3))


def test_the_same_exception_object_raised_twice_gets_one_note() -> None:
    error = _Custom("again")

    def raise_it(a: wp.array(dtype=float), out: wp.array(dtype=float)):
        raise error

    for _ in range(2):
        with pytest.raises(_Custom):
            jax_callable(raise_it)(jnp.ones(2, jnp.float32))
    assert (
        error.__notes__.count(
            "(raised inside jax_callable(test_the_same_exception_object_raised_twice_gets_one_note.<locals>.raise_it))"
        )
        == 1
    )


def test_unclaimed_exceptions_are_bounded_and_claimed_ones_released() -> None:
    caught: list[weakref.ref[_Custom]] = []

    def leaky(a: wp.array(dtype=float), out: wp.array(dtype=float)):
        e = _Custom("leak")
        caught.append(weakref.ref(e))
        raise e

    f = jax.jit(jax_callable(leaky))
    for _ in range(3 * _errors._KEEP):
        with pytest.raises(jax.errors.JaxRuntimeError):
            f(jnp.ones(2, jnp.float32)).block_until_ready()
    assert len(_errors._pending) <= _errors._KEEP
    gc.collect()
    assert sum(r() is not None for r in caught) <= _errors._KEEP
    caught.clear()
    with pytest.raises(_Custom):
        jax_callable(leaky)(jnp.ones(2, jnp.float32))
    gc.collect()
    assert caught[0]() is None  # the eager path took it out of the table


def _check_view(view: wp.array) -> None:
    raise LookupError(f"no element {view.shape[0]}")


def holding_step(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    arrays = [a, out]
    try:
        _check_view(a[1:])
    except LookupError as e:
        raise ValueError(f"failed holding {len(arrays)} arrays") from e


def _frames(exc: BaseException) -> list[Any]:
    frames, tb = [], exc.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    return frames


def _array_locals(exc: BaseException | None) -> list[str]:
    """The frame locals that are (or hold) a ``wp.array`` in the tracebacks of ``exc`` and its causes."""
    found = []
    while exc is not None:
        found += [
            f"{frame.f_code.co_name}: {name}"
            for frame in _frames(exc)
            for name, value in frame.f_locals.items()
            if any(isinstance(v, wp.array) for v in (value if isinstance(value, (list, tuple)) else (value,)))
        ]
        exc = exc.__cause__
    return found


def test_kept_exceptions_keep_no_arrays_of_the_calls_freed_buffers() -> None:
    # The call's buffers are XLA's, freed or reused once it returns: a kept exception whose frames still held
    # wp.arrays over them would let a debugger (or a traceback printer showing locals) read that memory.
    x = jnp.ones(3, jnp.float32)
    with pytest.raises(jax.errors.JaxRuntimeError, match="failed holding 2 arrays") as info:
        jax.jit(jax_callable(holding_step))(x).block_until_ready()
    kept = _errors.original(info.value)  # what an eager call would have re-raised
    assert isinstance(kept, ValueError)
    assert _frames(kept)[-1].f_code.co_name == "holding_step"  # the traceback still reaches the function
    assert _frames(kept.__cause__)[-1].f_code.co_name == "_check_view"
    assert _array_locals(kept) == []
    with pytest.raises(ValueError, match="failed holding 2 arrays") as raised:
        jax_callable(holding_step)(x)
    assert raised.traceback[-1].name == "holding_step"
    assert "(raised inside jax_callable(holding_step))" in raised.value.__notes__
    assert _array_locals(raised.value) == []


def test_a_nested_failing_call_is_not_mistaken_for_the_outer_one() -> None:
    inner = jax.jit(jax_callable(first_model_step))

    def outer_step(a: wp.array(dtype=float), out: wp.array(dtype=float)):
        inner(jnp.ones(2, jnp.float32)).block_until_ready()  # its JaxRuntimeError, with its token, escapes

    with pytest.raises(jax.errors.JaxRuntimeError, match="first step failed") as info:
        jax_callable(outer_step)(jnp.ones(2, jnp.float32))
    assert f"(raised inside jax_callable({outer_step.__qualname__}))" in info.value.__notes__


def test_a_foreign_runtime_error_is_not_mistaken_for_a_jarp_one() -> None:
    assert _errors.original(RuntimeError("INTERNAL: something else")) is None
    assert _errors.original(RuntimeError("UNKNOWN: jarp error 999999999: x raised E: y")) is None


def test_keyboard_interrupt_in_an_eager_call_is_a_keyboard_interrupt() -> None:
    with pytest.raises(KeyboardInterrupt) as info:
        jax_callable(interrupted_step)(jnp.ones(3, jnp.float32))
    assert "(raised inside jax_callable(interrupted_step))" in info.value.__notes__
    time.sleep(0.05)  # no second interrupt follows


@pytest.fixture
def python_sigint_handler() -> Any:
    """Python's own SIGINT handler, as in any interactive process.

    A process started in the background by a shell without job control inherits SIGINT ignored, and then Python
    has no handler that an interrupt can be delivered to (``_thread.interrupt_main`` does nothing), so these tests
    would measure the launcher, not jarp.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _run_until_interrupted(call: Any) -> None:
    """Run ``call`` (its runtime error, if it raises one before the interrupt, ignored), then wait up to a second."""
    with contextlib.suppress(jax.errors.JaxRuntimeError):
        call()
    for _ in range(100):
        time.sleep(0.01)


def test_keyboard_interrupt_under_jit_still_interrupts(python_sigint_handler: None) -> None:
    # XLA raises every FFI error as a JaxRuntimeError; the interrupt is re-raised in the main
    # thread as soon as it has left jarp's callback (at the call, or at the next bytecode after it).
    f = jax.jit(jax_callable(interrupted_step))
    with pytest.raises(KeyboardInterrupt):
        _run_until_interrupted(lambda: f(jnp.ones(3, jnp.float32)).block_until_ready())
    time.sleep(0.05)


def test_keyboard_interrupt_under_jit_is_a_cancelled_error_naming_the_callable() -> None:
    # The interrupt usually fires before the JaxRuntimeError reaches Python code that could look at it, so its
    # message is read with a SIGINT handler that records the interrupt instead of raising it.
    f = jax.jit(jax_callable(interrupted_step))
    interrupts: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: interrupts.append(signum))
    try:
        with pytest.raises(jax.errors.JaxRuntimeError) as info:
            f(jnp.ones(3, jnp.float32)).block_until_ready()
        for _ in range(100):  # the interrupt is still delivered to the main thread
            if interrupts:
                break
            time.sleep(0.01)
    finally:
        signal.signal(signal.SIGINT, previous)
    message = str(info.value)
    assert re.search(r"CANCELLED: jarp error \d+: jax_callable\(interrupted_step\) was interrupted", message), message
    assert interrupts == [signal.SIGINT]


def test_keyboard_interrupt_on_an_xla_worker_thread_still_interrupts(python_sigint_handler: None) -> None:
    # A call whose input is still being computed runs later, on one of XLA's threads.
    big = jnp.ones((1500, 1500), jnp.float32)
    slow = jax.jit(lambda m: (m @ m @ m)[0, :3])
    m = jax_callable(interrupted_step)
    with pytest.raises(KeyboardInterrupt):
        _run_until_interrupted(lambda: m(slow(big))[0].block_until_ready())
    time.sleep(0.05)
