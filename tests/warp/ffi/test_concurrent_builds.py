"""First calls from many threads at once: Warp's building serialised by jarp (``_warp_kernels.warp_lock``).

Unit: every place jarp asks Warp to create, overload, build or load something (``_kernel._overload``,
``_runtime_scalars.variant``, ``_preload``, the FFI executors, ``_struct``). Warp's module building is not
thread-safe: without the lock, eight threads making the first calls of a generic kernel with different dtypes and
traced-scalar variants failed 1 to 5 calls in 48 (``FileNotFoundError: Module metadata file ... not found in the
cache``, ``KeyError``). Each round uses a kernel in a freshly written module with a unique constant, so Warp's kernel
cache is cold and every first call builds. References: NumPy.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType

import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp

from jarp.warp import jax_callable, jax_kernel
from jarp.warp._upstream import _warp_kernels

_SOURCE = """
from typing import Any

import warp as wp

TAG = {tag}  # unique per round: a cold kernel cache


@wp.kernel
def scale(a: wp.array(dtype=Any), s: Any, out: wp.array(dtype=Any)):
    i = wp.tid()
    out[i] = a[i] * s + a.dtype(TAG * 0)


@wp.kernel
def add_one(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a[i] + float(1 + TAG * 0)


def add_one_twice(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    wp.launch(add_one, dim=a.shape, inputs=[a], outputs=[out])
    wp.launch(add_one, dim=a.shape, inputs=[out], outputs=[out])
"""


def _fresh_module(tmp_path: Path) -> ModuleType:
    name = f"jarp_threads_{uuid.uuid4().hex}"
    path = tmp_path / f"{name}.py"
    path.write_text(_SOURCE.format(tag=uuid.uuid4().int % 10**9))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _arg_types(a_dtype, s_dtype):
    return [wp.array(dtype=a_dtype), a_dtype, wp.array(dtype=a_dtype)]


_CASES = [(dtype, traced) for dtype in (np.float32, np.int32, np.float16) for traced in (False, True)]


# more rounds give a race more chances: `nox -s tests_full` runs the second and third, with a third dtype (each
# overload rebuilds the module with the ones before it: the first round's four builds take half the time of six)
@pytest.mark.parametrize(
    "round_", [0, pytest.param(1, marks=pytest.mark.slow), pytest.param(2, marks=pytest.mark.slow)]
)
def test_first_calls_of_overloads_and_variants_from_eight_threads(
    tmp_path: Path, round_: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Warp keeps a precompiled header per thread, made by the thread's first build (about 3 s here): the threads
    # that build here each made one, which took longer than the builds themselves (19 s a round against 14 s without)
    monkeypatch.setattr(wp.config, "use_precompiled_headers", False)
    cases = _CASES if round_ else _CASES[:4]  # two dtypes, each with and without a traced scalar
    module = _fresh_module(tmp_path)
    scale = jax_kernel(module.scale, arg_types_factory=_arg_types)
    start = threading.Barrier(8)

    def call(i: int) -> np.ndarray:
        dtype, traced = cases[i % len(cases)]
        if i < 8:
            start.wait(timeout=120)  # the first eight calls start together
        a = jnp.arange(5).astype(dtype)
        s = jnp.asarray(3, dtype) if traced else dtype(3).item()
        (out,) = scale(a, s)
        return np.asarray(out)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(call, range(48)))
    for i, out in enumerate(results):
        dtype, _ = cases[i % len(cases)]
        np.testing.assert_array_equal(out, np.arange(5).astype(dtype) * dtype(3))
        assert out.dtype == dtype


def test_first_calls_of_a_callable_from_eight_threads(tmp_path: Path) -> None:
    # The callable's first run builds its kernel's module through wp.launch, under jarp's lock.
    module = _fresh_module(tmp_path)
    twice = jax_callable(module.add_one_twice)
    start = threading.Barrier(8)

    def call(n: int) -> np.ndarray:
        start.wait(timeout=120)
        (out,) = twice(jnp.arange(float(n + 1), dtype=jnp.float32))
        return np.asarray(out)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(call, range(8)))
    for n, out in enumerate(results):
        np.testing.assert_array_equal(out, np.arange(n + 1, dtype=np.float32) + 2)


def test_warp_lock_is_one_reentrant_lock() -> None:
    lock = _warp_kernels.warp_lock()
    assert lock is _warp_kernels.warp_lock()
    with lock, lock:  # re-entrant: jarp's builders nest (an overload, then its module's load)
        acquired = []
        other = threading.Thread(target=lambda: acquired.append(lock.acquire(timeout=0.05)))
        other.start()
        other.join()
        assert acquired == [False]  # held: another thread waits
