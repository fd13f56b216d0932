"""Checking mode: every CPU launch verifies at run time what jarp's analysis of its kernel promised.

jarp's plans rest on three static verdicts (`jarp.warp._plan._analysis`): the kernel writes no input it was not told
it may write; its CPU launch may be split into index ranges (``Plan.race_free``, or ``Plan.private`` accumulations);
the zero-fill of an output it overwrites everywhere may be skipped (the outputs not in ``Plan.zero_results``). With
checking mode on (`set_checking_mode`, or ``JARP_CHECKING=1`` for a process) every CPU launch is run through
`CheckedCpuKernelExecutor` instead of the native handler:

- every input buffer (one not shared with a result) is compared byte for byte before and after the launch;
- an output whose fill is skipped is first filled with a sentinel byte pattern, and the launch's results must equal
  those of a reference launch, on copies, with that output zero-filled;
- a splittable launch is also run as two index ranges, each on its own copy of the buffers from the same state
  (jarp's ranged entry point, as a split launch runs), and the two merged: a byte both ranges changed to different
  values is a race; the merge (privatised arrays combined as the handler combines them) must equal the reference.

A violation raises `CheckingModeError` naming the module, the kernel and the parameter. Callables (`jax_callable`)
get the input comparison. CUDA launches are not checked (their buffers are on the device): the verdicts are the
same for both devices, so the CPU run of a program checks them.
"""

from __future__ import annotations

import ctypes
import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from .._plan._values import Plan
from .._upstream import _locks
from . import _errors
from ._callable_executor import CallableExecutor
from ._executor_base import memset
from ._kernel_executors import CpuKernelExecutor
from ._native import _ranged

ENV = "JARP_CHECKING"
#: The byte an output whose zero-fill jarp skips holds before a checked launch (XLA's fresh buffers are often zero,
#: which would hide an element the kernel never writes): all ones, a NaN in every float type (it survives the
#: arithmetic of a kernel that reads the output before it writes it), -1 in every integer type.
SENTINEL = 0xFF

_lock = _locks.make("checking")
_enabled: bool | None = None  # None: not read from the environment yet
_on_change: list[Callable[[], None]] = []


class CheckingModeError(RuntimeError):
    """A launch did what jarp's analysis of its kernel said it could not (raised in checking mode only).

    The message names the module, the kernel, the parameter and the verdict that failed. Please report it with the
    kernel and ``python -m jarp``'s output: it is a bug in jarp's analysis. Until it is fixed, declare the written
    input in-out (``in_out_argnames``), or cap the CPU threads at 1 (`set_cpu_threads`).
    """


def checking_mode() -> bool:
    """Whether checking mode is on: every CPU launch verifies what jarp's analysis promised.

    Returns:
        The value `set_checking_mode` set last, else ``JARP_CHECKING`` (read at the first use: ``1`` is on,
        ``0`` or unset off).

    Example:
        ```python
        import jarp.warp

        jarp.warp.checking_mode()  # False unless JARP_CHECKING=1
        ```
    """
    global _enabled
    with _lock:
        if _enabled is None:
            _enabled = _from_env()
        return _enabled


def set_checking_mode(on: bool) -> None:
    """Turn checking mode on or off for the calls from now on, in every compiled program.

    In checking mode every CPU launch of a kernel verifies what jarp's analysis promised of it: its input buffers
    are unchanged (compared byte for byte), an output whose zero-fill jarp skips is indeed overwritten everywhere
    (it is filled with a sentinel first, and the results must equal a zero-filled launch), and a launch jarp would
    split over threads gives the same results when run as two index ranges on separate copies (no byte changed by
    both, the merge equal to one whole launch). A violation raises an error naming the kernel and the parameter.
    The launches run on the calling thread, without jarp's native handler; each costs about three launches plus
    copies of its buffers. Callables get the input check. CUDA launches are not checked.

    Args:
        on: True to check every launch from now on, False to stop.

    Raises:
        TypeError: if ``on`` is not a bool.

    Example:
        ```python
        import jarp.warp

        jarp.warp.set_checking_mode(True)  # every launch now verifies jarp's verdicts on its kernel
        jarp.warp.set_checking_mode(False)
        ```
    """
    global _enabled
    if not isinstance(on, bool):
        raise TypeError(f"set_checking_mode(on): on must be True or False, got {on!r}.")
    with _lock:
        changed = _enabled is None or _enabled != on
        _enabled = on
    if changed:
        for hook in _on_change:
            hook()


def on_change(hook: Callable[[], None]) -> None:
    """Call ``hook`` whenever the mode changes (the executors' cache drops every executor: they are rebuilt for the
    new mode)."""
    _on_change.append(hook)


