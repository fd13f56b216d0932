"""Shared machinery of the hostile-input tests, ``tests/warp/hostile/test_*.py``.

Those tests throw random input at `jax_kernel` and `jax_callable` modules of a few representative kernels
(``kernels_hostile.py``: elementwise, vec3 arrays, 2-D, a gather through indices, scalar parameters, an in-out
accumulator, a 4-D array of matrices). Each call must either

* return the right result (checked against NumPy), or
* raise a ``TypeError``/``ValueError`` whose message names the offending argument or option,

and must leave the caller's arrays bit-identical (in-out arguments included: XLA copies them, the caller keeps its own),
never crash and never hang. Here: the table of those modules (`CASES`: their parameters as `Arr` and `Scalar`, shape
strategies, valid values and NumPy references), the hypothesis settings (`fuzz`), the helpers that call a module in
several ways, snapshot the caller's arrays and check results and errors, and the autouse fixture `_no_hang`, which
every test file imports so that a call that never returns dumps every thread's stack and ends the run.
"""

from __future__ import annotations

import faulthandler
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from jarp.warp import jax_callable, jax_kernel
from tests.support import kernels_hostile as kh

ERRORS = (TypeError, ValueError)
HANG_LIMIT = 300  # seconds per test (first compiles included); a hang dumps every thread's stack and ends the run

# No deadline: an example may be the first to compile a kernel. The example database stays on (the profile's: a local
# run replays the failures it found before; the derandomised `ci` profile has none), and a case a property found once is
# kept as a plain test next to it.
fuzz = partial(
    settings,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)


