"""The native launch path (`jarp/warp/_ffi/_native/`, its C++ handler `_handler.cpp`).

Kernel plans run through a C++ XLA FFI handler once Python has prepared and published their launch
descriptor (at a plan's first call on a device); callables, and any frame the handler does not recognise,
go to the Python callback. The suite runs its float64 tests, and in ``nox -s tests_full`` the bridge tests, with
``JARP_LAUNCH=python`` (see ``noxfile.py``); this file checks what differs between the paths.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jarp.warp import jax_callable, jax_kernel
from jarp.warp._ffi import _native, _target
from jarp.warp._ffi._native import _handler
from tests.support import forked
from tests.support import kernels as k
from tests.support import kernels_struct as ks
from tests.support.lowered import custom_calls
from tests.support.paths import REPO

pytestmark = [pytest.mark.launch_paths, pytest.mark.native_launches]

NATIVE = os.environ.get(_native.ENV, "native") != "python"


def _registered() -> None:
    jax.jit(lambda x: jax_kernel(k.triple_kernel)(x)[0])(jnp.ones(1, jnp.float32)).block_until_ready()


def test_the_launch_path_is_the_one_the_environment_asks_for() -> None:
    _registered()
    if NATIVE:
        # The native path is the default wherever it builds; it must build on every machine jarp supports.
        assert _target.launch_path() == "native"
        assert _native.active() is not None
        assert _native.active().path.exists()
    else:
        assert _target.launch_path() == f"python ({_native.ENV}=python)"
        assert _native.active() is None


@pytest.fixture
def python_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records each frame that reaches the Python callback (the callbacks look `_callback` up per call)."""
    calls: list[str] = []
    original = _target._callback

    def counting(frame: int, platform: str, graph: bool, handle: int) -> int | None:
        calls.append(platform)
        return original(frame, platform, graph, handle)

    monkeypatch.setattr(_target, "_callback", counting)
    return calls


def _struct_call() -> tuple[Any, Any]:
    m = jax_kernel(ks.scale_kernel)
    w = jnp.linspace(0.5, 1.5, 7, dtype=jnp.float32)
    x = jnp.linspace(-1.0, 2.0, 7, dtype=jnp.float32)
    return (lambda x: m({"k": 3.0, "w": w}, x)[0]), (x, 3.0 * np.asarray(w) * np.asarray(x) ** 2)


def _cases() -> dict[str, tuple[Any, Any]]:
    """Calls of every kind of kernel plan, each with its inputs and the expected result (NumPy)."""
    x = jnp.linspace(-1.0, 1.0, 9, dtype=jnp.float32)
    xs = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)
    triple = jax_kernel(k.triple_kernel)
    sss = jax_kernel(k.scale_sum_square, enable_backward=True)
    scatter = jax_kernel(k.scatter_add_kernel, launch_dims=4, output_dims={"out": 3})
    idx = jnp.array([0, 2, 2, 1], jnp.int32)
    wts = jnp.array([1.0, 2.0, 3.0, 4.0], jnp.float32)
    return {
        "forward": (lambda x: triple(x)[0], (x, 3 * np.asarray(x))),
        "static scalar": (lambda x: sss(x, x, 2.0)[0], (x, 9 * np.asarray(x) ** 2)),
        # a traced scalar: a runtime-scalar variant, the scalar passed as a buffer
        "runtime scalar": (lambda x: sss(x, x, jnp.sum(x) + 2.0)[0], (x, 9 * np.asarray(x) ** 2)),
        "zero-filled output": (lambda w: scatter(idx, w)[0], (wts, np.array([1.0, 4.0, 5.0]))),
        "vmap (batch slices)": (jax.vmap(lambda r: triple(r)[0]), (xs, 3 * np.asarray(xs))),
        "grad (adjoint plan)": (jax.grad(lambda x: jnp.sum(sss(x, x, 2.0)[0])), (x, 18 * np.asarray(x))),
        "vmap of grad": (
            jax.vmap(jax.grad(lambda r: jnp.sum(sss(r, r, 2.0)[0]))),
            (xs, 18 * np.asarray(xs)),
        ),
        "struct parameter": _struct_call(),
    }


@pytest.mark.parametrize("case", list(_cases()))
def test_kernel_plans_run_without_python_after_their_first_call(case: str, python_calls: list[str]) -> None:
    fn, (x, expected) = _cases()[case]
    f = jax.jit(fn)
    np.testing.assert_allclose(f(x), expected, rtol=1e-5, atol=1e-6)  # prepares and publishes the plans
    python_calls.clear()
    for _ in range(3):
        np.testing.assert_allclose(f(x), expected, rtol=1e-5, atol=1e-6)
    if NATIVE:
        assert python_calls == [], "a prepared kernel plan went through the Python callback"
    else:
        assert python_calls, "the Python path should run every call through the callback"


