"""jarp's own launch path: plan registry, FFI errors, threads, several devices, CUDA lowering."""

import gc
import os
import sys
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp

from jarp.warp import jax_callable, jax_kernel
from jarp.warp._ffi import _registry, _target
from jarp.warp._plan._content import ABI_VERSION
from tests.support import forked
from tests.support import kernels as k
from tests.support.lowered import custom_calls
from tests.support.paths import REPO, child_environment

pytestmark = pytest.mark.launch_paths  # also run on the Python launch path (noxfile.py)


def test_retracing_does_not_grow_the_registry():
    m = jax_kernel(k.triple_kernel, enable_backward=True)
    x = jnp.arange(8, dtype=jnp.float32)

    def run():
        # a fresh function object: a fresh trace and lowering each time
        return jax.jit(jax.grad(lambda x: jnp.sum(m(x)[0] ** 2))).lower(x)

    run()
    gc.collect()
    before = len(_registry.registry)
    for _ in range(20):
        run()
    # Not equal: an executable of an earlier test in this worker process may be destroyed meanwhile (XLA deletes
    # its state when it gets to it), releasing its plan; twenty retraces that each kept a plan would add twenty.
    assert len(_registry.registry) <= before


def test_equal_plans_share_a_handle():
    m1 = jax_kernel(k.triple_kernel)
    m2 = jax_kernel(k.triple_kernel)
    x = jnp.ones(5, jnp.float32)
    # both lowerings alive: a handle stays registered while something lowered with it lives
    lowered1 = jax.jit(lambda x: m1(x)[0]).lower(x)
    lowered2 = jax.jit(lambda x: m2(x)[0]).lower(x)
    t1, t2 = lowered1.as_text(), lowered2.as_text()
    assert "jarp_warp_call" in t1
    assert t1 == t2


