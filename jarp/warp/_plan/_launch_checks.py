"""Launch configuration checks: the block dim, launch extents and ``wp.tid()``'s 32-bit coordinates.

jarp follows Warp's rules (``wp.jax_kernel`` in Warp >= 1.16) and reports a
violation at trace time, where the call is, rather than from inside the FFI
callback:

* ``block_dim`` is a positive int (or None for Warp's default), at most 1024 (the
  CUDA limit on threads per block, and Warp's CPU limit).
* A launch extent may exceed ``2**31 - 1`` only in a dimension the kernel provably
  never reads through ``wp.tid()``: a dimension past the kernel's ``wp.tid()`` arity
  (its threads share coordinates), or any dimension when code generation proves
  that ``wp.tid()`` is never used. Warp's generated code decides that, for the
  module variant of each block dim a launch may use.
* Warp arrays have 32-bit dims, so no array argument may have a dim above ``2**31 - 1``.

A launch longer than an array the kernel indexes with ``wp.tid()`` on every thread is refused. A launch jarp
inferred (no ``launch_dims`` given: the first array argument's shape, Warp's rule) that is shorter than such an
array is legal but leaves part of the array untouched, so it raises a `LaunchDimsWarning`, once per plan.
"""

from __future__ import annotations

import math
import operator
import os
import sys
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import warp as wp

from .._upstream import _locks, _warp_kernels, _warp_launches
from ._arg_spec import MAX_WARP_NDIM, ArgSpec
from ._normalize import MAX_EXTENT, normalize_dims
from ._values import Buffer, Param

MAX_BLOCK_DIM = 1024
# launch bounds carry the thread count as a size_t, and XLA sizes buffers with int64
_MAX_LAUNCH_SIZE = 2**63 - 1


class LaunchDimsWarning(UserWarning):
    """A launch over inferred dims stops short of an array the kernel indexes with ``wp.tid()`` on every thread.

    Without ``launch_dims`` (at construction or per call) a `jarp.warp.jax_kernel` launches over the first array
    argument's Warp shape, as Warp does. When the kernel indexes a longer array (or struct array field) at every
    thread's own index, the elements past the launch are never read or written: usually a forgotten
    ``launch_dims``. Passing ``launch_dims`` explicitly, even equal to the inferred dims, silences it.
    """