def test_callables_keep_the_python_path(python_calls: list[str]) -> None:
    m = jax_callable(k.triple_func)
    f = jax.jit(lambda x: m(x)[0])
    x = jnp.arange(4, dtype=jnp.float32)
    np.testing.assert_allclose(f(x), 3 * np.arange(4))
    python_calls.clear()
    np.testing.assert_allclose(f(x), 3 * np.arange(4))
    assert python_calls == ["cpu"]


def test_a_frame_that_does_not_match_goes_to_python_for_its_error() -> None:
    """A hand-written call naming a published plan with other buffers gets the Python path's message."""
    m = jax_kernel(k.triple_kernel)
    f = jax.jit(lambda x: m(x)[0])
    x = jnp.arange(6, dtype=jnp.float32)
    np.testing.assert_allclose(f(x), 3 * np.arange(6))
    (lowered,) = custom_calls(f.lower(x).as_text())
    attrs = {"abi": np.int64(lowered["abi"]), "desc": lowered["desc"]}  # the published plan's own description
    call = jax.ffi.ffi_call(_target.TARGET, jax.ShapeDtypeStruct((5,), jnp.float32))
    with pytest.raises(Exception, match=r"operand 0 .* is float32\[5\], the plan expects float32\[6\]"):
        jax.block_until_ready(jax.jit(lambda y: call(y, **attrs))(jnp.ones(5, jnp.float32)))


@pytest.mark.skipif(not NATIVE, reason="checks the native handler's layout table")
def test_the_compiled_layout_is_checked_against_pythons_view(monkeypatch: pytest.MonkeyPatch) -> None:
    _registered()
    handler = _native.active()
    assert handler is not None
    handler._check_layout()  # the handler compiled from jaxlib's header agrees with _xla_ffi and _native
    wrong = _native.expected_layout()
    wrong["XLA_FFI_Buffer.data"] += 8
    monkeypatch.setattr(_handler, "expected_layout", lambda: wrong)
    with pytest.raises(RuntimeError, match=r"XLA_FFI_Buffer\.data: compiled 24, Python 32"):
        handler._check_layout()


def test_plans_prepared_from_eight_threads_at_once(python_calls: list[str]) -> None:
    """First calls of eight new plans at once: each descriptor is published once and then used natively."""
    m = jax_kernel(k.triple_kernel)
    fns = [jax.jit(lambda x: m(x)[0]) for _ in range(8)]
    inputs = [jnp.arange(100 + i, dtype=jnp.float32) for i in range(8)]  # eight shapes: eight plans
    for f, x in zip(fns, inputs, strict=True):
        f.lower(x).compile()  # compile outside the race: the race is about first launches
    before = _native.active().published() if NATIVE else 0
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait()
            for _ in range(20):
                np.testing.assert_allclose(fns[i](inputs[i]), 3 * np.asarray(inputs[i]))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    if NATIVE:
        assert _native.active().published() - before == 8
        assert len(python_calls) < 8 * 20  # some calls raced the publication; later ones ran natively
        python_calls.clear()
        for f, x in zip(fns, inputs, strict=True):
            f(x).block_until_ready()
        assert python_calls == []