def _raising(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    raise ValueError("boom from the callable")


def test_callback_error_becomes_python_exception(capfd):
    m = jax_callable(_raising)
    with pytest.raises(ValueError, match="boom from the callable"):
        jax.block_until_ready(m(jnp.ones(3, jnp.float32)))
    with pytest.raises(jax.errors.JaxRuntimeError, match="raised ValueError: boom from the callable"):
        jax.block_until_ready(jax.jit(m)(jnp.ones(3, jnp.float32)))
    captured = capfd.readouterr()
    assert "boom" not in captured.out  # no stray print of the traceback


def test_threads_share_one_executable():
    m = jax_kernel(k.triple_kernel)
    f = jax.jit(lambda x: m(x)[0])
    xs = [jnp.arange(2000, dtype=jnp.float32) + t for t in range(6)]
    f(xs[0])
    bad = []

    def work(t):
        for _ in range(50):
            out = np.asarray(f(xs[t]))
            if not np.array_equal(out, 3.0 * np.asarray(xs[t])):
                bad.append(t)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert bad == []


def test_lowers_for_cuda_without_a_gpu():
    m = jax_kernel(k.scale_sum_square, enable_backward=True)
    a = jnp.arange(4, dtype=jnp.float32)
    f = jax.jit(jax.value_and_grad(lambda a, b: jnp.sum(m(a, b, 2.0)[0]), argnums=(0, 1)))
    text = f.trace(a, a).lower(lowering_platforms=("cuda",)).as_text()
    calls = [line for line in text.splitlines() if "stablehlo.custom_call @jarp_warp_call" in line]
    assert len(calls) == 2  # forward and adjoint
    assert any("output_operand_aliases" in line for line in calls)  # the adjoint's writable cotangent copy
    # each call names its plan by content: jarp's call-ABI version and a description this process resolves
    parsed = custom_calls(text)
    assert [c["abi"] for c in parsed] == [ABI_VERSION] * 2
    assert sorted(_registry.registry.plan(c["plan"]).label for c in parsed) == ["adjoint", "kernel"]


def test_registered_once():
    jax.jit(lambda x: jax_kernel(k.triple_kernel)(x)[0])(jnp.ones(2, jnp.float32))
    assert _target.is_registered()


def test_pmap_shard_map_and_sharded_jit_on_four_cpu_devices():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    proc = forked.run([sys.executable, "-m", "tests.support.multi_device_script"], env=env, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "multi-device ok" in proc.stdout


_LOG: list[int] = []


def _logging_copy(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    _LOG.append(a.shape[0])
    wp.launch(k.triple_kernel, dim=a.shape, inputs=[a], outputs=[out], device=a.device)


def test_side_effect_survives_dead_code_elimination():
    kept = jax_callable(_logging_copy, has_side_effect=True)
    dropped = jax_callable(_logging_copy)
    x = jnp.ones(3, jnp.float32)
    _LOG.clear()
    jax.block_until_ready(jax.jit(lambda x: (kept(x), x + 1)[1])(x))
    assert _LOG == [3]
    jax.block_until_ready(jax.jit(lambda x: (dropped(x), x + 1)[1])(x))
    assert _LOG == [3]  # unused and pure: removed

    def body(c, x):
        kept(x)
        return c + 1, None

    jax.block_until_ready(jax.lax.scan(body, 0, jnp.ones((4, 3), jnp.float32)))
    assert _LOG == [3] * 5


_LOWER_TRIPLE = (
    "import jax, jax.numpy as jnp\n"
    "from jarp.warp import jax_kernel\n"
    "from tests.support import kernels as k\n"
    "text = jax.jit(lambda x: jax_kernel(k.triple_kernel)(x)[0]).lower(jnp.ones(3, jnp.float32)).as_text()\n"
)


def test_compiled_calls_are_the_same_in_every_process():
    # A call names its plan by content (abi and desc), never by a process-local handle or token: another process
    # lowers the same program to the same text, so JAX's persistent compilation cache and jax.export can share it.
    namespace: dict[str, object] = {}
    text = _lower_in(namespace)
    (call,) = custom_calls(text)
    assert call["abi"] == ABI_VERSION
    assert "local" not in call["description"], call["desc"]  # a module-level kernel: resolvable anywhere
    assert _registry.registry.plan(call["plan"]).target is k.triple_kernel
    env = child_environment()
    other = forked.run(
        [sys.executable, "-c", _LOWER_TRIPLE + "print('=' * 8, text, sep='\\n')"], cwd=REPO, env=env, timeout=300
    )
    assert other.returncode == 0, other.stderr[-3000:]
    assert other.stdout.split("=" * 8 + "\n", 1)[1].strip() == text.strip()  # after Warp's module-load lines


def _lower_in(namespace: dict[str, object]) -> str:
    """`_LOWER_TRIPLE`'s program text, lowered in this process."""
    exec(_LOWER_TRIPLE, namespace)
    return str(namespace["text"])


def test_a_retraced_plan_is_resolved_without_a_rebuild(monkeypatch):
    # Each trace makes a new Plan object, equal to the registered one. The description must lead to the registered
    # plan even after the retrace's lowering (and its plan object) is gone: the instantiate stage then finds it
    # instead of rebuilding it, and `registry.lookup` finds its handle.
    import gc

    from jarp.warp._plan import _content

    m = jax_kernel(k.triple_kernel)
    x = jnp.ones(11, jnp.float32)
    kept = jax.jit(lambda x: m(x)[0]).lower(x)  # holds the plan's lease
    (first,) = custom_calls(kept.as_text())
    text = jax.jit(lambda x: m(x)[0]).lower(x).as_text()  # another trace, whose lowered stage is dropped at once
    gc.collect()
    (again,) = custom_calls(text)
    assert again["desc"] == first["desc"]
    assert again["plan"] == first["plan"] is not None

    def no_rebuild(text):
        raise AssertionError("a plan this process holds was rebuilt from its description")

    monkeypatch.setattr(_content, "read_text", no_rebuild)
    handle, lease = _registry.registry.resolve(again["desc"])
    _registry.registry.release_states([lease])
    assert handle == first["plan"]