def check_block_dim(value: Any, what: str) -> int | None:
    """Validate a ``block_dim`` option: None, or an int in ``[1, 1024]`` (NumPy integers accepted).

    Args:
        value: the option's value.
        what: the caller, for error messages (e.g. ``"jax_kernel()"``).

    Returns:
        None, or the block dim as a Python int.

    Raises:
        TypeError: for a bool or a non-integer.
        ValueError: for a value that is not positive or is above 1024.

    Example:
        ```python
        assert check_block_dim(np.int64(64), "jax_kernel()") == 64
        ```
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError(
            f"{what}: block_dim must be an integer or None, got {value!r}; pass the number of threads per block "
            "(e.g. 64 or 256), or None for Warp's default (256 on CUDA, 1 on the CPU)."
        )
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(
            f"{what}: block_dim must be an integer or None, got {value!r} ({type(value).__name__}); pass the number "
            "of threads per block (e.g. 64 or 256), or None for Warp's default (256 on CUDA, 1 on the CPU)."
        ) from None
    if value <= 0:
        raise ValueError(
            f"{what}: block_dim must be positive, got {value}; pass the number of threads per block (e.g. 64 or "
            "256), or None for Warp's default (256 on CUDA, 1 on the CPU)."
        )
    if value > MAX_BLOCK_DIM:
        raise ValueError(
            f"{what}: block_dim must be at most {MAX_BLOCK_DIM} (the CUDA limit on threads per block, and Warp's "
            f"CPU limit), got {value}."
        )
    return int(value)


def normalize_launch_dims(value: Any, what: str) -> tuple[int, ...]:
    """Turn launch dims (an int or a sequence of ints) into a tuple of 1 to 4 non-negative ints.

    Unlike array dims, a launch extent may exceed ``2**31 - 1``; `check_launch` then
    decides, with the kernel, whether ``wp.tid()`` can represent it.

    Raises:
        TypeError: for something that is not an int or a sequence of ints.
        ValueError: for no dims or more than Warp's 4, a negative extent, or a launch of more than ``2**63 - 1``
            threads.
    """
    dims = normalize_dims(value, what, max_extent=None)
    if not 1 <= len(dims) <= MAX_WARP_NDIM:
        raise ValueError(f"{what} must have 1 to {MAX_WARP_NDIM} dims, got {dims}.")
    if math.prod(dims) > _MAX_LAUNCH_SIZE:
        raise ValueError(f"{what}: {dims} launches more than 2**63 - 1 threads.")
    return dims


def _target_block_dims(block_dim: int | None) -> tuple[int, ...]:
    """The block dims a launch with ``block_dim`` may build its module variant for, on any platform."""
    cuda = 256 if block_dim is None else block_dim
    return (cuda,) if cuda == 1 else (cuda, 1)


def check_launch(kernel: wp.Kernel, dims: tuple[int, ...], block_dim: int | None, what: str) -> None:
    """Check that ``kernel`` can be launched over ``dims`` on any platform (Warp's FFI check at trace time).

    Tracing does not know the device the program will run on, so as in Warp the
    check covers the module variants for the CUDA block dim (``block_dim``, or 256)
    and for the CPU's (1). It costs nothing unless the launch has more than
    ``2**31`` threads; then Warp generates the variant's code once to learn whether
    the kernel uses ``wp.tid()``.

    Raises:
        ValueError: if an extent the kernel reads through ``wp.tid()`` exceeds ``2**31``,
            with Warp's message.
    """
    if math.prod(dims) <= _warp_kernels.TID_MAX_EXTENT:
        return
    for bd in _target_block_dims(block_dim):
        try:
            _warp_launches.launch_bounds(kernel, dims, bd)
        except ValueError as e:
            raise ValueError(
                f"{what}: launch_dims {dims}: {e} The kernel reads that dimension through wp.tid(), so pass "
                f"launch_dims of at most {_warp_kernels.TID_MAX_EXTENT} along it (split the work into several launches "
                "with an offset argument, or spread it over more launch dims); only dims the kernel never reads "
                "through wp.tid() may be larger."
            ) from None


def _array_buffers(
    params: Sequence[Param], operands: Sequence[Buffer], results: Sequence[Buffer]
) -> list[tuple[ArgSpec, Buffer]]:
    """Each array parameter, and each struct array field (its spec named ``s.field``), with its buffer."""
    arrays = []
    for p in params:
        b = p.primal
        if p.spec.is_struct:  # a struct's array fields are operands
            arrays.extend((leaf, operands[i]) for leaf, i in zip(p.spec.struct.array_specs, b.fields, strict=True))
        elif p.spec.is_array and b.source in ("operand", "result"):
            arrays.append((p.spec, operands[b.index] if b.source == "operand" else results[b.index]))
    return arrays


def check_array_extents(
    params: Sequence[Param], operands: Sequence[Buffer], results: Sequence[Buffer], what: str
) -> None:
    """Check that every array argument's Warp dims fit Warp's 32-bit array dims.

    Raises:
        ValueError: naming the argument whose dim is above ``2**31 - 1``.
    """
    for spec, buf in _array_buffers(params, operands, results):
        dims = buf.shape[: spec.warp_ndim]
        if any(n > MAX_EXTENT for n in dims):
            raise ValueError(
                f"{what}: argument {spec.name!r} has dims {dims}, but Warp arrays have 32-bit dims (at most "
                f"2**31 - 1 = {MAX_EXTENT}); split it into several arrays or launches."
            )


def check_tid_indexed(
    accesses: Sequence[tuple[str, int, int]],
    params: Sequence[Param],
    operands: Sequence[Buffer],
    results: Sequence[Buffer],
    launch_dims: tuple[int, ...],
    what: str,
) -> None:
    """Refuse a launch longer than an array the kernel indexes at every thread's own index.

    Args:
        accesses: ``(path, array dim, tid component)`` from `_analysis.tid_indexed`.
        params: the plan's parameters; operands, results: its buffers.
        launch_dims: the launch dims.
        what: the module's name, for the message.

    Raises:
        ValueError: naming the array (or struct field), its extent, the launch and the fix.
    """
    if not accesses or math.prod(launch_dims) == 0:  # an empty launch runs no thread
        return
    for path, dim, component, extent in _tid_extents(accesses, params, operands, results, launch_dims):
        if extent < launch_dims[component]:
            threads = launch_dims[component]
            raise ValueError(
                f"{what}: the kernel indexes {path} with wp.tid() on every thread (dim {dim} of {path} by thread "
                f"index {component}), but {path} has {extent} elements there and the launch runs {threads} "
                f"threads (launch dims {launch_dims}); the threads past {extent - 1} would read or write out of "
                "bounds. Without launch_dims jarp launches over the first array argument's shape, as Warp does: "
                f"pass launch_dims= the extent of what the kernel iterates over (here {path}'s, {extent}), or "
                f"give {path} at least {threads} elements."
            )


def _tid_extents(
    accesses: Sequence[tuple[str, int, int]],
    params: Sequence[Param],
    operands: Sequence[Buffer],
    results: Sequence[Buffer],
    launch_dims: tuple[int, ...],
) -> Iterator[tuple[str, int, int, int]]:
    """Each access whose array and launch dim exist, with the array's extent there: ``(path, dim, component, n)``."""
    shapes = {spec.name: buf.shape[: spec.warp_ndim] for spec, buf in _array_buffers(params, operands, results)}
    for path, dim, component in accesses:
        shape = shapes.get(path)
        if shape is None or dim >= len(shape) or component >= len(launch_dims):
            continue
        yield path, dim, component, shape[dim]


# The inferred-launch warnings given so far, by text: a plan is built again at every trace of its call (a new
# ``jax.jit``, an eager ``jax.vmap`` or ``jax.grad``), and its warning is worth reading once.
_warned_launches: set[str] = set()
_warned_lock = _locks.make("launch_warnings")


def warn_short_inferred_launch(
    accesses: Sequence[tuple[str, int, int]],
    params: Sequence[Param],
    operands: Sequence[Buffer],
    results: Sequence[Buffer],
    launch_dims: tuple[int, ...],
    what: str,
) -> None:
    """Warn, once per plan, when inferred launch dims stop short of an array the kernel indexes at every thread.

    Call it only for launch dims no caller gave (the first array argument's shape). An array the kernel indexes
    with ``wp.tid()`` on every thread that is longer than the launch along that dim has elements no thread reaches.
    An empty launch is left alone: it is an empty problem, not a forgotten ``launch_dims``.

    Args:
        accesses: ``(path, array dim, tid component)`` from `_analysis.tid_indexed`.
        params: the plan's parameters; operands, results: its buffers.
        launch_dims: the inferred launch dims.
        what: the module's name, for the message.

    Warns:
        LaunchDimsWarning: naming each longer array (or struct field), its extent, the launch dims and the fix.
    """
    if math.prod(launch_dims) == 0:
        return  # an empty first array: an empty problem (its larger outputs come back zero), not a missed launch
    found = list(_tid_extents(accesses, params, operands, results, launch_dims))
    longer = [(path, dim, c, n) for path, dim, c, n in found if n > launch_dims[c]]
    if not longer:
        return
    suggested = list(launch_dims)
    for _, _, component, extent in longer:
        suggested[component] = max(suggested[component], extent)
    full = tuple(suggested)

    def where(path: str, dim: int, component: int, extent: int) -> str:
        elements = f"{extent} element{'' if extent == 1 else 's'}"
        if len(launch_dims) == 1:
            return f"{path} ({elements})"
        return f"{path} (dim {dim}: {elements}, by thread index {component})"

    arrays = " and ".join(where(*access) for access in longer)
    short = [(path, dim, c, n) for path, dim, c, n in found if n < full[c]]
    caveat = "".join(
        f"; {where(*access)} is then too short: give it at least {full[access[2]]}" for access in dict.fromkeys(short)
    )
    message = (
        f"{what}: no launch_dims was given, so the launch follows the first array argument's Warp shape (Warp's "
        f"rule): launch dims {launch_dims}. But the kernel indexes {arrays} with wp.tid() on every thread, so no "
        f"thread reads or writes {'its' if len(longer) == 1 else 'their'} elements past the launch. Pass "
        f"launch_dims= the extent of what the kernel iterates over, e.g. launch_dims={full}{caveat}; or pass "
        f"launch_dims={launch_dims} to keep this launch and silence this warning."
    )
    with _warned_lock:
        if message in _warned_launches:
            return
        _warned_launches.add(message)
    try:
        warnings.warn(message, LaunchDimsWarning, stacklevel=_caller_stacklevel())
    except BaseException:
        # the warning was raised as an error (a warnings filter): the next build of the plan raises it again
        with _warned_lock:
            _warned_launches.discard(message)
        raise


def _caller_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside jarp, JAX and Equinox: the user's call, traced or eager."""
    internal = tuple(
        os.path.dirname(module.__file__ or "") + os.sep
        for module in (sys.modules.get(name) for name in ("jarp", "jax", "jaxlib", "equinox"))
        if module is not None and module.__file__
    )
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and (
        frame.f_code.co_filename.startswith(internal)
        or frame.f_code.co_filename.endswith(("<string>", "contextlib.py"))
    ):
        frame, level = frame.f_back, level + 1
    return level  # counted from this function's caller, as `warnings.warn` counts from its own


def check_cuda_signature(kernel: wp.Kernel, block_dim: int | None, what: str) -> None:
    """Check that ``kernel``'s CUDA entry points take only the parameters jarp passes (at lowering for CUDA).

    Warp's deterministic mode appends hidden buffers to the CUDA signatures of the kernels it makes
    deterministic, which ``wp.launch`` alone supplies (`_warp_launches.cuda_hidden_params`); a jarp
    launch would pass too few parameters. The CPU signatures are unchanged, so this is checked for
    CUDA only: when a plan is lowered for CUDA, and again when a CUDA executor is built.

    Raises:
        NotImplementedError: naming the feature, the kernel and what to do instead.
    """
    feature = _warp_launches.cuda_hidden_params(kernel, block_dim)
    if feature is None:
        return
    raise NotImplementedError(
        f"{what}: kernel {kernel.key!r} (Warp module {kernel.module.name!r}) is built in Warp's {feature}, which "
        "adds hidden parameters to its CUDA entry points that only wp.launch supplies, so jarp cannot launch it on "
        "CUDA. Turn deterministic mode off for this kernel's module (wp.set_module_options({'deterministic': "
        "wp.DeterministicMode.NOT_GUARANTEED}) in that module, or wp.config.deterministic before the module is "
        "created), move the kernel to a module without it, wrap the wp.launch in jarp.warp.jax_callable (which "
        "launches through wp.launch), or run it on the CPU, where its signature is unchanged."
    )
