"""User derivative rules (``jvp=`` / ``vjp=``) on jarp modules.

Warp's adjoint gives reverse mode only. A user who also writes a tangent kernel
(a Hessian-vector product, say) hands it to a module as ``jvp=``; jarp then wraps
the call in a ``jax.custom_jvp`` whose tangent is a `_linear.linear_call` of that
module, with the ``vjp=`` module (or Warp's adjoint of the ``jvp`` module) as its
transpose. Forward mode (``jax.jvp``, ``jacfwd``, ``linearize``) uses the tangent
kernel; reverse mode transposes it, so ``jax.grad`` keeps working.

Conventions (``inputs`` are the module's call arguments, scalars included):

* ``jvp(*inputs, *tangents)`` returns one tangent per output, where ``tangents``
  has one entry per floating-point array input, in order;
* ``vjp(*inputs, *cotangents)`` returns one cotangent per floating-point array
  input, given one cotangent per output.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.core  # `import jax` loads it, but only this import declares it to type checkers
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import SymbolicZero

from .._plan import _dtypes
from ._linear import linear_call


def _as_tuple(out: object) -> tuple[Any, ...]:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def call_with_rules(
    primal: Callable[..., tuple[jax.Array, ...]],
    args: Sequence[Any],
    jvp: Callable[..., Any] | None,
    vjp: Callable[..., Any] | None,
    what: str,
    *,
    primal_differentiable: bool = False,
) -> tuple[jax.Array, ...]:
    """Call ``primal(*args)`` with derivatives given by the ``jvp``/``vjp`` modules.

    Args:
        primal: the module's launch without rules.
        args: the call's arguments.
        jvp: the forward-mode rule, or None.
        vjp: the reverse-mode rule, or None.
        what: the module's name, for messages.
        primal_differentiable: ``primal`` itself is differentiable in reverse mode (through
            Warp's adjoint, ``enable_backward=True``). With ``jvp`` and no ``vjp``, reverse
            mode then pulls back through it (one adjoint launch) instead of transposing ``jvp``.
    """
    args = [jnp.asarray(a) if isinstance(a, np.ndarray) else a for a in args]
    # The floating-point array arguments are differentiated, the rest held static: `eqx.partition` by a prefix of
    # one flag per argument (a struct argument stays whole), `eqx.combine` to put them back together.
    flags = [_dtypes.is_float_array(a) for a in args]
    diff = [i for i, flag in enumerate(flags) if flag]
    _, static = eqx.partition(args, flags)
    for i, a in enumerate(static):
        if not flags[i] and isinstance(a, jax.core.Tracer) and _dtypes.is_inexact(a.dtype):
            raise TypeError(
                f"{what}: argument {i} is a traced scalar, which custom derivative rules do not differentiate; "
                "pass it as a one-element array parameter, or as a Python number (static)."
            )

    def merge(diff_values: Sequence[Any]) -> list[Any]:
        values = iter(diff_values)
        return eqx.combine([next(values) if flag else None for flag in flags], static)

    def f(*diff_values: object) -> tuple[jax.Array, ...]:
        return tuple(primal(*merge(diff_values)))

    diff_args = [args[i] for i in diff]
    if jvp is None:
        assert vjp is not None
        g = jax.custom_vjp(f)

        def fwd(*diff_values: object) -> Any:
            return f(*diff_values), diff_values

        def bwd(res: tuple[jax.Array, ...], cts: Sequence[jax.Array | None]) -> tuple[jax.Array, ...]:
            cts = [jnp.zeros_like(o) if ct is None else ct for ct, o in zip(cts, jax.eval_shape(f, *res), strict=True)]
            out = _as_tuple(vjp(*merge(res), *cts))
            _check_count(out, len(diff), what, "vjp", "cotangents (one per floating-point array input)")
            return tuple(out)

        g.defvjp(fwd, bwd)
        return g(*diff_args)

    def transpose(res: tuple[jax.Array, ...], cts: Sequence[jax.Array]) -> tuple[jax.Array, ...]:
        cts = _as_tuple(cts)
        if vjp is not None:
            out = _as_tuple(vjp(*merge(res), *cts))
        elif primal_differentiable:
            # The primal's own adjoint: its forward launch is dead code here and removed by XLA.
            _, pullback = jax.vjp(f, *res)
            out = pullback(tuple(cts))
        else:
            # Transpose the tangent map through Warp's adjoint of the jvp module itself.
            zeros = [jnp.zeros_like(r) for r in res]
            _, pullback = jax.vjp(lambda *t: tuple(_as_tuple(jvp(*merge(res), *t))), *zeros)
            out = pullback(cts)
        _check_count(out, len(diff), what, "vjp", "cotangents (one per floating-point array input)")
        return tuple(out)

    def tangent_map(res: tuple[jax.Array, ...], tangents: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
        out = _as_tuple(jvp(*merge(res), *tangents))
        return tuple(out)

    g = jax.custom_jvp(f)

    def rule(
        primals: tuple[jax.Array, ...], tangents: Sequence[jax.Array | SymbolicZero]
    ) -> tuple[tuple[jax.Array, ...], tuple[jax.Array, ...]]:
        out = f(*primals)
        # a SymbolicZero's aval is typed as AbstractValue; here it is always a ShapedArray
        tangents = [jnp.zeros(t.aval.shape, t.aval.dtype) if isinstance(t, SymbolicZero) else t for t in tangents]  # pyright: ignore[reportAttributeAccessIssue]
        t_out = linear_call(tangent_map, transpose, tuple(primals), tuple(tangents))
        _check_count(t_out, len(out), what, "jvp", "tangents (one per output)")
        return out, tuple(t_out)

    g.defjvp(rule, symbolic_zeros=True)
    return g(*diff_args)


def _check_count(out: Sequence[Any], expected: int, what: str, rule: str, kind: str) -> None:
    if len(out) != expected:
        raise TypeError(f"{what}: the {rule}= module returned {len(out)} values, expected {expected} {kind}.")
