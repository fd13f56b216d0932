"""Judgements tied to the code Warp generates: a name a kernel's code resolves, rebound after jarp judged it.

A kernel calls a ``@wp.func`` by a name Warp resolves when it builds the kernel (a module global, a module attribute,
a closure cell; `tests/support/rebinding.py`). Rebound to other code, the kernel's Warp hash changes (jarp hashes it
afresh where Warp keeps an older hash), and with it every judgement jarp draws from the code (what it writes, whether
its CPU launch may be split, which outputs it fills) and the plan: a new trace judges the new code, and an executable
traced before never launches a build of the new code under the old judgements. Judging costs a hash per plan and per
load, none per call.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp

from jarp.warp import jax_kernel
from jarp.warp._ffi._registry import registry
from jarp.warp._plan._analysis import _writes
from jarp.warp._plan._content import ContentError, content_text, rebuild
from jarp.warp._upstream import _warp_kernels
from tests.support import rebinding as rb
from tests.support import rebinding_helpers as helpers

N = 4
KERNELS = [rb.by_global, rb.by_attribute, rb.by_closure]
_WRITES_X = r"writes to input\(s\) \['x'\]"


def _key(v: object) -> str | None:
    return getattr(v, "key", None)


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    """Every rebinding a test makes is undone after it."""
    cell = rb.by_closure.func.__closure__[rb.by_closure.func.__code__.co_freevars.index("f")]
    saved = rb.helper, helpers.helper, cell.cell_contents
    yield
    rb.helper, helpers.helper, cell.cell_contents = saved


def _warp_launch(kernel: wp.Kernel, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` after ``wp.launch`` of ``kernel`` as it builds now."""
    xa = wp.array(x, dtype=float, device="cpu")
    ya = wp.zeros(len(x), dtype=float, device="cpu")
    wp.launch(kernel, dim=len(x), inputs=[xa], outputs=[ya], device="cpu")
    return xa.numpy(), ya.numpy()


@pytest.mark.parametrize("kernel", KERNELS, ids=_key)
def test_the_write_verdict_follows_the_code_the_name_reaches(kernel: wp.Kernel) -> None:
    assert _writes.written_inputs(kernel, ("x", "y")) == ("y",)
    old = rb.rebind(kernel, helpers.overwrite)  # a bare rebinding: Warp keeps the module's hash
    assert _writes.written_inputs(kernel, ("x", "y")) == ("x", "y")
    rb.rebind(kernel, old)
    assert _writes.written_inputs(kernel, ("x", "y")) == ("y",)


@pytest.mark.parametrize("kernel", KERNELS, ids=_key)
def test_a_trace_after_a_rebinding_to_a_writer_is_refused(kernel: wp.Kernel) -> None:
    m = jax_kernel(kernel)
    x = jnp.arange(N, dtype=jnp.float32)
    (y,) = jax.jit(m)(x)
    np.testing.assert_array_equal(y, 2.0 * np.arange(N))
    rb.rebind(kernel, helpers.overwrite)
    with pytest.raises(ValueError, match=_WRITES_X):
        jax.jit(lambda x: m(x)[0] + 1.0)(x)  # a new trace of the same module
    with pytest.raises(ValueError, match=_WRITES_X):
        jax_kernel(kernel)
    np.testing.assert_array_equal(x, np.arange(N))


def test_a_trace_after_a_redefinition_warp_sees_is_refused() -> None:
    m = jax_kernel(rb.by_global)
    x = jnp.arange(N, dtype=jnp.float32)
    (y,) = jax.jit(m)(x)
    np.testing.assert_array_equal(y, 2.0 * np.arange(N))
    rb.redefine_helper()  # a new @wp.func in the kernel's module: Warp hashes the module again
    with pytest.raises(ValueError, match=_WRITES_X):
        jax.jit(lambda x: m(x)[0] + 1.0)(x)
    np.testing.assert_array_equal(x, np.arange(N))
    (x_warp, y_warp) = _warp_launch(rb.by_global, np.arange(N, dtype=np.float32))
    np.testing.assert_array_equal(x_warp, np.full(N, 7.0))  # the code refused does write x
    np.testing.assert_array_equal(y_warp, np.full(N, 3.0))