def _from_env() -> bool:
    raw = os.environ.get(ENV, "").strip()
    if raw in ("", "0"):
        return False
    if raw == "1":
        return True
    raise ValueError(f"{ENV}={raw!r} must be 1 (checking mode on) or 0 (off).")


def _view(ptr: int, nbytes: int) -> np.ndarray:
    """The bytes of a buffer, as a writable uint8 array over its memory."""
    # a ctypes array has the buffer protocol, which typeshed leaves out
    return np.frombuffer((ctypes.c_ubyte * nbytes).from_address(ptr), dtype=np.uint8)  # pyright: ignore[reportCallIssue, reportArgumentType]


def _clone(copies: dict[tuple[int, int], np.ndarray]) -> dict[tuple[int, int], np.ndarray]:
    """Copies of the buffers of ``copies``, sharing as they share (an in-out operand is its result's buffer)."""
    bases: dict[int, np.ndarray] = {}
    out = {}
    for key, view in copies.items():
        base = view.base if isinstance(view.base, np.ndarray) else view
        if id(base) not in bases:
            bases[id(base)] = base.copy()
        out[key] = bases[id(base)][: view.size]
    return out


def _names(plan: Plan) -> tuple[dict[int, str], dict[int, str]]:
    """What each operand and each result buffer is, as a message names it (``"x"``, ``"mesh.verts"``, ``"x (its
    gradient)"``)."""
    ops: dict[int, str] = {}
    res: dict[int, str] = {}
    for param in plan.params:
        spec = param.spec
        for binding, grad in ((param.primal, False), (param.adjoint, True)):
            side = (res if grad else ops) if binding.source == "struct" else None
            if binding.source == "struct" and spec.struct is not None:
                for leaf, index in zip(spec.struct.arrays, binding.fields, strict=False):
                    name = ".".join(leaf.path) + (" (its gradient)" if grad else "")
                    (side if side is not None else ops).setdefault(index, name)
            elif binding.source in ("operand", "result"):
                table = ops if binding.source == "operand" else res
                table.setdefault(binding.index, spec.name + (" (its gradient)" if grad else ""))
    return ops, res


class _CheckedInputs:
    """The input check both executors share: which operand buffers a launch must leave as they were."""

    plan: Plan
    buffers: Any
    #: Who said the inputs stay as they are, and what to do where they do not.
    promise = ("which jarp judged read-only", "declare it in-out (in_out_argnames) until jarp's analysis is fixed")

    def native_descriptor(self) -> None:
        """None: no launch descriptor, so every call comes to the checked executor's ``run``."""
        return None

    def _prepare_inputs(self) -> None:
        self.sizes = tuple(
            [math.prod(shape) * np.dtype(dtype).itemsize for dtype, shape in side] for side in self.buffers.shapes
        )
        self.op_names, self.res_names = _names(self.plan)

    def _snapshot_inputs(self, ptrs: tuple[Any, Any]) -> dict[int, np.ndarray]:
        shared = set(ptrs[1])
        return {
            i: _view(p, n).copy()
            for i, (p, n) in enumerate(zip(ptrs[0], self.sizes[0], strict=True))
            if n and p not in shared
        }

    def _check_inputs(self, ptrs: tuple[Any, Any], before: dict[int, np.ndarray], bug: bool = True) -> None:
        for i, old in before.items():
            if not np.array_equal(_view(ptrs[0][i], self.sizes[0][i]), old):
                raise self._error(
                    f"wrote its input {self._op(i)}, {self.promise[0]}: the caller's array changed",
                    self.promise[1],
                    bug,
                )

    def _op(self, i: int) -> str:
        return repr(self.op_names.get(i, f"operand {i}"))

    def _res(self, j: int) -> str:
        return repr(self.res_names.get(j, f"result {j}"))

    def _error(self, what: str, fix: str, bug: bool = True) -> CheckingModeError:
        plan = self.plan
        target = getattr(plan.target, "key", getattr(plan.target, "__name__", repr(plan.target)))
        kind = "kernel" if plan.label in ("kernel", "adjoint") else "function"
        direction = " (backward launch)" if plan.adjoint else ""
        report = "This is a bug in jarp's analysis: please report it with the kernel and `python -m jarp`'s output; "
        return CheckingModeError(
            f"{plan.name}: checking mode: {kind} {target!r}{direction} {what}. {report if bug else ''}"
            f"{'meanwhile, ' if bug else 'To fix it, '}{fix}."
        )