def test_a_failed_build_warns_once_and_falls_back(tmp_path: Path) -> None:
    """A handler source that does not compile: one RuntimeWarning, the Python path, correct results."""
    broken = tmp_path / "broken.cpp"
    broken.write_text("this is not C++\n")
    script = textwrap.dedent(
        f"""
        import importlib.abc, importlib.machinery, sys, warnings
        from pathlib import Path

        class BrokenSource(importlib.abc.MetaPathFinder):
            # jarp.warp registers its targets (building the handler) on import: point the handler's source at
            # the broken file as soon as _native._build is executed, before jarp.warp's __init__ builds it
            def find_spec(self, fullname, path, target=None):
                if fullname != "jarp.warp._ffi._native._build":
                    return None
                spec = importlib.machinery.PathFinder.find_spec(fullname, path)
                execute = spec.loader.exec_module

                def exec_module(module):
                    execute(module)
                    module._SOURCE = Path({str(broken)!r})

                spec.loader.exec_module = exec_module
                return spec

        sys.meta_path.insert(0, BrokenSource())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import jax, jax.numpy as jnp, numpy as np
            from jarp.warp import jax_kernel
            from jarp.warp._ffi import _native, _target
            from tests.support import kernels as k

            m = jax_kernel(k.triple_kernel)
            for _ in range(3):
                np.testing.assert_allclose(jax.jit(lambda x: m(x)[0])(jnp.arange(3.0)), [0.0, 3.0, 6.0])
        native = [w for w in caught if "native launch handler" in str(w.message)]
        assert len(native) == 1, [str(w.message) for w in caught]
        assert native[0].category is RuntimeWarning
        assert "JARP_LAUNCH=python" in str(native[0].message)
        assert _target.launch_path().startswith("python (the native handler failed to build"), _target.launch_path()
        # both stages run in Python: the instantiate stage keeps the plan handle as the call's state
        assert _native.handler() is None and _native.active() is None
        assert _target.is_registered()
        print("fallback ok")
        """
    )
    env = {key: value for key, value in os.environ.items() if key != _native.ENV}
    proc = forked.run([sys.executable, "-c", script], cwd=REPO, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "fallback ok" in proc.stdout


def test_an_unknown_launch_path_is_refused() -> None:
    script = "import jax.numpy as jnp\nfrom jarp.warp import jax_kernel\nfrom tests.support import kernels as k\n"
    script += "jax_kernel(k.triple_kernel)(jnp.ones(2))\n"
    env = dict(os.environ, **{_native.ENV: "fast"})
    proc = forked.run([sys.executable, "-c", script], cwd=REPO, env=env, timeout=300)
    assert proc.returncode != 0
    assert "JARP_LAUNCH='fast' is not a launch path; use 'native' (the default) or 'python'" in proc.stderr


@pytest.mark.skipif(not NATIVE, reason="the guard is in the native handler; the Python path still hangs here")
def test_the_process_exits_while_xla_still_runs_kernel_calls_nobody_waited_for() -> None:
    """Kernel calls reaching the Python callback after the script ended: the interpreter still exits.

    Without jarp's exit hook, each XLA worker that takes the GIL after CPython began finalizing is ended by
    CPython (``pthread_exit``), and destroying XLA's CPU client then waits for it forever (12 runs of 12 hung).
    """
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.unawaited_at_exit_script"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "dispatched" in proc.stdout


@pytest.mark.skipif(not NATIVE, reason="checks the native handler's exit guard")
def test_after_the_exit_hook_only_prepared_plans_run() -> None:
    """After `drain_at_exit`, a prepared plan still launches natively; a frame needing Python fails with an error."""
    script = textwrap.dedent(
        """
        import jax, jax.numpy as jnp, numpy as np
        from jarp.warp import jax_kernel
        from jarp.warp._ffi import _native
        from tests.support import kernels as k
        m = jax_kernel(k.triple_kernel)
        f = jax.jit(lambda x: m(x)[0])
        np.testing.assert_allclose(f(jnp.arange(4.0)), [0.0, 3.0, 6.0, 9.0])
        assert _native.active().drain_at_exit() == 0
        np.testing.assert_allclose(f(jnp.arange(4.0) + 1), [3.0, 6.0, 9.0, 12.0])
        try:
            jax.block_until_ready(f(jnp.arange(5.0)))  # a new plan: its first call needs the Python callback
        except Exception as e:
            print("refused:", e)
        """
    )
    proc = forked.run([sys.executable, "-c", script], cwd=REPO, env=dict(os.environ), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "refused:" in proc.stdout, proc.stdout[-2000:]
    assert "the Python interpreter is exiting" in proc.stdout, proc.stdout[-2000:]


def test_an_exit_hook_registered_after_importing_jarp_can_still_run_new_plans() -> None:
    """jarp's exit guard runs after the exit hooks of the code that imports it, so those may still call kernels."""
    script = textwrap.dedent(
        """
        import atexit
        import jax, jax.numpy as jnp, numpy as np
        from jarp.warp import jax_kernel
        from tests.support import kernels as k

        m = jax_kernel(k.triple_kernel)

        def report():
            # a plan never called before: its first call goes through jarp's Python callback
            print("at exit:", np.asarray(jax.jit(lambda x: m(x)[0])(jnp.arange(3.0))).tolist(), flush=True)

        atexit.register(report)
        np.testing.assert_allclose(jax.jit(lambda x: m(x)[0])(jnp.arange(4.0)), [0.0, 3.0, 6.0, 9.0])
        """
    )
    proc = forked.run([sys.executable, "-c", script], cwd=REPO, env=dict(os.environ), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "at exit: [0.0, 3.0, 6.0, 9.0]" not in proc.stdout  # guards against a stale first result
    assert "at exit: [0.0, 3.0, 6.0]" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