@pytest.mark.parametrize("kernel", KERNELS, ids=_key)
def test_a_trace_after_a_rebinding_to_other_reading_code_runs_that_code(kernel: wp.Kernel) -> None:
    m = jax_kernel(kernel)
    x = jnp.arange(N, dtype=jnp.float32)
    (y,) = jax.jit(m)(x)  # built and run: its executor holds the build of `double`
    np.testing.assert_array_equal(y, 2.0 * np.arange(N))
    rb.rebind(kernel, helpers.add_ten)
    (y,) = jax.jit(lambda x: m(x))(x)  # a new plan, not the old one's executor
    _, expected = _warp_launch(kernel, np.arange(N, dtype=np.float32))
    np.testing.assert_array_equal(expected, np.arange(N) + 10.0)
    np.testing.assert_array_equal(y, expected)


@pytest.mark.parametrize("kernel", KERNELS, ids=_key)
def test_an_executable_traced_before_a_rebinding_refuses_to_launch_the_new_code(kernel: wp.Kernel) -> None:
    x = jnp.arange(N, dtype=jnp.float32)
    compiled = jax.jit(jax_kernel(kernel)).lower(x).compile()  # its executor is made at its first run
    old = rb.rebind(kernel, helpers.overwrite)
    with pytest.raises(jax.errors.JaxRuntimeError, match="changed after this call was traced") as raised:
        compiled(x)
    assert "Trace the call again" in str(raised.value)
    np.testing.assert_array_equal(x, np.arange(N))
    rb.rebind(kernel, old)  # the code it was traced with: it runs
    (y,) = compiled(x)
    np.testing.assert_array_equal(y, 2.0 * np.arange(N))
    np.testing.assert_array_equal(x, np.arange(N))


def test_a_program_traced_before_a_rebinding_is_not_rebuilt_for_the_new_code() -> None:
    x = jnp.arange(N + 3, dtype=jnp.float32)  # a shape of its own: a plan no other test registered
    before = {h for h, _ in registry.items()}
    lowered = jax.jit(jax_kernel(rb.by_global)).trace(x).lower()  # keeps its plan registered
    (plan,) = [p for h, p in registry.items() if h not in before]
    text = content_text(plan)  # the description a persistent cache or an export carries
    assert rebuild(text) == plan
    rb.rebind(rb.by_global, helpers.add_ten)  # Warp keeps the module's hash
    with pytest.raises(ContentError, match="other code than the kernel the program was compiled with"):
        rebuild(text)
    del lowered


@pytest.mark.launch_paths  # the Python launch path too (the native handler runs calls with no Python at all)
def test_calls_hash_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    x = jnp.arange(N, dtype=jnp.float32)
    f = jax.jit(jax_kernel(rb.by_global))
    f(x)  # traced, loaded: its executor is made

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a call hashed the kernel's code")

    monkeypatch.setattr(_warp_kernels, "current_code_hash", refuse)
    monkeypatch.setattr(_warp_kernels, "kernel_code_hash", refuse)
    for _ in range(3):
        (y,) = f(x)
    np.testing.assert_array_equal(y, 2.0 * np.arange(N))


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch) -> list[wp.Kernel]:
    """The kernels whose code Warp hashes (``_warp_kernels._hash_alone``) while the test runs, in order."""
    calls: list[wp.Kernel] = []
    original = _warp_kernels._hash_alone

    def counting(kernel: wp.Kernel, block_dim: int) -> bytes:
        calls.append(kernel)
        return original(kernel, block_dim)

    monkeypatch.setattr(_warp_kernels, "_hash_alone", counting)
    return calls


def test_a_plan_hashes_its_kernels_code_once_and_the_next_plan_again(hashed: list[wp.Kernel]) -> None:
    # Each analysis a plan is drawn from asks for the hash; one planning step hashes once (`one_code_version`), and
    # the next one hashes afresh, so a rebinding between two traces is still seen.
    module = jax_kernel(rb.by_attribute)
    hashed.clear()  # the module's construction checked the code too
    jax.jit(module).trace(jnp.arange(N, dtype=jnp.float32))
    assert hashed == [rb.by_attribute]
    rb.rebind(rb.by_attribute, helpers.overwrite)
    with pytest.raises(ValueError, match=_WRITES_X):
        jax.jit(module).trace(jnp.arange(N + 1, dtype=jnp.float32))
    assert hashed == [rb.by_attribute] * 2


def test_the_adjoint_plan_hashes_its_kernels_code_once(hashed: list[wp.Kernel]) -> None:
    module = jax_kernel(rb.by_global, enable_backward=True)
    hashed.clear()
    jax.jit(jax.grad(lambda x: module(x)[0].sum())).trace(jnp.arange(N, dtype=jnp.float32))
    assert hashed == [rb.by_global] * 2  # the forward plan, then the adjoint plan