@pytest.fixture(autouse=True)
def _no_hang():
    """A call that never returns must not hang CI: dump all stacks and exit after HANG_LIMIT seconds."""
    faulthandler.dump_traceback_later(HANG_LIMIT, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


# ======================================================================================================================
# The representative modules, their parameters and NumPy references
# ======================================================================================================================

F32, I32 = np.dtype(np.float32), np.dtype(np.int32)


@dataclass(frozen=True)
class Arr:
    """An array parameter as JAX sees it."""

    name: str
    dtype: np.dtype
    warp_ndim: int
    inner: tuple[int, ...] = ()

    @property
    def ndim(self) -> int:
        return self.warp_ndim + len(self.inner)


@dataclass(frozen=True)
class Scalar:
    """A scalar parameter: ``kind`` is "float", "int" or "bool"."""

    name: str
    kind: str
    default: Any


@dataclass(frozen=True)
class Case:
    """A kernel (and an annotated function launching it) with its inputs, its pure output and a NumPy reference.

    ``shapes(data)`` draws consistent valid shapes of the array inputs; ``fill(rng, shapes)`` makes valid values for
    them (in-range indices); ``ref(*inputs)`` is the NumPy result (the in-out value or the pure output).
    """

    name: str
    kernel: Any
    func: Any
    inputs: tuple[Arr | Scalar, ...]
    out: Arr | None
    tid_rank: int
    shapes: Callable[[Any], list[tuple[int, ...]]]
    fill: Callable[[np.random.Generator, list[tuple[int, ...]]], list[np.ndarray]]
    ref: Callable[..., np.ndarray]
    foldable: bool = True  # vmap_method="broadcast_all" is right for it (no reads of thread indices or shapes)
    in_out: tuple[str, ...] = field(default=())

    @property
    def arrays(self) -> list[Arr]:
        return [p for p in self.inputs if isinstance(p, Arr)]

    def module(self, kind: str, **options: Any) -> Any:
        if not options:
            return self.kernel if kind == "kernel" else self.func
        if kind == "kernel":
            return jax_kernel(self.kernel.kernel, in_out_argnames=self.in_out, **options)
        return jax_callable(self.func.func, in_out_argnames=self.in_out, **options)

    def merge(self, arrays: Iterable[Any], scalars: dict[str, Any] | None = None) -> list[Any]:
        """Interleave array inputs with scalar values (defaults unless given) in parameter order."""
        it = iter(arrays)
        scalars = scalars or {}
        return [next(it) if isinstance(p, Arr) else scalars.get(p.name, p.default) for p in self.inputs]

    def expected(self, arrays: list[np.ndarray], scalars: dict[str, Any] | None = None) -> np.ndarray:
        return self.ref(*self.merge(arrays, scalars))


def _randn(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    # quarter steps: exact in float32, so the references agree to the last bit but for fused multiply-adds
    return (rng.integers(-16, 17, size=shape) / 4).astype(np.float32)


dim = st.integers(0, 4)


def _one(data: Any) -> list[tuple[int, ...]]:
    return [(data.draw(dim, label="n"),)]


def _fill_plain(rng, shapes):
    return [_randn(rng, s) for s in shapes]


def _shapes_vec3(data):
    n = data.draw(dim, label="n")
    return [(n, 3), (n,)]


def _shapes_grid(data):
    return [(data.draw(dim, label="rows"), data.draw(dim, label="cols"))]


def _shapes_pick(data):
    n = data.draw(dim, label="n")
    t = data.draw(st.integers(0 if n == 0 else 1, 5), label="table")
    return [(n,), (t,)]


def _fill_pick(rng, shapes):
    (n,), (t,) = shapes
    # Warp indexes like Python: -t <= i < t is in range
    idx = rng.integers(-t, t, size=n).astype(np.int32) if t else np.zeros(0, np.int32)
    return [idx, _randn(rng, (t,))]


def _shapes_acc(data):
    n = data.draw(dim, label="n")
    return [(n,), (n,)]


def _shapes_mat4d(data):
    d = tuple(data.draw(st.integers(0, 2), label=f"d{i}") for i in range(4))
    return [(*d, 2, 2)]


def _ref_grid(g):
    i = np.arange(g.shape[0], dtype=np.float32)[:, None]
    j = np.arange(g.shape[1], dtype=np.float32)[None, :]
    return g + np.float32(10) * i - j


def _ref_knobs(a, gain, shift, flip):
    with np.errstate(invalid="ignore", over="ignore"):  # inf * 0
        v = np.float32(gain) * a + np.float32(shift)
    return -v if flip else v


CASES = {
    c.name: c
    for c in [
        Case(
            "affine",
            jax_kernel(kh.affine_kernel),
            jax_callable(kh.affine_func),
            (Arr("a", F32, 1),),
            Arr("out", F32, 1),
            1,
            _one,
            _fill_plain,
            lambda a: np.float32(2) * a + np.float32(1),
        ),
        Case(
            "vec3",
            jax_kernel(kh.weigh_vec3_kernel),
            jax_callable(kh.weigh_vec3_func),
            (Arr("p", F32, 1, (3,)), Arr("w", F32, 1)),
            Arr("out", F32, 1, (3,)),
            1,
            _shapes_vec3,
            _fill_plain,
            lambda p, w: w[:, None] * p,
        ),
        Case(
            "grid",
            jax_kernel(kh.grid_kernel),
            jax_callable(kh.grid_func),
            (Arr("g", F32, 2),),
            Arr("out", F32, 2),
            2,
            _shapes_grid,
            _fill_plain,
            _ref_grid,
            foldable=False,  # the values depend on the thread index, which folding shifts
        ),
        Case(
            "pick",
            jax_kernel(kh.pick_kernel),
            jax_callable(kh.pick_func),
            (Arr("idx", I32, 1), Arr("table", F32, 1)),
            Arr("out", F32, 1),
            1,
            _shapes_pick,
            _fill_pick,
            lambda idx, table: table[idx],
            foldable=False,  # gathers through indices into a per-slice table
        ),
        Case(
            "knobs",
            jax_kernel(kh.knobs_kernel),
            jax_callable(kh.knobs_func),
            (Arr("a", F32, 1), Scalar("gain", "float", 1.5), Scalar("shift", "int", -2), Scalar("flip", "bool", True)),
            Arr("out", F32, 1),
            1,
            _one,
            _fill_plain,
            _ref_knobs,
        ),
        Case(
            "accumulate",
            jax_kernel(kh.accumulate_kernel, in_out_argnames=["acc"]),
            jax_callable(kh.accumulate_func, in_out_argnames=["acc"]),
            (Arr("a", F32, 1), Arr("acc", F32, 1)),
            None,
            1,
            _shapes_acc,
            _fill_plain,
            lambda a, acc: acc + a,
            in_out=("acc",),
        ),
        Case(
            "mat4d",
            jax_kernel(kh.mat22_4d_kernel),
            None,
            (Arr("m", F32, 4, (2, 2)),),
            Arr("out", F32, 4, (2, 2)),
            4,
            _shapes_mat4d,
            _fill_plain,
            lambda m: np.swapaxes(m, -1, -2),
        ),
    ]
}
OUTPUT_CASES = [name for name, c in CASES.items() if c.out is not None]
KINDS = ["kernel", "callable"]


def kinds_of(case: Case) -> list[str]:
    return KINDS if case.func is not None else ["kernel"]


# ======================================================================================================================
# Helpers: calling in several ways, snapshots of the caller's arrays, checks of results and errors
# ======================================================================================================================


def as_form(x: np.ndarray, form: str) -> Any:
    """The caller's copy of an array input: a NumPy array or a JAX array (a fresh buffer either way)."""
    return np.array(x, copy=True) if form == "numpy" else jnp.asarray(np.array(x, copy=True))


def snapshot(values: Iterable[Any]) -> list[tuple[Any, bytes | None]]:
    out = []
    for v in values:
        if isinstance(v, (np.ndarray, jax.Array)):
            arr = np.asarray(v)
            out.append((v, (arr.dtype.str, arr.shape, arr.tobytes())))
        else:
            out.append((v, None))
    return out


def assert_unchanged(snap: list[tuple[Any, Any]]) -> None:
    for i, (v, before) in enumerate(snap):
        if before is None:
            continue
        arr = np.asarray(v)
        assert (arr.dtype.str, arr.shape, arr.tobytes()) == before, f"the call changed the caller's argument {i}"


def call(module: Any, args: list[Any], mode: str, **options: Any) -> Any:
    """Call ``module(*args, **options)`` eagerly or under ``jax.jit`` (JAX arrays become jit arguments, so they are
    traced; everything else, NumPy arrays included, is closed over and reaches the module as is)."""
    if mode == "eager":
        return module(*args, **options)
    traced = [i for i, a in enumerate(args) if isinstance(a, jax.Array)]

    def f(*xs):
        full = list(args)
        for i, x in zip(traced, xs, strict=True):
            full[i] = x
        return module(*full, **options)

    return jax.jit(f)(*(args[i] for i in traced))


def check_result(out: Any, expected: list[np.ndarray], atol: float = 1e-5) -> None:
    assert isinstance(out, tuple), f"modules return a tuple, got {type(out).__name__}"
    assert len(out) == len(expected)
    for got, want in zip(out, expected, strict=True):
        assert isinstance(got, jax.Array)
        assert got.shape == want.shape, (got.shape, want.shape)
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=atol, equal_nan=True)


def check_error(excinfo: pytest.ExceptionInfo, *names: str) -> str:
    """The exception is a TypeError/ValueError whose message names (at least) one of ``names``."""
    msg = str(excinfo.value)
    assert excinfo.type in ERRORS or issubclass(excinfo.type, ERRORS), f"{excinfo.type.__name__}: {msg}"
    assert any(n in msg for n in names), f"the message names none of {names}: {msg}"
    return msg


def quoted(name: str) -> str:
    return repr(name)


def draw_valid(data: Any, case: Case) -> tuple[list[np.ndarray], np.random.Generator]:
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    return case.fill(rng, case.shapes(data)), rng


def out_shape(case: Case, arrays: list[np.ndarray]) -> tuple[int, ...]:
    return case.expected(arrays).shape
