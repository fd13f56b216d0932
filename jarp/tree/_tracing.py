from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import jax
import jax.core  # `import jax` loads it, but only this import declares it to type checkers
import jax.tree_util as jtu

_P = ParamSpec("_P")
_R = TypeVar("_R")


class NotJaxCompatibleError(TypeError):
    """Raised when a function decorated with [`jarp.tree.no_jax_tracing`][] receives a tracer.

    A subclass of `TypeError`, like JAX's own `ConcretizationTypeError`: the function was given an
    abstract, traced value where it needs a concrete one.
    """


def is_traced(x: object) -> bool:
    """Whether `x`, or any leaf of the pytree `x`, is a JAX tracer.

    Inside `jit`, `vmap`, `grad` and the other transformations, the arguments of the transformed
    function are tracers: abstract stand-ins whose values are not known in Python. Under `jit`, so
    is every array computed by JAX operations inside the function; NumPy arrays and Python values
    never are.

    Args:
        x: Any value or pytree.

    Returns:
        `True` if some leaf of `x` is a `jax.core.Tracer`, else `False`.

    Example:
        ```python
        import jax
        import jax.numpy as jnp
        from jarp.tree import is_traced

        assert not is_traced(jnp.ones(2))
        jax.jit(lambda x: print(is_traced({"x": x})))(jnp.ones(2))  # prints True
        ```
    """
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(x))


def no_jax_tracing(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """Forbid calling `fn` with traced arguments, i.e. inside `jit`, `vmap`, `grad` and friends.

    For functions with Python side effects or host-side logic (file I/O, building Warp
    launch plans, caching on concrete values) that would silently misbehave, or fail with an
    obscure error, when traced. The check covers every leaf of every positional and keyword
    argument; values captured by closure are not checked.

    Args:
        fn: The function to protect.

    Returns:
        A function with the signature of `fn` that raises
        [`jarp.tree.NotJaxCompatibleError`][] (a `TypeError`) naming the offending argument if
        any argument leaf is a tracer, and otherwise calls `fn`.

    Example:
        ```python
        import jax
        import jax.numpy as jnp
        from jarp.tree import NotJaxCompatibleError, no_jax_tracing


        @no_jax_tracing
        def save(x: jax.Array) -> float:
            return float(x.sum())  # needs a concrete value


        assert save(jnp.ones(3)) == 3.0
        try:
            jax.jit(save)(jnp.ones(3))
        except NotJaxCompatibleError as e:
            print(e)
        ```
    """
    try:
        signature: inspect.Signature | None = inspect.signature(fn)
    except (TypeError, ValueError):  # some builtins and C extensions have no signature
        signature = None

    @functools.wraps(fn)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        if is_traced((args, kwargs)):
            raise NotJaxCompatibleError(_describe_traced(fn, signature, args, kwargs))
        return fn(*args, **kwargs)

    return wrapper


def _describe_traced(
    fn: Callable[..., Any], signature: inspect.Signature | None, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> str:
    named: dict[str, Any]
    try:
        named = dict(signature.bind(*args, **kwargs).arguments) if signature is not None else {}
    except TypeError:
        named = {}
    if not named:
        named = {f"args[{i}]": a for i, a in enumerate(args)} | kwargs
    where = "an argument"
    for name, value in named.items():
        for path, leaf in jtu.tree_flatten_with_path(value)[0]:
            if isinstance(leaf, jax.core.Tracer):
                where = f"argument `{name}{jtu.keystr(path)}` is a tracer ({type(leaf).__name__}, {leaf.aval})"
                break
        else:
            continue
        break
    name = getattr(fn, "__qualname__", repr(fn))
    return (
        f"`{name}` cannot be used inside a JAX transformation (jit, vmap, grad, scan, ...): {where}. "
        "It needs concrete values. Call it outside the transformed function, pass the value as a static "
        "argument, or, for host-side work inside a traced computation, wrap it in `jax.pure_callback`."
    )
