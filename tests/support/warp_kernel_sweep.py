"""A sweep of Warp's own kernels: each one through `jarp.warp.jax_kernel`, against ``wp.launch`` on the same inputs.

The warp-lang wheel ships hundreds of kernels in its tests and examples (``warp/tests/**``, ``warp/examples/**``), and
its sparse-matrix and FEM libraries define more at module level. This module

- harvests them (`harvest`): imports every such module (a module that fails to import, or needs a GPU, USD or
  another missing package, is listed and passed over) and collects its module-level ``wp.Kernel`` objects, each
  once; a generic kernel stands for each overload registered on it (``wp.overload``), and is passed over when it
  has none;
- fabricates arguments from each kernel's annotations (`fabricate`): arrays of ``DIM`` elements per dimension of
  scalars, vectors, matrices, quaternions and transforms with small deterministic values, integer arrays holding
  valid indices (``0 .. DIM - 1``) so that gathers stay in bounds, small scalars; the launch covers ``DIM`` per
  dimension of ``wp.tid()``. A kernel whose parameters the harness cannot fabricate (structs, ``wp.uint64`` ids,
  tiles, textures, indexed or Fabric arrays) is skipped with the reason, or counted as refused when jarp refuses
  that parameter kind itself;
- launches it with ``wp.launch`` on the CPU (in a process forked for it), three times, each array inside a padded
  buffer whose padding holds zeros, then ones, then hostile values (NaN, a large integer): a kernel that crashes,
  writes into the padding, or whose results differ between the launches (it reads outside its arrays, or is
  nondeterministic), is skipped; the arrays whose bytes changed are the ones the kernel writes;
- calls ``jax_kernel(kernel, num_outputs=len(written), in_out_argnames=written, launch_dims=dims)`` under
  ``jax.jit`` on JAX arrays of the same values (a kernel that writes nothing declares its first array in-out, since
  jarp needs an output), and compares every returned array with Warp's (exact for integers and booleans, close for
  floats, NaN equal to NaN) and every other array with its value before the call (jarp must not write an input).

Each kernel ends in one of `STATUSES`: ``equal``; ``refused`` (jarp raised a ``TypeError`` or ``ValueError`` of its
own, at construction or call); ``skipped`` (the harness cannot run it, with the reason); ``mismatch`` (jarp's result
differs from Warp's, or jarp wrote an input); ``error`` (jarp raised anything else); ``crash`` (the process died or
hung in jarp's call).

The sweep runs in a child process (`run_sweep`) that imports the kernels once and checks them in worker processes
forked from it (before it starts JAX's backend); a worker appends one JSON line per step to a file, so that a kernel
that crashes the worker (a buffer overrun) or hangs it is recorded instead of taking the run down, and a new worker
goes on after that kernel. All of it runs on the CPU, with ``jax_enable_x64`` on (so 64-bit arrays reach the kernels
as they are).

Run by ``tests/warp/compat/test_warp_kernel_sweep.py``; by hand::

    python -m tests.support.warp_kernel_sweep                  # the whole sweep, a summary and the failures
    python -m tests.support.warp_kernel_sweep --limit 100      # an evenly spread subset of 100 kernels
    python -m tests.support.warp_kernel_sweep --list           # the harvested kernel ids, no launch
"""

from __future__ import annotations

import argparse
import ast
import collections
import contextlib
import dataclasses
import importlib
import io
import json
import math
import os
import pathlib
import pkgutil
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from .paths import REPO, child_environment

#: The outcomes of one kernel, in report order.
STATUSES = ("equal", "refused", "skipped", "mismatch", "error", "crash")
#: The outcomes that are failures of jarp.
FAILURES = ("mismatch", "error", "crash")
#: The packages whose modules (all of them, recursively) hold the kernels swept.
PACKAGES = ("warp.tests", "warp.examples")
#: Warp's libraries whose module-level kernels are swept too.
LIBRARIES = ("warp._src.sparse", "warp._src.fem")
#: Elements per array dimension, and launch extent per ``wp.tid()`` dimension.
DIM = 8
#: Relative and absolute tolerances of the float comparisons, by scalar width in bytes.
TOLERANCES = {2: (1e-2, 1e-3), 4: (1e-5, 1e-6), 8: (1e-12, 1e-14)}

#: ``abort:<kernel id>`` or ``hang:<kernel id>``: the worker aborts or hangs when it reaches jarp's call of that
#: kernel (to test that the sweep records the crash and goes on); ``perturb:<kernel id>``: the first element of
#: Warp's result for the first array the kernel writes is changed (to test that a difference is a mismatch).
FAULT_ENV = "JARP_SWEEP_FAULT"

_SCALAR_STATIC = {"int": 2, "float": 0.5, "bool": True}
_WRITES_INPUTS = re.compile(r"writes to input\(s\) \[([^\]]*)\]")


# ======================================================================================================================
# Records
# ======================================================================================================================


@dataclasses.dataclass(frozen=True)
class Verdict:
    """How one kernel fared.

    Args:
        id: the kernel's id: ``module:attribute``, with ``[overload]`` (Warp's mangled argument types) for an
            overload of a generic kernel.
        status: one of `STATUSES`.
        detail: the reason (skipped), jarp's message (refused, error) or the first difference (mismatch, crash).
        stage: where it ended: ``harvest``, ``fabricate``, ``warp`` (the reference launches), ``jarp`` or ``compare``.
        seconds: wall time spent on the kernel in the child.

    Example:
        ```python
        Verdict("warp.tests.test_generics:generic_fill", "skipped", "generic kernel without overloads", "harvest")
        ```
    """

    id: str
    status: str
    detail: str = ""
    stage: str = ""
    seconds: float = 0.0

    @property
    def module(self) -> str:
        """The module the kernel was harvested from."""
        return self.id.split(":", 1)[0]


