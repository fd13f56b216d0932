"""``jarp_linear``: a linear map with a user transpose, batchable (the tangent of `jvp=` rules).

``jax.custom_derivatives.linear_call`` does this, but has no batching rule, so ``jax.jacfwd`` and ``jax.hessian``
(which vmap over tangents) fail on it. ``linear_p`` applies ``fn(res, lin)``, a map linear in ``lin``; its transpose
is ``tfn(res, cts)``; both are vmapped when batched.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeAlias

import jax
import jax.core  # `import jax` loads it, but only this import declares it to type checkers
import jax.numpy as jnp
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir
from jaxtyping import Array

LinearMap: TypeAlias = Callable[[tuple[Array, ...], tuple[Array, ...]], Sequence[Array]]
"""``fn(res, lin)``: a map linear in ``lin`` (arrays) with residuals ``res`` (arrays), returning arrays."""

linear_p = Primitive("jarp_linear")
linear_p.multiple_results = True


def linear_call(
    fn: LinearMap,
    tfn: LinearMap,
    res: Sequence[Array],
    lin: Sequence[Array],
    out_shapes: Sequence[Array | jax.ShapeDtypeStruct] | None = None,
) -> Sequence[Array]:
    """Apply ``fn(res, lin)`` (linear in ``lin``) with transpose ``tfn(res, cts)``.

    With ``out_shapes`` given, ``fn`` is not traced until it must run, so a map
    that only exists in reverse mode can still be transposed.
    """
    res, lin = tuple(res), tuple(lin)
    if out_shapes is None:
        out_shapes = jax.eval_shape(lambda r, li: tuple(fn(r, li)), res, lin)
    # jax.eval_shape is untyped (its inferred return type includes None); it returns the tuple `fn` does
    avals = tuple(jax.core.ShapedArray(o.shape, o.dtype) for o in out_shapes)  # pyright: ignore[reportOptionalIterable]
    return linear_p.bind(*res, *lin, fn=fn, tfn=tfn, n_res=len(res), out_avals=avals)


def _linear_impl(
    *args: Array, fn: LinearMap, tfn: LinearMap, n_res: int, out_avals: Sequence[jax.core.ShapedArray]
) -> tuple[Array, ...]:
    return tuple(fn(tuple(args[:n_res]), tuple(args[n_res:])))


linear_p.def_impl(_linear_impl)
linear_p.def_abstract_eval(lambda *args, out_avals, **_: list(out_avals))
mlir.register_lowering(linear_p, mlir.lower_fun(_linear_impl, multiple_results=True))


def _linear_jvp(
    primals: Sequence[Array],
    tangents: Sequence[Array | ad.Zero],
    *,
    fn: LinearMap,
    tfn: LinearMap,
    n_res: int,
    out_avals: Sequence[jax.core.ShapedArray],
) -> tuple[Sequence[Array], Sequence[Array]]:
    if any(type(t) is not ad.Zero for t in tangents[:n_res]):
        raise NotImplementedError(
            "jarp: differentiating a user tangent rule (jvp=/hess_prod) with respect to the point it is "
            "evaluated at needs third derivatives, which jarp's rules do not provide."
        )
    out = linear_p.bind(*primals, fn=fn, tfn=tfn, n_res=n_res, out_avals=out_avals)
    lin_t = [ad.instantiate_zeros(t) for t in tangents[n_res:]]
    t_out = linear_p.bind(*primals[:n_res], *lin_t, fn=fn, tfn=tfn, n_res=n_res, out_avals=out_avals)
    return out, t_out


def _linear_transpose(
    cts: Sequence[Array | ad.Zero],
    *args: Array | ad.UndefinedPrimal,
    fn: LinearMap,
    tfn: LinearMap,
    n_res: int,
    out_avals: Sequence[jax.core.ShapedArray],
) -> Sequence[Array | None]:
    res, lin = args[:n_res], args[n_res:]
    cts = [jnp.zeros(a.shape, a.dtype) if type(ct) is ad.Zero else ct for ct, a in zip(cts, out_avals, strict=True)]
    lin_avals = tuple(jax.core.ShapedArray(x.aval.shape, x.aval.dtype) for x in lin)
    out = linear_p.bind(*res, *cts, fn=tfn, tfn=fn, n_res=n_res, out_avals=lin_avals)
    return [None] * n_res + list(out)


def _linear_batch(
    args: Sequence[Array],
    dims: Sequence[int | None],
    *,
    fn: LinearMap,
    tfn: LinearMap,
    n_res: int,
    out_avals: Sequence[jax.core.ShapedArray],
) -> tuple[Sequence[Array], list[int]]:
    size = next(a.shape[d] for a, d in zip(args, dims, strict=True) if d is not None)
    args = [a if d is None else jnp.moveaxis(a, d, 0) for a, d in zip(args, dims, strict=True)]
    res_axes = tuple(None if d is None else 0 for d in dims[:n_res])
    lin_axes = tuple(None if d is None else 0 for d in dims[n_res:])

    def batched_fn(res: tuple[Array, ...], lin: tuple[Array, ...]) -> tuple[Array, ...]:
        return jax.vmap(lambda r, li: tuple(fn(r, li)), in_axes=(res_axes, lin_axes), axis_size=size)(res, lin)

    def batched_tfn(res: tuple[Array, ...], cts: tuple[Array, ...]) -> tuple[Array, ...]:
        return jax.vmap(lambda r, c: tuple(tfn(r, c)), in_axes=(res_axes, 0), axis_size=size)(res, cts)

    out = linear_call(batched_fn, batched_tfn, args[:n_res], args[n_res:])
    return out, [0] * len(out)


ad.primitive_jvps[linear_p] = _linear_jvp
ad.primitive_transposes[linear_p] = _linear_transpose
batching.primitive_batchers[linear_p] = _linear_batch