class CheckedCpuKernelExecutor(_CheckedInputs, CpuKernelExecutor):
    """A CPU kernel launch that verifies its plan's verdicts on every call (see the module docstring)."""

    def __init__(self, plan: Plan, device: Any) -> None:
        super().__init__(plan, device)
        self._prepare_inputs()
        zeroed = {j for j, _ in self.zero}
        in_out = {j for _, j in plan.aliases}
        # the outputs whose zero-fill the plan skips because the kernel overwrites them; an adjoint plan fills every
        # cotangent its launch accumulates into, and leaves the others unwritten on purpose (nothing reads them)
        self.skipped = (
            []
            if plan.adjoint
            else [j for j in range(len(plan.results)) if self.sizes[1][j] and j not in zeroed | in_out]
        )
        self.tasks = math.prod(plan.launch_dims)
        self.ranged: Any = None
        if (plan.race_free or plan.private) and self.tasks >= 2 and not self.empty:
            address = _ranged.ranged_cpu_entry(plan.target, self.entry, self.adjoint)
            if address:
                args = [ctypes.c_void_p] * (3 if self.adjoint else 2) + [ctypes.c_size_t, ctypes.c_size_t]
                self.ranged = ctypes.CFUNCTYPE(None, *args)(address)

    def run(self, frame: int) -> None:
        ptrs = self.pointers(frame)
        inputs = self._snapshot_inputs(ptrs)
        # the state the plan's own launch starts from, and a sentinel in the outputs whose fills it skips
        self.prepare_results(ptrs)
        for j in self.skipped:
            memset(ptrs[1][j], SENTINEL, self.sizes[1][j])
        start = self._copies(ptrs)  # every buffer as the launch finds it, skipped outputs zero-filled
        for j in self.skipped:
            start[(1, j)][:] = 0
        reference = None
        if not self.empty and (self.skipped or self.ranged is not None):
            reference = _clone(start)
            self._launch(self._table(ptrs, reference), None)
        super().run(frame)  # the launch itself, on one thread
        self._check_inputs(ptrs, inputs)
        if reference is None:
            return
        for j in self.skipped:
            if not np.array_equal(_view(ptrs[1][j], self.sizes[1][j]), reference[(1, j)]):
                raise self._error(
                    f"left elements of its output {self._res(j)} unwritten, or read them before writing, but jarp "
                    "skipped its zero-fill (the output differs from a launch on a zero-filled buffer)",
                    "pass a zero-filled array as an in-out argument instead of the output",
                )
        for j in range(len(self.plan.results)):
            if j not in self.skipped and not np.array_equal(_view(ptrs[1][j], self.sizes[1][j]), reference[(1, j)]):
                raise self._error(
                    f"gave different values in {self._res(j)} on two launches from the same state (it is not "
                    "deterministic), so checking mode cannot check it",
                    "turn checking mode off for this call",
                )
        if self.ranged is not None:
            self._check_split(ptrs, start, reference)

    def _copies(self, ptrs: tuple[Any, Any]) -> dict[tuple[int, int], np.ndarray]:
        """A copy of every buffer (one per distinct buffer: an operand that is a result shares its copy)."""
        largest: dict[int, int] = {}
        for side in (0, 1):
            for p, n in zip(ptrs[side], self.sizes[side], strict=True):
                largest[p] = max(largest.get(p, 0), n)
        by_ptr = {p: _view(p, n).copy() if n else np.zeros(0, np.uint8) for p, n in largest.items()}
        out = {}
        for side in (0, 1):
            for k, p in enumerate(ptrs[side]):
                out[(side, k)] = by_ptr[p][: self.sizes[side][k]]
        return out

    def _table(self, ptrs: tuple[Any, Any], copies: dict[tuple[int, int], np.ndarray]) -> tuple[list[int], list[int]]:
        """The pointer table of a launch on ``copies`` (a zero-size buffer keeps its pointer: nothing reads it)."""
        return tuple(  # pyright: ignore[reportReturnType]  # one list per side: two
            [copies[(side, k)].ctypes.data if copies[(side, k)].size else p for k, p in enumerate(ptrs[side])]
            for side in (0, 1)
        )

    def _launch(self, table: tuple[list[int], list[int]], task_range: tuple[int, int] | None) -> None:
        """Launch every batch slice on the buffers of ``table``: whole, or the tasks ``task_range`` only."""
        blocks = [words.from_buffer_copy(raw) for words, raw, _ in self.blocks]
        for s in range(self.nslices):
            for block, slot, src, index, offs in self.slots:
                blocks[block][slot] = table[src][index] + offs[s]
            if task_range is None:
                self.fn(self.bounds_addr, *blocks)
                if self.cooperative:
                    self._raise_block_error()
            else:
                self.ranged(self.bounds_addr, *blocks, *task_range)

    def _check_split(
        self,
        ptrs: tuple[Any, Any],
        start: dict[tuple[int, int], np.ndarray],
        reference: dict[tuple[int, int], np.ndarray],
    ) -> None:
        """Run the launch as two index ranges on separate copies from ``start`` and merge them as a split launch
        would: no byte changed by both, the merge equal to the whole launch (``reference``)."""
        half = self.tasks // 2
        runs = []
        for task_range in ((0, half), (half, self.tasks)):
            copies = _clone(start)
            self._launch(self._table(ptrs, copies), task_range)
            runs.append(copies)
        first, second = runs
        private = dict(self.plan.private)
        for j in range(len(self.plan.results)):
            key = (1, j)
            init, a, b, whole = start[key], first[key], second[key], reference[key]
            if not init.size:
                continue
            if j in private:
                merged = self._combine(j, private[j], init, a, b, whole)
                if merged is not None and not merged:
                    raise self._error(
                        f"accumulated into {self._res(j)} differently when its launch was split in two index ranges "
                        f"(each on its own copy, combined by {private[j]!r}) than in one launch",
                        "cap the CPU threads at 1 (jarp.warp.set_cpu_threads(1))",
                    )
                continue
            # compared element by element (the buffer's scalar: a vec3's float), never wider: two ranges may write
            # neighbouring half-precision elements of one 8-byte word
            word = np.dtype(f"u{np.dtype(self.plan.results[j].dtype).itemsize}")
            init, a, b, whole = (v.view(word) for v in (init, a, b, whole))
            changed_a, changed_b = a != init, b != init
            if np.any(changed_a & changed_b & (a != b)):
                raise self._error(
                    f"wrote the same elements of {self._res(j)} from two index ranges of its launch, with different "
                    "values, but jarp judged it race-free and splits its CPU launches (updates would be lost)",
                    "cap the CPU threads at 1 (jarp.warp.set_cpu_threads(1))",
                )
            merged = np.where(changed_b, b, np.where(changed_a, a, init))
            if not np.array_equal(merged, whole):
                raise self._error(
                    f"gave different values in {self._res(j)} when its launch was split in two index ranges than in "
                    "one launch (a thread reads what another writes), but jarp judged it race-free",
                    "cap the CPU threads at 1 (jarp.warp.set_cpu_threads(1))",
                )
        shared = set(ptrs[1])
        for i in range(len(self.plan.operands)):
            if ptrs[0][i] not in shared and any(not np.array_equal(r[(0, i)], start[(0, i)]) for r in runs):
                raise self._error(
                    f"wrote its input {self._op(i)} in an index range of its launch, which jarp judged read-only",
                    "declare it in-out (in_out_argnames) until jarp's analysis is fixed",
                )

    def _combine(
        self, j: int, how: str, init: np.ndarray, a: np.ndarray, b: np.ndarray, whole: np.ndarray
    ) -> bool | None:
        """Whether two ranges' accumulations into result ``j`` (from ``init``) combine to the whole launch's
        (``whole``; within rounding for floats); None for a combination jarp does not make."""
        dtype = np.dtype(self.plan.results[j].dtype)
        x0, xa, xb = (v.view(dtype) for v in (init, a, b))
        if how == "add":
            merged = xa + xb - x0 if dtype.kind != "f" else xa.astype(np.float64) + xb - x0
        elif how == "min":
            merged = np.minimum(xa, xb)
        elif how == "max":
            merged = np.maximum(xa, xb)
        else:
            return None
        target = whole.view(dtype)
        if dtype.kind == "f":
            scale = np.abs(x0).astype(np.float64) + np.abs(xa - x0) + np.abs(xb - x0) + 1e-30
            rtol = 1e-4 if dtype.itemsize <= 4 else 1e-10
            # rounding: relative to the magnitudes summed, and to the array's largest value (a sum that cancels
            # to about zero keeps the absolute error of its terms)
            finite = np.abs(np.concatenate([target[np.isfinite(target)], merged[np.isfinite(merged)]]))
            atol = rtol * float(finite.max(initial=0.0))
            close = np.abs(merged - target) <= rtol * scale + atol + np.finfo(dtype).tiny
            return bool(np.all(close | (merged == target) | (np.isnan(merged) & np.isnan(target))))
        return bool(np.array_equal(merged.astype(dtype), target))


class CheckedCpuCallableExecutor(_CheckedInputs, CallableExecutor):
    """A CPU callable whose function must leave its input buffers as they were (see the module docstring).

    A callable gets private copies of its inputs unless it was made with ``protect_inputs=False``: then this checks
    the user's promise.
    """

    promise = (
        "which jax_callable(protect_inputs=False) promises to leave as it is",
        "make the callable with protect_inputs=True (the default), or declare the input in-out",
    )

    def __init__(self, plan: Plan, device: Any) -> None:
        super().__init__(plan, device)
        self._prepare_inputs()

    def run(self, frame: int) -> None:
        ptrs = self.pointers(frame)
        inputs = self._snapshot_inputs(ptrs)
        super().run(frame)
        self._check_inputs(ptrs, inputs, bug=False)


_errors.own_frames(__file__)
