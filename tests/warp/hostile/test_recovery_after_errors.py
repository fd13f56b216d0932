"""An adversarial test of the public API: errors and failures must leave no wrong result, no crash, no stale state.

Each test plays a hostile or unlucky user: functions that raise (any type, on some calls only), bad call options,
failures in threads, zero-size inputs, traces that fail half-way. After every failure the same modules, and fresh
ones, must still give the right answer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp

from jarp.warp import jax_callable, jax_kernel
from jarp.warp._ffi import _registry
from tests.support import kernels as k


class _Failure(Exception):
    pass


class _FailureWithArgs(Exception):
    def __init__(self, code: int, detail: dict[str, int]) -> None:
        super().__init__(code, detail)
        self.code = code


_EXCEPTIONS: list[BaseException] = [
    ValueError("value"),
    TypeError("type"),
    ZeroDivisionError("division"),
    KeyError("key"),
    IndexError("index"),
    AssertionError("assertion"),
    NotImplementedError("not implemented"),
    MemoryError("memory"),
    RecursionError("recursion"),
    RuntimeError("runtime"),
    _Failure("custom"),
    _FailureWithArgs(7, {"a": 1}),
    Exception(),
    ExceptionGroup("group", [ValueError("inner")]),
]


def _make_raising(exc: BaseException, when: Callable[[int], bool] = lambda n: True) -> tuple[Any, list[int]]:
    """A callable tripling its input that raises ``exc`` on the calls ``when(n)`` selects (n counts from 1)."""
    calls = [0]

    def triple_or_fail(a: wp.array(dtype=float), out: wp.array(dtype=float)):
        calls[0] += 1
        if when(calls[0]):
            raise exc
        wp.launch(k.triple_kernel, dim=a.shape, inputs=[a], outputs=[out], device=a.device)

    return triple_or_fail, calls


def _x(n: int = 5) -> jax.Array:
    return jnp.arange(n, dtype=jnp.float32)


@pytest.mark.parametrize("exc", _EXCEPTIONS, ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("mode", ["eager", "jit", "vmap", "grad"])
def test_exceptions_of_any_type_surface_naming_the_callable(exc: BaseException, mode: str) -> None:
    func, _ = _make_raising(exc)
    m = jax_callable(func, enable_backward=True)
    x = _x()
    run = {
        "eager": lambda: m(x)[0],
        "jit": lambda: jax.jit(lambda x: m(x)[0])(x),
        "vmap": lambda: jax.vmap(m)(jnp.stack([x, x]))[0],
        "grad": lambda: jax.grad(lambda x: m(x)[0].sum())(x),
    }[mode]
    if mode == "jit":
        with pytest.raises(jax.errors.JaxRuntimeError) as info:
            jax.block_until_ready(run())
        assert f": jax_callable({func.__qualname__}) raised {type(exc).__name__}" in str(info.value)
    else:
        with pytest.raises(type(exc)) as info:
            jax.block_until_ready(run())
        assert info.value is exc
        assert f"(raised inside jax_callable({func.__qualname__}))" in exc.__notes__


def test_a_callable_failing_on_its_second_call_only() -> None:
    func, calls = _make_raising(_Failure("second"), when=lambda n: n == 2)
    m = jax_callable(func)
    f = jax.jit(lambda x: m(x)[0])
    x = _x()
    np.testing.assert_allclose(m(x)[0], 3 * np.asarray(x))
    with pytest.raises(_Failure, match="second"):
        m(x)
    np.testing.assert_allclose(m(x)[0], 3 * np.asarray(x))
    np.testing.assert_allclose(f(x), 3 * np.asarray(x))
    assert calls[0] == 4


def test_repeated_failures_then_success_eager_and_jit() -> None:
    func, calls = _make_raising(_Failure("not yet"), when=lambda n: n <= 6)
    m = jax_callable(func)
    f = jax.jit(lambda x: m(x)[0] + 1)
    x = _x()
    for _ in range(3):
        with pytest.raises(_Failure):
            m(x)
        # JaxRuntimeError before the jitted function first succeeds, ValueError after (jaxlib's fast path)
        with pytest.raises((jax.errors.JaxRuntimeError, ValueError), match="raised _Failure: not yet"):
            f(x).block_until_ready()
    np.testing.assert_allclose(m(x)[0], 3 * np.asarray(x))
    np.testing.assert_allclose(f(x), 3 * np.asarray(x) + 1)
    assert calls[0] == 8


def test_a_jitted_function_failing_after_succeeding_names_the_callable() -> None:
    func, _ = _make_raising(_Failure("late"), when=lambda n: n >= 2)
    f = jax.jit(lambda x: jax_callable(func)(x)[0])
    x = _x()
    np.testing.assert_allclose(f(x), 3 * np.asarray(x))
    for _ in range(3):
        with pytest.raises((jax.errors.JaxRuntimeError, ValueError), match=r"jax_callable\(.*triple_or_fail\)"):
            f(x).block_until_ready()


def test_other_modules_keep_working_after_an_error() -> None:
    func, _ = _make_raising(_Failure("boom"))
    bad = jax_callable(func)
    good = jax_kernel(k.triple_kernel)
    x = _x()
    for _ in range(3):
        with pytest.raises(_Failure):
            bad(x)
        np.testing.assert_allclose(good(x)[0], 3 * np.asarray(x))
        np.testing.assert_allclose(jax.jit(lambda x: good(x)[0])(x), 3 * np.asarray(x))


def test_bad_launch_dims_at_call_are_refused_and_leave_no_stale_state() -> None:
    m = jax_kernel(k.triple_kernel)
    x = _x()
    before = len(_registry.registry)
    for dims in (-1, (2, -3), "five", (1.5,), (), (1 << 62, 1 << 62)):
        with pytest.raises((TypeError, ValueError), match="launch_dims"):
            m(x, launch_dims=dims)
    assert len(_registry.registry) == before
    np.testing.assert_allclose(m(x)[0], 3 * np.asarray(x))
    np.testing.assert_allclose(m(x, launch_dims=3)[0][:3], 3 * np.asarray(x)[:3])


def test_bad_output_dims_at_call_are_refused_and_the_module_keeps_working() -> None:
    m = jax_callable(_make_raising(_Failure(), when=lambda n: False)[0])
    x = _x()
    for dims in (-1, "x", {"nope": 3}, (2.5,)):
        with pytest.raises((TypeError, ValueError), match="output_dims"):
            m(x, output_dims=dims)
    np.testing.assert_allclose(m(x)[0], 3 * np.asarray(x))


def test_module_reuse_across_threads_after_an_error() -> None:
    func, _ = _make_raising(_Failure("thread"), when=lambda n: n == 1)
    m = jax_callable(func)
    f = jax.jit(lambda x: m(x)[0])
    x = _x(64)
    with pytest.raises(_Failure):
        m(x)
    wrong, errors = [], []

    def work(t: int) -> None:
        xt = x + t
        try:
            for _ in range(20):
                for out in (m(xt)[0], f(xt)):
                    if not np.array_equal(np.asarray(out), 3 * np.asarray(xt)):
                        wrong.append(t)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert not wrong


def test_errors_in_threads_reach_their_own_thread() -> None:
    # Each thread's callable fails with its own exception; no thread receives another's.
    received: dict[int, BaseException] = {}
    barrier = threading.Barrier(4)

    def work(t: int) -> None:
        exc = _FailureWithArgs(t, {})
        func, _ = _make_raising(exc)
        func.__qualname__ = f"fail_in_thread_{t}"
        m = jax_callable(func)
        barrier.wait()
        for _ in range(10):
            try:
                m(_x())
            except BaseException as e:
                received[t] = e
                if e is not exc:
                    return

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(received) == [0, 1, 2, 3]
    for t, e in received.items():
        assert isinstance(e, _FailureWithArgs)
        assert e.code == t
        assert f"(raised inside jax_callable(fail_in_thread_{t}))" in e.__notes__


@pytest.mark.parametrize("mode", ["eager", "jit", "vmap"])
def test_zero_size_inputs_into_callables(mode: str) -> None:
    seen = []

    def record(a: wp.array(dtype=float), out: wp.array(dtype=float)):
        seen.append(a.shape)
        wp.launch(k.triple_kernel, dim=a.shape, inputs=[a], outputs=[out], device=a.device)

    m = jax_callable(record)
    x = jnp.zeros((0,), jnp.float32)
    if mode == "eager":
        out = m(x)[0]
    elif mode == "jit":
        out = jax.jit(lambda x: m(x)[0])(x)
    else:
        out = jax.vmap(m)(jnp.zeros((3, 0), jnp.float32))[0]
    assert out.shape == ((0,) if mode != "vmap" else (3, 0))
    np.testing.assert_allclose(m(_x())[0], 3 * np.asarray(_x()))


def test_an_exception_while_tracing_leaves_nothing_that_breaks_later_calls() -> None:
    m = jax_kernel(k.triple_kernel)
    x = _x()

    def traced_then_fails(x: jax.Array) -> jax.Array:
        m(x)
        raise _Failure("after the launch was traced")

    for _ in range(3):
        with pytest.raises(_Failure):
            jax.jit(traced_then_fails)(x)
    np.testing.assert_allclose(m(x)[0], 3 * np.asarray(x))
    np.testing.assert_allclose(jax.jit(lambda x: m(x)[0])(x), 3 * np.asarray(x))


def test_a_generic_factory_that_raises_is_retried() -> None:
    attempts = [0]

    def factory(dtype: Any) -> Any:
        attempts[0] += 1
        if attempts[0] == 1:
            raise _Failure("factory not ready")

        def scaled(a: wp.array(dtype=dtype), out: wp.array(dtype=dtype)):
            wp.launch(k.triple_kernel, dim=a.shape, inputs=[a], outputs=[out], device=a.device)

        return scaled

    m = jax_callable(factory, generic=True)
    with pytest.raises(_Failure):
        m(_x())
    np.testing.assert_allclose(m(_x())[0], 3 * np.asarray(_x()))


def test_a_vjp_rule_that_raises_leaves_the_module_usable() -> None:
    fail = [True]

    def rule(x: jax.Array, cotangent: jax.Array) -> Any:
        if fail[0]:
            raise _Failure("rule")
        return (3 * cotangent,)

    m = jax_kernel(k.triple_kernel, vjp=rule)
    x = _x()
    with pytest.raises(_Failure, match="rule"):
        jax.grad(lambda x: m(x)[0].sum())(x)
    fail[0] = False
    np.testing.assert_allclose(jax.grad(lambda x: m(x)[0].sum())(x), np.full(5, 3.0))
