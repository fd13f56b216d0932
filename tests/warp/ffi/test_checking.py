"""Checking mode: every CPU launch verifies the plan's verdicts (inputs unchanged, skipped fills, split launches).

The planted bugs force one verdict of jarp's analysis wrong (a write judged absent, an accumulating kernel judged
race-free, an output judged overwritten everywhere): each must raise in checking mode, and (where the effect is
observable) do its damage without it, so the plant is real.
"""

from __future__ import annotations

from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp

import jarp.warp
from jarp.warp._ffi import _checking, _executors
from jarp.warp._plan import _builder
from jarp.warp._plan._analysis import _races, _writes
from tests.support import kernels_geometry as kg

N = 64


def _mode(on: bool) -> Iterator[None]:
    previous = jarp.warp.checking_mode()
    jarp.warp.set_checking_mode(on)
    try:
        yield
    finally:
        jarp.warp.set_checking_mode(previous)


@pytest.fixture
def checking() -> Iterator[None]:
    yield from _mode(True)


@pytest.fixture
def not_checking() -> Iterator[None]:
    yield from _mode(False)


@wp.kernel
def scaled(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = 2.0 * x[i]


@wp.kernel
def summed(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(y, 0, x[i])


@wp.kernel
def bumped(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = y[i] + x[i]


@wp.kernel
def squared(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i] * x[i]


def _checked_executors() -> list[object]:
    return [e for e in _executors.executors.values() if isinstance(e, _checking.CheckedCpuKernelExecutor)]


def test_verdicts_that_hold_pass_in_checking_mode(checking: None) -> None:
    x = jnp.arange(N, dtype=jnp.float32)
    (y,) = jax.jit(jarp.warp.jax_kernel(scaled, num_outputs=1))(x)  # a skipped fill, a race-free split
    np.testing.assert_array_equal(np.asarray(y), 2.0 * np.arange(N))
    (s,) = jax.jit(jarp.warp.jax_kernel(summed, num_outputs=1))(x)  # a privatised accumulation
    assert float(s[0]) == pytest.approx(float(np.arange(N).sum()))
    (b,) = jax.jit(jarp.warp.jax_kernel(bumped, in_out_argnames=("y",)))(x, jnp.ones(N, jnp.float32))
    np.testing.assert_array_equal(np.asarray(b), np.arange(N) + 1.0)
    batched = jax.jit(jax.vmap(jarp.warp.jax_kernel(scaled, num_outputs=1)))(jnp.stack([x, -x]))[0]
    np.testing.assert_array_equal(np.asarray(batched), [2.0 * np.arange(N), -2.0 * np.arange(N)])
    grad = jax.jit(jax.grad(lambda v: jarp.warp.jax_kernel(squared, num_outputs=1, enable_backward=True)(v)[0].sum()))(
        x
    )
    np.testing.assert_allclose(np.asarray(grad), 2.0 * np.arange(N))
    assert _checked_executors(), "the launches did not go through the checked executor"


def test_every_checked_call_comes_to_the_checked_executor(checking: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # no launch descriptor for the native handler: a kernel's calls and those of a call given a mesh (a callable the
    # handler could otherwise run itself) are each checked, every time
    runs: list[str] = []
    for cls in (_checking.CheckedCpuKernelExecutor, _checking.CheckedCpuCallableExecutor):
        original = cls.run

        def counted(self: object, frame: int, original: object = original, name: str = cls.__name__) -> None:
            runs.append(name)
            original(self, frame)  # type: ignore[operator]

        monkeypatch.setattr(cls, "run", counted)
    x = jnp.arange(N, dtype=jnp.float32)
    f = jax.jit(jarp.warp.jax_kernel(scaled, num_outputs=1))
    points = jnp.asarray([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    queries = jnp.asarray([[0.2, 0.2, 1.0], [0.5, 0.1, -1.0]])
    g = jax.jit(
        lambda p: jarp.warp.jax_kernel(kg.closest_distance)(jarp.warp.Mesh(points=p, indices=[[0, 1, 2]]), queries)[0]
    )
    for k in range(3):
        f(x + k)[0].block_until_ready()
        lifted = points.at[:, 2].add(float(k))  # the triangle raised by k: distances |1 - k|, 1 + k
        np.testing.assert_allclose(np.asarray(g(lifted)), [abs(1.0 - k), 1.0 + k], rtol=1e-6, atol=1e-6)
    assert runs.count("CheckedCpuKernelExecutor") == 3
    assert runs.count("CheckedCpuCallableExecutor") == 3


def test_toggling_rebuilds_the_executors(not_checking: None) -> None:
    f = jax.jit(jarp.warp.jax_kernel(scaled, num_outputs=1))
    x = jnp.arange(N, dtype=jnp.float32)
    f(x)[0].block_until_ready()
    assert not _checked_executors()
    jarp.warp.set_checking_mode(True)
    f(x)[0].block_until_ready()  # the same compiled program: its next call is checked
    assert _checked_executors()
    jarp.warp.set_checking_mode(False)
    f(x)[0].block_until_ready()
    assert not _checked_executors()


def test_the_environment_variable_and_argument_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    previous = _checking._enabled
    try:
        for raw, expected in (("1", True), ("0", False), ("", False)):
            monkeypatch.setenv(_checking.ENV, raw)
            monkeypatch.setattr(_checking, "_enabled", None)
            assert jarp.warp.checking_mode() is expected
        monkeypatch.setenv(_checking.ENV, "yes")
        monkeypatch.setattr(_checking, "_enabled", None)
        with pytest.raises(ValueError, match="JARP_CHECKING='yes' must be 1"):
            jarp.warp.checking_mode()
    finally:
        _checking._enabled = previous
    with pytest.raises(TypeError, match="on must be True or False"):
        jarp.warp.set_checking_mode(1)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------------------------------------------
# Planted analysis bugs


@wp.kernel
def writes_x(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i]
    x[i] = 0.0


def test_a_write_judged_absent_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_writes, "written_inputs", lambda kernel, names: ())  # the plant: "writes nothing"
    x = jnp.arange(1, N + 1, dtype=jnp.float32)
    previous = jarp.warp.checking_mode()
    try:
        jarp.warp.set_checking_mode(False)
        kernel = jarp.warp.jax_kernel(writes_x, num_outputs=1)
        (y,) = jax.jit(kernel)(x)
        y.block_until_ready()
        assert float(jnp.abs(x).sum()) == 0.0  # the plant is real: the caller's array was zeroed
        x = jnp.arange(1, N + 1, dtype=jnp.float32)
        jarp.warp.set_checking_mode(True)
        with pytest.raises(Exception, match=r"checking mode: kernel 'writes_x' wrote its input 'x'"):
            jax.jit(kernel)(x)[0].block_until_ready()
    finally:
        jarp.warp.set_checking_mode(previous)


@wp.kernel
def counts(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[0] = y[0] + x[i]  # every thread the same element: not race-free


def test_a_race_free_verdict_forced_on_an_accumulating_kernel_raises(
    monkeypatch: pytest.MonkeyPatch, checking: None
) -> None:
    original = _races.split_proofs

    def planted(*args: object, **kwargs: object) -> _races.SplitProofs:
        proofs = original(*args, **kwargs)  # type: ignore[arg-type]
        return _races.SplitProofs(True, ()) if args[1] in (counts, summed) else proofs

    monkeypatch.setattr(_races, "split_proofs", planted)
    x = jnp.ones(N, dtype=jnp.float32)
    for kernel in (counts, summed):
        f = jax.jit(jarp.warp.jax_kernel(kernel, in_out_argnames=("y",)))
        match = rf"kernel '{kernel.key}' (wrote the same elements of|gave different values in) 'y'"
        with pytest.raises(Exception, match=match):
            f(x, jnp.zeros(1, jnp.float32)).block_until_ready()


@wp.kernel
def half_written(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    if i % 2 == 0:
        y[i] = x[i]


@wp.kernel
def reads_output(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = y[i] + x[i]


def test_a_fill_skipped_wrongly_raises(monkeypatch: pytest.MonkeyPatch, checking: None) -> None:
    monkeypatch.setattr(_builder, "_zero_filled", lambda *args, **kwargs: ())  # the plant: "overwritten everywhere"
    x = jnp.ones(N, dtype=jnp.float32)
    for kernel in (half_written, reads_output):
        with pytest.raises(Exception, match=rf"kernel '{kernel.key}' left elements of its output 'y' unwritten"):
            jax.jit(jarp.warp.jax_kernel(kernel, num_outputs=1))(x)[0].block_until_ready()


def test_a_callable_writing_its_input_raises(checking: None) -> None:
    def pokes(x: wp.array(dtype=float), y: wp.array(dtype=float)) -> None:
        wp.launch(scaled, dim=x.shape, inputs=[x], outputs=[y], device=x.device)
        x.numpy()[0] = 7.0  # through a NumPy view of the buffer: nothing jarp can see

    f = jax.jit(jarp.warp.jax_callable(pokes, num_outputs=1, protect_inputs=False))  # the user's promise
    with pytest.raises(Exception, match=r"checking mode: function 'pokes' wrote its input 'x', which jax_callable"):
        f(jnp.ones(N, dtype=jnp.float32))[0].block_until_ready()