@dataclasses.dataclass(frozen=True)
class SweepReport:
    """The result of a sweep.

    Args:
        verdicts: one `Verdict` per kernel run, by id (every selected kernel, also those a crash cut short).
        harvested: how many distinct ``wp.Kernel`` objects the harvest found (before overloads were expanded).
        entries: how many kernels (overloads counted one by one) the harvest yielded.
        selected: how many of them the sweep was asked to run.
        import_failures: the modules that could not be imported: name -> the error, one line.
        restarts: how many times a worker (or the child) was started again after a crash or a hang.
        seconds: wall time of the sweep.
        log: the tail of the children's output, for diagnostics.

    Example:
        ```python
        report = run_sweep(["warp.tests.test_generics:generic_array_kernel_v1[a1f4_a1f4_a1f4]"])
        assert report.counts()["equal"] == 1
        ```
    """

    verdicts: dict[str, Verdict]
    harvested: int
    entries: int
    selected: int
    import_failures: dict[str, str]
    restarts: int
    seconds: float
    log: str = ""

    def counts(self) -> dict[str, int]:
        """How many kernels ended in each of `STATUSES` (all of them present, zeros included)."""
        counter = collections.Counter(v.status for v in self.verdicts.values())
        return {status: counter.get(status, 0) for status in STATUSES}

    def launched(self) -> int:
        """How many kernels reached jarp (the reference launches ran and gave a deterministic result)."""
        return sum(v.stage in ("jarp", "compare") for v in self.verdicts.values())

    def failures(self) -> list[Verdict]:
        """The verdicts whose status is one of `FAILURES`, by id."""
        return sorted((v for v in self.verdicts.values() if v.status in FAILURES), key=lambda v: v.id)

    def summary(self) -> str:
        """Totals, the reasons for skips and refusals (counted), then every failure."""
        counts = self.counts()
        lines = [
            f"harvested {self.harvested} kernels ({self.entries} with overloads), selected {self.selected}, "
            f"launched {self.launched()}, " + ", ".join(f"{s} {n}" for s, n in counts.items()),
            f"{len(self.import_failures)} modules not imported, {self.restarts} restarts, {self.seconds:.0f} s",
        ]
        for status in ("skipped", "refused"):
            reasons = collections.Counter(_reason_key(v.detail) for v in self.verdicts.values() if v.status == status)
            lines.extend(f"  {status} x{n}: {reason}" for reason, n in reasons.most_common())
        lines.extend(f"{v.status.upper()} {v.id} ({v.stage}): {v.detail}" for v in self.failures())
        return "\n".join(lines)


def _reason_key(detail: str) -> str:
    """A skip or refusal reason without the names and types that differ from kernel to kernel (for counting)."""
    key = detail.splitlines()[0] if detail else ""
    key = re.sub(r"'[^'\s]*'|\"[^\"\s]*\"", "'…'", key)  # names
    key = re.sub(r"\([^()]*\)|\[[^\[\]]*\]", "(…)", key)  # dims, dtypes, lists
    key = re.sub(r"\b(got (?:scalar )?|array of |type )[\w.]+", r"\1…", key)  # types
    key = re.sub(r" at /\S+", "", key)  # source locations
    return key[:140]


# ======================================================================================================================
# Harvest
# ======================================================================================================================


@dataclasses.dataclass(frozen=True)
class Entry:
    """One kernel of the sweep.

    Args:
        id: ``module:attribute`` (``[overload]`` appended for an overload of a generic kernel).
        kernel: the concrete kernel to launch, or None when it has none (``skip`` says why).
        skip: why the kernel cannot be swept at all, or empty.
    """

    id: str
    kernel: Any
    skip: str = ""


@dataclasses.dataclass(frozen=True)
class Harvest:
    """The kernels found in the wheel's modules.

    Args:
        entries: one `Entry` per concrete kernel (each overload of a generic kernel is one), sorted by id.
        kernels: how many distinct ``wp.Kernel`` objects were found.
        import_failures: module name -> why it could not be imported (one line).
    """

    entries: tuple[Entry, ...]
    kernels: int
    import_failures: dict[str, str]


def module_names() -> list[str]:
    """Every module of `PACKAGES` and `LIBRARIES` (subpackages included, ``__main__`` left out), sorted."""
    names: set[str] = set()
    for root in (*PACKAGES, *LIBRARIES):
        package = importlib.import_module(root)
        names.add(root)
        if hasattr(package, "__path__"):
            for info in pkgutil.walk_packages(package.__path__, f"{root}.", onerror=lambda _name: None):
                if not info.name.endswith(".__main__"):
                    names.add(info.name)
    return sorted(names)


def harvest(modules: Iterable[str] | None = None, *, without_jax_devices: bool = False) -> Harvest:
    """Import ``modules`` (default: `module_names`) and collect their module-level kernels.

    A kernel reachable from several modules is listed under the module that defines it when that module is among
    those imported, else under the first one (in sorted order). Output the imports print is swallowed, and the
    settings in ``wp.config`` an import changes (a debugging walkthrough turns on ``mode = "debug"``) are restored.

    Args:
        modules: the module names to import.
        without_jax_devices: make JAX's device queries raise ``RuntimeError`` while importing (Warp's JAX interop
            tests query them at import, which starts JAX's backend: a process that forks workers must not have one).

    Returns:
        The `Harvest`.

    Example:
        ```python
        found = harvest(["warp.tests.test_generics"])
        assert any(e.id.startswith("warp.tests.test_generics:") for e in found.entries)
        ```
    """
    import warp as wp

    names = sorted(set(module_names() if modules is None else modules))
    failures: dict[str, str] = {}
    found: dict[int, list[tuple[str, str, Any]]] = {}
    for name in names:
        settings = {k: v for k, v in vars(wp.config).items() if not k.startswith("_")}
        try:
            with (
                contextlib.redirect_stdout(io.StringIO()),
                contextlib.redirect_stderr(io.StringIO()),
                warnings.catch_warnings(),
                _no_jax_devices() if without_jax_devices else contextlib.nullcontext(),
            ):
                warnings.simplefilter("ignore")
                module = importlib.import_module(name)
        except BaseException as e:  # SystemExit and the like too: a module that cannot be imported is passed over
            failures[name] = f"{type(e).__name__}: {_first_line(e)}"[:200]
            continue
        finally:
            for key, value in settings.items():
                if getattr(wp.config, key, None) is not value:
                    setattr(wp.config, key, value)
        for attribute, value in sorted(vars(module).items()):
            if isinstance(value, wp.Kernel):
                found.setdefault(id(value), []).append((name, attribute, value))
    entries: list[Entry] = []
    for places in found.values():
        kernel = places[0][2]
        defining = getattr(kernel.func, "__module__", None)
        module, attribute, _ = next((p for p in places if p[0] == defining), places[0])
        base = f"{module}:{attribute}"
        if not kernel.is_generic:
            entries.append(Entry(base, kernel))
        elif not kernel.overloads:
            entries.append(Entry(base, None, "generic kernel without registered overloads (wp.overload)"))
        else:
            entries.extend(Entry(f"{base}[{key}]", overload) for key, overload in sorted(kernel.overloads.items()))
    return Harvest(tuple(sorted(entries, key=lambda e: e.id)), len(found), failures)


