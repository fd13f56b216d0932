from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar, cast

import equinox as eqx
import jax
import jax.core  # `import jax` loads it, but only this import declares it to type checkers
import jax.custom_batching

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _is_dynamic(x: Any) -> bool:
    # float0 arrays (cotangents of integer values) carry no data and cannot be batched or
    # differentiated, so they travel with the static part.
    return eqx.is_array(x) and x.dtype != jax.dtypes.float0


def sequential_vmap_with_vjp(func: Callable[_P, _R]) -> Callable[_P, _R]:
    """Make `func` batch under `vmap` by running it once per example, while staying differentiable.

    Useful around callables that have no batching rule (host callbacks, foreign-function calls,
    kernels written for a single system) or whose batched form would need too much memory. Under
    `jax.vmap` the wrapped function loops over the batch with `jax.lax.map`; nested `vmap`s give
    nested loops. Reverse-mode differentiation is defined with a custom VJP whose backward pass is
    itself wrapped by `sequential_vmap_with_vjp`, so gradients of batched calls are computed one
    example at a time too, and can be differentiated again (`grad` of `vmap`, `vmap` of `grad`,
    `grad` of `grad`, ...). Unbatched calls run `func` once, as usual.

    `func` is traced once per call of the wrapped function, whatever the batch size. The backward
    pass recomputes `func`'s forward pass for each example (rematerialisation) instead of storing
    per-example residuals, trading compute for memory.

    Args:
        func: The function to wrap. Its inputs are pytrees; array leaves (including JAX arrays
            of integer dtype) are batched and differentiated, other leaves (Python scalars,
            strings, functions) are treated as static. Its outputs must be pytrees of arrays.
            `func` may close over arrays, including ones being batched or differentiated by an
            enclosing transformation (such as model parameters under `grad`). `func` itself must
            be differentiable (e.g. through `jax.custom_jvp`) if gradients are taken.

    Returns:
        A function with the signature of `func`.

    Note:
        Only reverse mode is supported: `jax.jvp`, `jax.jacfwd` and `jax.linearize` of the
        wrapped function raise, as for any `jax.custom_vjp` function. Use `jax.jacrev` for
        Jacobians and Hessians.

    Example:
        ```python
        import jax
        import jax.numpy as jnp
        import numpy as np
        from jarp.tree import sequential_vmap_with_vjp


        def host_norm(x: jax.Array) -> jax.Array:  # a host callback: plain `jax.vmap` cannot batch it
            result = jax.ShapeDtypeStruct((), x.dtype)
            return jax.pure_callback(lambda v: np.linalg.norm(v).astype(v.dtype), result, x)


        norms = jax.vmap(sequential_vmap_with_vjp(host_norm))(jnp.ones((4, 9)))
        assert jnp.allclose(norms, 3.0)


        @sequential_vmap_with_vjp
        def energy(x: jax.Array) -> jax.Array:
            return jnp.sum(jnp.sin(x))


        xs = jnp.linspace(0.0, 1.0, 6).reshape(2, 3)
        curvature = jax.vmap(jax.grad(lambda x: jnp.sum(jax.grad(energy)(x))))(xs)
        assert jnp.allclose(curvature, -jnp.sin(xs), atol=1e-6)
        ```
    """

    @functools.wraps(func)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        dynamic, static = eqx.partition((args, kwargs), _is_dynamic)

        def call(dynamic: Any) -> _R:
            call_args, call_kwargs = eqx.combine(dynamic, static)
            # the arguments `wrapper` took, rebuilt: untyped, so not `_P`'s to a type checker
            return cast("Callable[..., _R]", func)(*call_args, **call_kwargs)

        # Trace once, and turn values that `func` closes over but that belong to an enclosing
        # transformation (vmap, grad, jit tracers) into explicit operands: the custom rules below can
        # only batch and differentiate their operands.
        closed, out_shape = jax.make_jaxpr(call, return_shape=True)(dynamic)
        hoist = [isinstance(const, jax.core.Tracer) for const in closed.consts]
        hoisted = [const for const, h in zip(closed.consts, hoist, strict=True) if h]
        kept = [const for const, h in zip(closed.consts, hoist, strict=True) if not h]
        out_tree = jax.tree.structure(out_shape)

        def evaluate(operands: tuple[Any, list[Any]]) -> _R:
            dynamic, hoisted = operands
            hoisted_iter, kept_iter = iter(hoisted), iter(kept)
            consts = [next(hoisted_iter) if h else next(kept_iter) for h in hoist]
            out = jax.core.eval_jaxpr(closed.jaxpr, consts, *jax.tree.leaves(dynamic))
            return jax.tree.unflatten(out_tree, out)

        return _sequential_custom_vjp(evaluate)((dynamic, hoisted))

    return wrapper


def _sequential_custom_vjp(call: Callable[[Any], _R]) -> Callable[[Any], _R]:
    batched = jax.custom_batching.sequential_vmap(call)

    @jax.custom_vjp
    def run(dynamic: object) -> _R:
        return batched(dynamic)

    def run_fwd(dynamic: object) -> tuple[_R, Any]:
        # Under higher-order differentiation this forward pass is itself differentiated, which only
        # `run`'s custom VJP knows how to do (the batching rule has no transpose), so go through it.
        return run(dynamic), dynamic

    def run_bwd(dynamic: object, cotangent: object) -> tuple[Any]:
        def pullback(dynamic: object, cotangent: object) -> Any:
            _, vjp_fn = jax.vjp(call, dynamic)
            (grad,) = vjp_fn(cotangent)
            return grad

        # The backward pass is batched and differentiated exactly like the forward pass.
        return (sequential_vmap_with_vjp(pullback)(dynamic, cotangent),)

    run.defvjp(run_fwd, run_bwd)
    return run