@contextlib.contextmanager
def _no_jax_devices() -> Iterator[None]:
    """JAX's device queries raise ``RuntimeError`` inside the block (so nothing starts JAX's backend)."""
    import jax

    names = ("devices", "local_devices", "device_count", "local_device_count")
    saved = {name: getattr(jax, name) for name in names}

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("the kernel sweep imports this module without JAX devices")

    try:
        for name in names:
            setattr(jax, name, refuse)
        yield
    finally:
        for name, value in saved.items():
            setattr(jax, name, value)


def spread(entries: Sequence[Entry], limit: int | None) -> list[Entry]:
    """At most ``limit`` of ``entries``, evenly spread over them (deterministic); all of them when ``limit`` is None."""
    if limit is None or limit >= len(entries):
        return list(entries)
    return [entries[(i * len(entries)) // limit] for i in range(limit)]


def chunk(entries: Sequence[Entry], index: int, count: int) -> list[Entry]:
    """The ``index``-th of ``count`` contiguous, nearly equal parts of ``entries`` (a shard of a sweep).

    Contiguous, so that the kernels of one module (which share its Warp build) mostly fall into one part.

    Raises:
        ValueError: when ``index`` is not in ``0 .. count - 1``.
    """
    if not 0 <= index < count:
        raise ValueError(f"chunk index {index} is not in 0 .. {count - 1}: pick one of the {count} chunks")
    return list(entries[(index * len(entries)) // count : ((index + 1) * len(entries)) // count])


# ======================================================================================================================
# Fabricated arguments
# ======================================================================================================================


class Unfabricable(Exception):
    """The harness cannot fabricate an argument of this kernel.

    Args:
        reason: what it cannot fabricate, naming the parameter.
        param: the parameter, when jarp might refuse its kind itself (then jarp is asked, see `_jarp_refuses`).
    """

    def __init__(self, reason: str, param: str | None = None) -> None:
        super().__init__(reason)
        self.param = param


@dataclasses.dataclass(frozen=True)
class ArrayArg:
    """A fabricated array argument.

    Args:
        name: the parameter's name.
        warp_dtype: the array's Warp element type.
        shape: the array's Warp shape.
        values: the contents in Warp's storage dtype, element dims trailing (the JAX layout).
        kind: ``float``, ``int`` or ``bool``: how results are compared.
        bfloat16: whether ``values`` holds bfloat16 bits (as ``uint16``).
    """

    name: str
    warp_dtype: Any
    shape: tuple[int, ...]
    values: Any
    kind: str
    bfloat16: bool = False

    def jax_value(self) -> Any:
        """The contents as a NumPy array JAX takes (bfloat16 bits viewed as ``ml_dtypes.bfloat16``)."""
        import ml_dtypes

        return self.values.view(ml_dtypes.bfloat16) if self.bfloat16 else self.values.copy()


@dataclasses.dataclass(frozen=True)
class Fabricated:
    """A kernel's fabricated arguments and launch.

    Args:
        args: one value per kernel parameter: an `ArrayArg`, or the value passed for a scalar, vector or matrix
            parameter (the same one to ``wp.launch`` and to jarp).
        dims: the launch dims, ``DIM`` per dimension of ``wp.tid()``.
    """

    args: tuple[Any, ...]
    dims: tuple[int, ...]

    @property
    def arrays(self) -> list[ArrayArg]:
        """The array arguments, in parameter order."""
        return [a for a in self.args if isinstance(a, ArrayArg)]


def _calls(kernel: Any) -> Iterator[tuple[ast.Call, ast.AST | None]]:
    """Every call in the kernel's source, with the statement assigning its result (or None)."""
    tree = ast.parse(textwrap.dedent(kernel.adj.source))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Call):
            yield node.value, node
        elif isinstance(node, ast.Call):
            yield node, None


def _call_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def tid_dims(kernel: Any) -> int:
    """How many dimensions the kernel's ``wp.tid()`` unpacks into (``i, j = wp.tid()``: 2); 1 without ``wp.tid``."""
    dims = 1
    for call, statement in _calls(kernel):
        if _call_name(call) == "tid" and isinstance(statement, ast.Assign):
            target = statement.targets[0]
            if isinstance(target, ast.Tuple):
                dims = max(dims, len(target.elts))
    return min(dims, 4)


def uses_tiles(kernel: Any) -> bool:
    """Whether the kernel's own source calls a tile builtin (``wp.tile_*``, ``wp.tile``, ``wp.untile``)."""
    return any(_call_name(c).startswith(("tile", "untile")) for c, _ in _calls(kernel))


def _scalar_kind(scalar: Any) -> str:
    import warp as wp

    if scalar is wp.bool or scalar is bool:
        return "bool"
    if wp.types.type_is_float(scalar) or scalar is float:
        return "float"
    if wp.types.type_is_int(scalar) or scalar is int:
        return "int"
    raise Unfabricable(f"scalar type {scalar!r}")


def _contents(count: int, kind: str, salt: int) -> Any:
    """``count`` deterministic values: valid indices ``0 .. DIM - 1`` for ints, ``0.125 .. 1.375`` for floats.

    ``salt`` (the parameter's position) makes arrays of one shape and dtype differ, so that a kernel copying one
    into another changes its bytes (the reference launch then sees the write).
    """
    import numpy as np

    k = np.arange(count) + salt
    if kind == "int":
        return (k * 5 + 3) % DIM
    if kind == "bool":
        return k % 3 != 0
    return ((k * 7) % 11 + 1) / 8.0


def _array_arg(name: str, warp_type: Any, salt: int) -> ArrayArg:
    import numpy as np
    import warp as wp

    label = f"parameter {name!r}"
    kind_name = type(warp_type).__name__.lower()
    if "indexed" in kind_name or "fabric" in kind_name:
        raise Unfabricable(f"{label} is a {wp.types.type_repr(warp_type)}", param=name)
    dtype = warp_type.dtype
    if _is_any(dtype):
        raise Unfabricable(f"{label} is an array of Any")
    dtype = _warp_scalar(dtype)
    if hasattr(dtype, "_shape_") and hasattr(dtype, "_wp_scalar_type_"):  # vectors, matrices, quaternions, transforms
        inner, scalar = tuple(dtype._shape_), dtype._wp_scalar_type_
    elif wp.types.type_is_scalar(dtype) or dtype is wp.bool:
        inner, scalar = (), dtype
    else:
        raise Unfabricable(f"{label} is an array of {wp.types.type_repr(dtype)}", param=name)
    if scalar is wp.uint64 and not inner:
        raise Unfabricable(f"{label} is an array of wp.uint64 (ids of Warp objects)")
    kind = _scalar_kind(scalar)
    shape = (DIM,) * warp_type.ndim
    count = math.prod(shape) * math.prod(inner)
    values = _contents(count, kind, salt).reshape(shape + inner)
    bfloat16 = scalar is getattr(wp, "bfloat16", None)
    if bfloat16:
        import ml_dtypes

        values = values.astype(ml_dtypes.bfloat16).view(np.uint16)
    else:
        values = values.astype(wp.dtype_to_numpy(scalar))
    return ArrayArg(name, dtype, shape, values, kind, bfloat16)


def _warp_scalar(t: Any) -> Any:
    """Warp's scalar type for a Python ``int``, ``float`` or ``bool`` annotation; any other type as it is."""
    import warp as wp

    return {int: wp.int32, float: wp.float32, bool: wp.bool}.get(t, t)


def _is_any(t: Any) -> bool:
    return t is Any or getattr(t, "__name__", None) == "Any" or isinstance(t, str)


def _value_arg(name: str, warp_type: Any, salt: int) -> Any:
    """The value passed for a scalar, vector or matrix parameter."""
    import warp as wp

    label = f"parameter {name!r}"
    if _is_any(warp_type):
        raise Unfabricable(f"{label} is Any")
    if warp_type is wp.uint64:
        raise Unfabricable(f"{label} is a wp.uint64 (the id of a Warp object)")
    warp_type = _warp_scalar(warp_type)
    if wp.types.type_is_scalar(warp_type) or warp_type is wp.bool:
        kind = _scalar_kind(warp_type)
        return _SCALAR_STATIC[kind]
    if hasattr(warp_type, "_shape_") and hasattr(warp_type, "_wp_scalar_type_"):
        kind = _scalar_kind(warp_type._wp_scalar_type_)
        count = math.prod(warp_type._shape_)
        values = [v.item() for v in _contents(count, kind, salt)]
        return warp_type(*values)
    raise Unfabricable(f"{label} has type {wp.types.type_repr(warp_type)}", param=name)


def fabricate(kernel: Any) -> Fabricated:
    """Fabricate arguments for ``kernel`` from its parameter annotations.

    Raises:
        Unfabricable: naming the first parameter the harness cannot fabricate (or the tiles the kernel uses).

    Example:
        ```python
        made = fabricate(kernel)
        wp.launch(kernel, made.dims, inputs=[...])
        ```
    """
    import warp as wp

    if uses_tiles(kernel):
        raise Unfabricable("tile kernel (needs a block dim matched to its tiles)")
    args: list[Any] = []
    for salt, arg in enumerate(kernel.adj.args):
        name, warp_type = arg.label, arg.type
        if wp.types.is_array(warp_type):
            args.append(_array_arg(name, warp_type, salt))
        elif getattr(warp_type, "cls", None) is not None and type(warp_type).__name__ == "Struct":
            raise Unfabricable(f"parameter {name!r} is a struct")
        else:
            args.append(_value_arg(name, warp_type, salt))
    return Fabricated(tuple(args), (DIM,) * tid_dims(kernel))


# ======================================================================================================================
# The reference: wp.launch on padded arrays, in a forked process
# ======================================================================================================================


#: What the padding around each array holds in the reference launches: zeros, ones (still valid indices), and hostile
#: values (NaN, a large integer) that make a read outside the array change the result.
PAD_FILLS = ("zero", "one", "hostile")
#: Seconds the reference launches of one kernel may take (its module is built before).
REFERENCE_TIMEOUT = 60.0


def _pad_value(arg: ArrayArg, fill: str) -> Any:
    """One scalar of padding in the storage dtype of ``arg``."""
    import numpy as np

    dtype = arg.values.dtype
    if fill == "zero":
        return np.zeros((), dtype)
    if arg.bfloat16:
        return np.uint16(0x3F80 if fill == "one" else 0x7FC0)  # 1.0, NaN
    if arg.kind == "bool":
        return np.ones((), dtype)
    if arg.kind == "float":
        return np.array(1.0 if fill == "one" else np.nan, dtype)
    return np.array(1 if fill == "one" else min(1_000_003, int(np.iinfo(dtype).max)), dtype)


class _Padded:
    """An array argument in a buffer with as many elements of padding before and after it, for ``wp.launch``."""

    def __init__(self, arg: ArrayArg, fill: str) -> None:
        import numpy as np
        import warp as wp

        flat = arg.values.reshape(-1)
        n = flat.size
        self.arg = arg
        self.buffer = np.empty(3 * n, dtype=flat.dtype)
        self.buffer[:n] = self.buffer[2 * n :] = _pad_value(arg, fill)
        self.buffer[n : 2 * n] = flat
        self.padding = np.concatenate([self.buffer[:n], self.buffer[2 * n :]])
        self.array = wp.array(
            ptr=self.buffer.ctypes.data + n * flat.itemsize,
            dtype=arg.warp_dtype,
            shape=arg.shape,
            capacity=n * flat.itemsize,
            device="cpu",
        )

    def data(self) -> Any:
        """The array's contents now (a copy), in the layout of `ArrayArg.values`."""
        n = self.arg.values.size
        return self.buffer[n : 2 * n].reshape(self.arg.values.shape).copy()

    def padding_intact(self) -> bool:
        """Whether the padding still holds what it was filled with (the kernel wrote nothing outside the array)."""
        import numpy as np

        n = self.arg.values.size
        now = np.concatenate([self.buffer[:n], self.buffer[2 * n :]])
        return now.tobytes() == self.padding.tobytes()


class Skip(Exception):
    """The harness cannot run this kernel (the reason is the message)."""


def reference(kernel: Any, made: Fabricated) -> dict[str, Any]:
    """The arrays' contents after ``wp.launch`` on the fabricated arguments (the reference jarp must match).

    The kernel's module is built here; the launches run in a process forked from this one (`_reference_runs`), so
    that a kernel that writes far outside its arrays, or crashes, on the fabricated arguments harms nothing here.

    Raises:
        Skip: when Warp cannot build the module, or a launch fails, crashes, hangs, writes outside an array, or gives
            results that depend on the padding around the arrays (the kernel reads outside them) or differ from
            launch to launch (it is nondeterministic).
    """
    import warp as wp

    try:
        with contextlib.redirect_stdout(io.StringIO()):
            wp.load_module(kernel.module, device="cpu")
    except Exception as e:
        raise Skip(f"Warp cannot build the kernel's module: {type(e).__name__}: {_first_line(e)}") from e

    def runs() -> tuple[str, Any]:
        try:
            return "ok", _reference_runs(kernel, made)
        except Skip as e:
            return "skip", str(e)

    kind, value = forked(runs, REFERENCE_TIMEOUT)
    if kind == "hung":
        raise Skip(f"wp.launch does not finish in {REFERENCE_TIMEOUT:.0f} s on the fabricated arguments")
    if kind == "crash":
        raise Skip(f"wp.launch crashes on the fabricated arguments ({value})")
    if kind == "error":
        raise Skip(f"the reference launch failed: {value}")
    kind, value = value
    if kind == "skip":
        raise Skip(value)
    return value


def forked(fn: Callable[[], Any], timeout: float) -> tuple[str, Any]:
    """Run ``fn`` in a forked child: ``("ok", its result)``, ``("error", "Type: first line")`` where it raised,
    ``("hung", None)`` past ``timeout`` seconds (the child is killed), ``("crash", "signal N" | "exit code N")``."""
    import pickle

    with tempfile.TemporaryDirectory(prefix="jarp-sweep-fork-") as tmp:
        path = pathlib.Path(tmp) / "result.pickle"
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # never returns
            try:
                try:
                    outcome: tuple[str, Any] = ("ok", fn())
                except BaseException as e:
                    outcome = ("error", f"{type(e).__name__}: {_first_line(e)}")
                path.write_bytes(pickle.dumps(outcome))
                sys.stdout.flush()
            finally:
                os._exit(0)
        deadline = time.monotonic() + timeout
        while True:
            finished, status = os.waitpid(pid, os.WNOHANG)
            if finished:
                break
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return "hung", None
            time.sleep(0.005)
        code = os.waitstatus_to_exitcode(status)
        if code != 0 or not path.exists():
            return "crash", f"signal {-code}" if code < 0 else f"exit code {code}"
        return pickle.loads(path.read_bytes())


def _reference_runs(kernel: Any, made: Fabricated) -> dict[str, Any]:
    """Launch ``kernel`` once per `PAD_FILLS` on fresh copies of the fabricated arguments; the contents after."""
    import warp as wp

    results = []
    for fill in PAD_FILLS:
        padded = {a.name: _Padded(a, fill) for a in made.arrays}
        inputs = [padded[a.name].array if isinstance(a, ArrayArg) else a for a in made.args]
        try:
            wp.launch(kernel, dim=made.dims, inputs=inputs, device="cpu")
            wp.synchronize_device("cpu")
        except Exception as e:
            raise Skip(f"wp.launch fails on the fabricated arguments: {type(e).__name__}: {_first_line(e)}") from e
        outside = [name for name, p in padded.items() if not p.padding_intact()]
        if outside:
            raise Skip(f"wp.launch writes outside array(s) {outside} with the fabricated arguments")
        results.append({name: p.data() for name, p in padded.items()})
    differing = sorted(
        {name for other in results[1:] for name in results[0] if results[0][name].tobytes() != other[name].tobytes()}
    )
    if differing:
        raise Skip(
            f"wp.launch gives {differing} that depend on the padding around the arrays or change from launch to "
            "launch: the kernel reads outside its arrays with the fabricated arguments, or is nondeterministic"
        )
    return results[0]


# ======================================================================================================================
# jarp's call and the comparison
# ======================================================================================================================


class Refused(Exception):
    """jarp refused the kernel or its call with a ``TypeError``/``ValueError`` of its own (the message)."""


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""


def _raised_by_jarp(e: BaseException) -> bool:
    """Whether ``e`` was raised from a frame in the jarp package."""
    import jarp

    package = str(pathlib.Path(jarp.__file__).resolve().parent)
    tb = e.__traceback__
    last = None
    while tb is not None:
        last = tb.tb_frame.f_code.co_filename
        tb = tb.tb_next
    return last is not None and str(pathlib.Path(last).resolve()).startswith(package)


def _jarp_refuses(kernel: Any, param: str) -> str | None:
    """jarp's message when it refuses the kind of parameter ``param`` at construction, else None."""
    from jarp.warp import jax_kernel

    try:
        jax_kernel(kernel, num_outputs=1)
    except (TypeError, ValueError) as e:
        if _raised_by_jarp(e) and repr(param) in str(e):
            return str(e)
    except Exception:
        return None
    return None


def run_jarp(kernel: Any, made: Fabricated, written: Sequence[str]) -> tuple[list[str], tuple[Any, ...], list[Any]]:
    """Build the jarp module with ``written`` in-out and call it under ``jax.jit`` on the fabricated values.

    A kernel jarp judges to write more arrays than the reference launch changed (it wrote the same values, or a
    branch not taken here) is built again with those arrays in-out too. A kernel that writes nothing declares its
    first array in-out (jarp needs an output).

    Returns:
        The in-out names (parameter order), jarp's outputs as NumPy arrays, and the JAX input arrays after the call.

    Raises:
        Refused: jarp raised a ``TypeError``/``ValueError`` from its own code.
    """
    import jax
    import numpy as np

    from jarp.warp import jax_kernel

    names = [a.name for a in made.arrays]
    in_out = [n for n in names if n in written] or names[:1]
    module = None
    while module is None:
        try:
            module = jax_kernel(
                kernel, num_outputs=max(len(in_out), 1), in_out_argnames=tuple(in_out), launch_dims=made.dims
            )
        except (TypeError, ValueError) as e:
            if not _raised_by_jarp(e):
                raise
            more = _WRITES_INPUTS.search(str(e))
            extra = {m.strip().strip("'\"") for m in more.group(1).split(",")} if more else set()
            widened = [n for n in names if n in in_out or n in extra]
            if widened == in_out:
                raise Refused(str(e)) from e
            in_out = widened
    arrays = [jax.numpy.asarray(a.jax_value()) for a in made.arrays]

    def call(*operands: Any) -> Any:
        it = iter(operands)
        return module(*(next(it) if isinstance(a, ArrayArg) else a for a in made.args))

    try:
        outputs = jax.jit(call)(*arrays)
        outputs = [np.asarray(o) for o in jax.block_until_ready(outputs)]
    except (TypeError, ValueError) as e:
        if _raised_by_jarp(e):
            raise Refused(str(e)) from e
        raise
    return in_out, tuple(outputs), arrays


def compare(arg: ArrayArg, expected: Any, got: Any) -> str | None:
    """None when ``got`` (jarp's) equals ``expected`` (Warp's contents of ``arg``), else the first difference."""
    import numpy as np

    got = np.asarray(got)
    if arg.bfloat16:
        import ml_dtypes

        expected = expected.view(ml_dtypes.bfloat16)
    if got.shape != expected.shape:
        return f"{arg.name}: shape {got.shape}, Warp's {expected.shape}"
    if got.dtype != expected.dtype:
        return f"{arg.name}: dtype {got.dtype}, Warp's {expected.dtype}"
    if arg.kind == "float":
        rtol, atol = TOLERANCES.get(expected.dtype.itemsize, TOLERANCES[4])
        a, b = got.astype(np.float64), expected.astype(np.float64)
        bad = ~np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
    else:
        bad = got != expected
    if not bad.any():
        return None
    where = tuple(int(i) for i in np.argwhere(bad)[0])
    count = f"{int(bad.sum())} of {bad.size} differ"
    return f"{arg.name}: {count}, first at {where}: jarp {got[where]!r}, Warp {expected[where]!r}"


def check(entry: Entry, progress: Any = None) -> Verdict:
    """Run one kernel: fabricate, reference launches, jarp's call, compare. Never raises (but may crash).

    Args:
        entry: the kernel.
        progress: called with the stage name before each stage (the child logs it, to name where a crash was).
    """
    start = time.monotonic()
    stage = "harvest"

    def verdict(status: str, detail: str) -> Verdict:
        return Verdict(entry.id, status, detail, stage, round(time.monotonic() - start, 3))

    def enter(name: str) -> None:
        nonlocal stage
        stage = name
        if progress is not None:
            progress(name)

    if entry.kernel is None:
        return verdict("skipped", entry.skip)
    kernel = entry.kernel
    enter("fabricate")
    try:
        made = fabricate(kernel)
    except Unfabricable as e:
        message = _jarp_refuses(kernel, e.param) if e.param else None
        return verdict("refused", message) if message else verdict("skipped", f"cannot fabricate: {e}")
    except Exception as e:  # an annotation the harness does not know
        return verdict("skipped", f"cannot fabricate: {type(e).__name__}: {_first_line(e)}")
    enter("warp")
    try:
        expected = reference(kernel, made)
    except Skip as e:
        return verdict("skipped", str(e))
    written = [a.name for a in made.arrays if expected[a.name].tobytes() != a.values.tobytes()]
    if written and os.environ.get(FAULT_ENV) == f"perturb:{entry.id}":  # the harness's own test: Warp's result changed
        values = expected[written[0]].copy()
        values.reshape(-1)[0] = ~values.reshape(-1)[0] if values.dtype == bool else values.reshape(-1)[0] + 1
        expected = {**expected, written[0]: values}
    enter("jarp")
    try:
        in_out, outputs, inputs_after = run_jarp(kernel, made, written)
    except Refused as e:
        return verdict("refused", str(e))
    except Exception as e:
        return verdict("error", f"{type(e).__name__}: {_first_line(e)} [{_where(e)}]")
    enter("compare")
    by_name = {a.name: a for a in made.arrays}
    if len(outputs) != len(in_out):
        return verdict("mismatch", f"{len(outputs)} outputs for in-out {in_out}")
    problems = [compare(by_name[n], expected[n], out) for n, out in zip(in_out, outputs, strict=True)]
    for arg, after in zip(made.arrays, inputs_after, strict=True):
        if arg.name not in in_out:
            changed = compare(arg, arg.values, after)
            problems.append(f"jarp wrote input {changed}" if changed else None)
    problems = [p for p in problems if p]
    if problems:
        return verdict("mismatch", "; ".join(problems))
    return verdict("equal", f"in-out {in_out}" + ("" if written else " (writes nothing)"))


def _where(e: BaseException) -> str:
    """The innermost frame of ``e``'s traceback, as ``file:line``."""
    frames = traceback.extract_tb(e.__traceback__)
    return f"{pathlib.Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else "?"


# ======================================================================================================================
# Progress records
# ======================================================================================================================


class Progress:
    """What a sweep's output file says so far, read as its processes append to it.

    The child and its workers append one JSON record a line: ``harvest`` (the totals), then for each kernel
    ``start``, a ``stage`` before each of its stages and its ``verdict`` (`tests.support.warp_kernel_verdicts` adds
    a ``detail``), and at the end ``done`` (with the crashes the child survived) or ``failed``. `read` takes the
    complete lines added since the last call (a line still being written waits for the next one) and follows them.

    Args:
        path: the output file.
        offset: where to start reading (a worker's watcher starts at the end of what earlier workers wrote).

    Attributes:
        records: every record read, in order.
        current: the kernel a ``start`` named and no ``verdict`` has ended yet (None between kernels).
        stage: ``current``'s stage (``harvest`` until its first ``stage`` record).
        finished: whether the ``done`` record was read.
        crashes: the crashes the ``done`` record counts.
        failure: the ``failed`` record's reason, or empty.
        totals: the ``harvest`` record's totals (empty before it).
        last: ``time.monotonic()`` when a record was last read (or the reader made).

    Example:
        ```python
        progress = Progress(output)
        while worker_running():
            progress.read()
            if time.monotonic() - progress.last > timeout:
                kill_worker()
        ```
    """

    def __init__(self, path: pathlib.Path, offset: int = 0) -> None:
        self.path = path
        self.offset = offset
        self.records: list[dict[str, Any]] = []
        self.current: str | None = None
        self.stage = ""
        self.finished = False
        self.crashes = 0
        self.failure = ""
        self.totals: dict[str, Any] = {}
        self.last = time.monotonic()

    def read(self) -> list[dict[str, Any]]:
        """The records of the complete lines added since the last call (lines that are not JSON are passed over)."""
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        complete = data[: data.rfind(b"\n") + 1]
        self.offset += len(complete)
        new = []
        for line in complete.decode(errors="replace").splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                new.append(json.loads(line))
        for record in new:
            if "harvest" in record:
                self.totals = self.totals or record["harvest"]
            elif "start" in record:
                self.current, self.stage = record["start"], "harvest"
            elif "stage" in record:
                self.stage = record["stage"]
            elif "verdict" in record:
                self.current = None
            elif "done" in record:
                self.finished = True
                self.crashes += record.get("crashes", 0)
            elif "failed" in record:
                self.failure = record["failed"]
        if new:
            self.last = time.monotonic()
        self.records.extend(new)
        return new


# ======================================================================================================================
# The child process
# ======================================================================================================================


def _child_main(config_path: str, output: str) -> None:
    """The sweep's child: harvest and select as ``config_path`` says, then check the kernels in forked workers.

    Each worker is forked from this process (which has imported the kernels but has run none, and has no JAX
    backend yet) and checks kernels one after the other, appending one JSON line per step to ``output``. A worker
    that dies or hangs is replaced by a new one that goes on after the kernel it was on, which is recorded as a
    crash (in jarp's call) or as skipped (in the harness's own stages or Warp's reference launches).
    """
    config = json.loads(pathlib.Path(config_path).read_text())
    import jax

    jax.config.update("jax_enable_x64", True)
    import warp as wp

    wp.config.quiet = True
    warnings.simplefilter("ignore")
    with open(output, "a", encoding="utf-8") as out:

        def write(record: dict[str, Any]) -> None:
            out.write(json.dumps(record) + "\n")
            out.flush()

        with contextlib.redirect_stdout(io.StringIO()):
            wp.init()
        found = harvest(config.get("modules"), without_jax_devices=True)
        from jax._src import xla_bridge

        if getattr(xla_bridge, "backends_are_initialized", lambda: False)():
            # forked workers would inherit a backend whose threads they do not have, and hang in it
            write({"failed": "importing the kernels' modules started JAX's backend, so workers cannot be forked"})
            return
        entries = list(found.entries)
        if config.get("ids") is not None:
            wanted = set(config["ids"])
            missing = wanted - {e.id for e in entries}
            entries = [e for e in entries if e.id in wanted]
            for name in sorted(missing):
                write({"verdict": dataclasses.asdict(Verdict(name, "skipped", "not found by the harvest", "harvest"))})
        entries = spread(entries, config.get("limit"))
        if config.get("chunk") is not None:
            entries = chunk(entries, *config["chunk"])
        write(
            {
                "harvest": {
                    "kernels": found.kernels,
                    "entries": len(found.entries),
                    "selected": len(entries),
                    "import_failures": found.import_failures,
                    "ids": [e.id for e in found.entries],
                    "selected_ids": [e.id for e in entries],
                }
            }
        )
        done = set(config.get("exclude", ()))
        pending = [e for e in entries if e.id not in done]
        kernel_timeout = float(config.get("kernel_timeout", 300.0))
        crashes = 0
        while pending:
            out.flush()
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:  # the worker: never returns into this function
                status = 1
                try:
                    _worker(pending, output)
                    status = 0
                finally:
                    os._exit(status)
            current, stage, ended = _watch_worker(pid, output, kernel_timeout)
            done |= {r["verdict"]["id"] for r in Progress(pathlib.Path(output)).read() if "verdict" in r}
            if current is not None and current not in done:
                status = "crash" if stage in ("jarp", "compare") else "skipped"
                what = "jarp's call" if status == "crash" else f"the {stage} stage"
                write({"verdict": dataclasses.asdict(Verdict(current, status, f"the worker {ended} in {what}", stage))})
                done.add(current)
                crashes += 1
            remaining = [e for e in pending if e.id not in done]
            if len(remaining) == len(pending):
                write({"failed": f"a worker {ended} before checking any kernel"})
                break
            pending = remaining
        write({"done": True, "crashes": crashes})


def _worker(entries: Sequence[Entry], output: str) -> None:
    """Check ``entries`` in order, appending ``start``, ``stage`` and ``verdict`` lines to ``output``."""
    with open(output, "a", encoding="utf-8") as out:

        def write(record: dict[str, Any]) -> None:
            out.write(json.dumps(record) + "\n")
            out.flush()

        fault, _, target = os.environ.get(FAULT_ENV, "").partition(":")
        for entry in entries:

            def progress(stage: str, entry: Entry = entry) -> None:
                write({"stage": stage})
                if stage == "jarp" and entry.id == target:  # the harness's own test: a crash or hang in jarp's call
                    if fault == "abort":
                        os.abort()
                    while fault == "hang":
                        time.sleep(1.0)

            write({"start": entry.id})
            result = check(entry, progress=progress)
            write({"verdict": dataclasses.asdict(result)})
            sys.stdout.flush()


def _watch_worker(pid: int, output: str, kernel_timeout: float) -> tuple[str | None, str, str]:
    """Wait for worker ``pid``, killing it when one kernel makes no progress for ``kernel_timeout`` seconds.

    Returns:
        The kernel it was on when it ended (None when between kernels), that kernel's stage, and how it ended.
    """
    path = pathlib.Path(output)
    progress = Progress(path, offset=path.stat().st_size)
    while True:
        finished, status = os.waitpid(pid, os.WNOHANG)
        progress.read()
        if finished:
            code = os.waitstatus_to_exitcode(status)
            return (
                progress.current,
                progress.stage,
                f"exited with code {code}" if code >= 0 else f"died of signal {-code}",
            )
        if time.monotonic() - progress.last > kernel_timeout:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return progress.current, progress.stage, f"hung for {kernel_timeout:.0f} s"
        time.sleep(0.1)


# ======================================================================================================================
# The parent side
# ======================================================================================================================


def run_sweep(
    ids: Sequence[str] | None = None,
    *,
    modules: Sequence[str] | None = None,
    limit: int | None = None,
    kernel_timeout: float = 300.0,
    timeout: float | None = None,
    max_restarts: int = 25,
) -> SweepReport:
    """Run the sweep in child processes; a kernel that crashes or hangs a child is recorded, and a new child goes on.

    Args:
        ids: the kernel ids to run (default: all harvested).
        modules: the modules to import (default: `module_names`); name the modules of ``ids`` to harvest faster.
        limit: run at most this many kernels, evenly spread over the selection (`spread`).
        kernel_timeout: seconds one kernel may take (a first launch compiles its whole Warp module) before the
            child is killed and the kernel is recorded as hung.
        timeout: seconds for the whole sweep; the kernels not reached are left out of the report.
        max_restarts: how many crashes or hangs the sweep survives.

    Returns:
        The `SweepReport`.

    Raises:
        RuntimeError: when a child fails outside a kernel (in the harvest), with its output.

    Example:
        ```python
        report = run_sweep(limit=50)
        print(report.summary())
        ```
    """
    started = time.monotonic()
    verdicts: dict[str, Verdict] = {}
    totals: dict[str, Any] = {}
    log_tail = ""
    restarts = 0
    with tempfile.TemporaryDirectory(prefix="jarp-kernel-sweep-") as tmp:
        config_path = pathlib.Path(tmp) / "config.json"
        while True:
            config = {
                "ids": None if ids is None else list(ids),
                "modules": modules,
                "limit": limit,
                "kernel_timeout": kernel_timeout,
            }
            config["exclude"] = sorted(verdicts)
            config_path.write_text(json.dumps(config))
            output = pathlib.Path(tmp) / f"results{restarts}.jsonl"
            output.touch()
            log_path = pathlib.Path(tmp) / f"log{restarts}.txt"
            # the child replaces a worker that crashes or hangs itself; this covers the child dying or hanging
            progress, ended = run_child(
                "tests.support.warp_kernel_sweep",
                config_path,
                output,
                log_path,
                kernel_timeout + 120.0,
                timeout,
                started,
            )
            for record in progress.records:
                if "verdict" in record:
                    v = Verdict(**record["verdict"])
                    verdicts[v.id] = v
            totals = progress.totals or totals
            restarts += progress.crashes
            current, stage, failure = progress.current, progress.stage, progress.failure
            log_tail = (log_tail + log_path.read_text(errors="replace"))[-8000:]
            if failure or (not progress.finished and current is None and ended != "sweep timed out"):
                raise RuntimeError(f"the sweep's child failed outside a kernel ({failure or ended}):\n{log_tail}")
            if progress.finished or ended == "sweep timed out":
                break
            status = "crash" if stage in ("jarp", "compare") else "skipped"
            what = "jarp's call" if status == "crash" else f"the {stage} stage"
            verdicts[current] = Verdict(current, status, f"the sweep's child {ended} in {what}", stage)
            restarts += 1
            if restarts > max_restarts:
                break
    return SweepReport(
        verdicts,
        totals.get("kernels", 0),
        totals.get("entries", 0),
        totals.get("selected", 0),
        totals.get("import_failures", {}),
        restarts,
        round(time.monotonic() - started, 1),
        log_tail,
    )


def run_child(
    module: str,
    config: pathlib.Path,
    output: pathlib.Path,
    log: pathlib.Path,
    kernel_timeout: float,
    timeout: float | None,
    started: float,
) -> tuple[Progress, str]:
    """Run one child (``python -m module --child config output``) until it finishes, dies, or hangs.

    The child runs on the CPU only, without the caller's ``JAX_ENABLE_X64``, in a session of its own (killed whole).

    Args:
        module: the module whose ``--child`` runs the sweep (this one, or `tests.support.warp_kernel_verdicts`).
        config: the child's configuration (JSON).
        output: the file the child and its workers append their records to.
        log: the file for the child's stdout and stderr.
        kernel_timeout: seconds without a record, while on a kernel, before the child is killed as hung.
        timeout: seconds since ``started`` before the child is killed (the sweep timed out), or None.
        started: ``time.monotonic()`` when the sweep started.

    Returns:
        The `Progress` read from ``output`` (whether it finished, the kernel it was on and that kernel's stage when it
        did not), and how it ended (empty when it finished).
    """
    command = [sys.executable, "-m", module, "--child", str(config), str(output)]
    env = child_environment()
    env.update({"JAX_PLATFORMS": "cpu", "CUDA_VISIBLE_DEVICES": ""})
    env.pop("JAX_ENABLE_X64", None)
    with open(log, "w") as log_file:
        proc = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
        )
    progress = Progress(output)
    ended = ""
    while True:
        returncode = proc.poll()
        progress.read()
        if returncode is not None:
            if not progress.finished:
                ended = f"exited with code {returncode}" if returncode >= 0 else f"died of signal {-returncode}"
            break
        now = time.monotonic()
        if timeout is not None and now - started > timeout:
            ended = "sweep timed out"
        elif progress.current is not None and now - progress.last > kernel_timeout:
            ended = f"hung for {kernel_timeout:.0f} s"
        if ended:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            break
        time.sleep(0.2)
    return progress, ended


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: ``--child CONFIG OUTPUT`` in a child process, else a sweep whose summary is printed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=2, metavar=("CONFIG", "OUTPUT"), help=argparse.SUPPRESS)
    parser.add_argument("--limit", type=int, default=None, help="at most this many kernels, evenly spread")
    parser.add_argument("--list", action="store_true", help="print the harvested kernel ids and exit")
    parser.add_argument("--json", metavar="PATH", help="also write every verdict to PATH as JSON")
    parser.add_argument("ids", nargs="*", help="kernel ids to run (default: all)")
    args = parser.parse_args(argv)
    if args.child:
        _child_main(*args.child)
        return 0
    if args.list:
        found = harvest()
        for entry in spread(found.entries, args.limit):
            print(entry.id)
        return 0
    report = run_sweep(args.ids or None, limit=args.limit)
    print(report.summary())
    if args.json:
        records = [dataclasses.asdict(v) for v in sorted(report.verdicts.values(), key=lambda v: v.id)]
        pathlib.Path(args.json).write_text(json.dumps(records, indent=1))
    return 1 if report.failures() else 0


if __name__ == "__main__":
    sys.exit(main())
