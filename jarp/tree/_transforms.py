from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence, Set
from typing import Any, Literal, ParamSpec, TypeVar, TypeVarTuple, cast, overload

import jax
import jax.numpy as jnp

_P = ParamSpec("_P")
_R = TypeVar("_R")
_Aux = TypeVar("_Aux")
_Ts = TypeVarTuple("_Ts")


@overload
def jit(
    fn: Callable[_P, _R],
    *,
    in_shardings: object = None,
    out_shardings: object = None,
    static_argnums: int | Sequence[int] | None = None,
    static_argnames: str | Iterable[str] | None = None,
    donate_argnums: int | Sequence[int] | None = None,
    donate_argnames: str | Iterable[str] | None = None,
    keep_unused: bool = False,
    device: jax.Device | None = None,  # pyright: ignore[reportInvalidTypeForm]  # jaxlib ships no stubs
    backend: str | None = None,
    inline: bool = False,
    compiler_options: dict[str, Any] | None = None,
) -> Callable[_P, _R]: ...


@overload
def jit(
    fn: None = None,
    *,
    in_shardings: object = None,
    out_shardings: object = None,
    static_argnums: int | Sequence[int] | None = None,
    static_argnames: str | Iterable[str] | None = None,
    donate_argnums: int | Sequence[int] | None = None,
    donate_argnames: str | Iterable[str] | None = None,
    keep_unused: bool = False,
    device: jax.Device | None = None,  # pyright: ignore[reportInvalidTypeForm]  # jaxlib ships no stubs
    backend: str | None = None,
    inline: bool = False,
    compiler_options: dict[str, Any] | None = None,
) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]: ...


def jit(
    fn: Callable[_P, _R] | None = None,
    *,
    in_shardings: object = None,
    out_shardings: object = None,
    static_argnums: int | Sequence[int] | None = None,
    static_argnames: str | Iterable[str] | None = None,
    donate_argnums: int | Sequence[int] | None = None,
    donate_argnames: str | Iterable[str] | None = None,
    keep_unused: bool = False,
    device: jax.Device | None = None,  # pyright: ignore[reportInvalidTypeForm]  # jaxlib ships no stubs
    backend: str | None = None,
    inline: bool = False,
    compiler_options: dict[str, Any] | None = None,
) -> Callable[_P, _R] | Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """Compile a function with `jax.jit`, keeping its signature for type checkers.

    `jax.jit` returns an object whose call signature static type checkers cannot see; this wrapper
    is typed as returning a callable with exactly the parameters and return type of `fn`. At run
    time the result is what `jax.jit` returns, so `.lower(...)`, `.trace(...)` and friends are
    still there. It can be used bare (`@jit`) or with options (`@jit(static_argnames="n")`). For
    functions taking Equinox Modules with non-array fields, prefer `eqx.filter_jit`.

    Args:
        fn: The function to compile. If `None`, a decorator taking the function is returned.
        in_shardings: Shardings of the positional arguments; `None` lets JAX decide.
        out_shardings: Shardings of the outputs; `None` lets JAX decide.
        static_argnums: Positional arguments to treat as compile-time constants (hashable).
        static_argnames: Keyword arguments to treat as compile-time constants (hashable).
        donate_argnums: Positional arguments whose buffers XLA may reuse for the outputs.
        donate_argnames: Keyword arguments whose buffers XLA may reuse for the outputs.
        keep_unused: If `True`, do not prune arguments the computation does not use.
        device: Device to run on (prefer shardings).
        backend: XLA backend to run on, e.g. `"cpu"` (prefer shardings).
        inline: If `True`, inline the function into enclosing traces instead of a nested call.
        compiler_options: XLA compiler options.

    Returns:
        The compiled function, typed like `fn`; or, if `fn` is `None`, a decorator producing it.

    Example:
        ```python
        import jax
        import jax.numpy as jnp
        from jarp.tree import jit


        @jit(static_argnames="power")
        def norm(x: jax.Array, power: int = 2) -> jax.Array:
            return jnp.sum(jnp.abs(x) ** power) ** (1 / power)


        assert norm(jnp.array([3.0, 4.0])) == 5.0
        ```
    """
    kwargs: dict[str, Any] = {
        "in_shardings": in_shardings,
        "out_shardings": out_shardings,
        "static_argnums": static_argnums,
        "static_argnames": static_argnames,
        "donate_argnums": donate_argnums,
        "donate_argnames": donate_argnames,
        "keep_unused": keep_unused,
        "device": device,
        "backend": backend,
        "inline": inline,
        "compiler_options": compiler_options,
    }
    if fn is None:
        return cast(Callable[[Callable[_P, _R]], Callable[_P, _R]], functools.partial(jax.jit, **kwargs))
    return cast(Callable[_P, _R], jax.jit(fn, **kwargs))


@overload
def vectorize(
    pyfunc: Callable[_P, _R], *, excluded: Set[int] = frozenset(), signature: str | None = None
) -> Callable[_P, _R]: ...


@overload
def vectorize(
    pyfunc: None = None, *, excluded: Set[int] = frozenset(), signature: str | None = None
) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]: ...


def vectorize(
    pyfunc: Callable[_P, _R] | None = None, *, excluded: Set[int] = frozenset(), signature: str | None = None
) -> Callable[_P, _R] | Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """Vectorise a function over leading axes, like `jax.numpy.vectorize`, keeping its signature.

    Write the function for one "core" element (described by a NumPy generalised-ufunc
    `signature` such as `"(n),(n)->()"`; scalars if no signature is given) and call it on arrays
    with any number of extra leading axes, which are broadcast against each other. This is `vmap`
    under the hood, not a Python loop. It can be used bare or as `@vectorize(signature=...)`.

    Args:
        pyfunc: The function to vectorise. If `None`, a decorator taking the function is returned.
        excluded: Indices of positional arguments that are passed through without vectorisation.
        signature: Generalised-ufunc signature of the core function, e.g. `"(n,m),(m)->(n)"`.
            `None` means every argument and output is a scalar.

    Returns:
        The vectorised function, typed like `pyfunc`; or, if `pyfunc` is `None`, a decorator.

    Example:
        ```python
        import jax
        import jax.numpy as jnp
        from jarp.tree import vectorize


        @vectorize(signature="(n),(n)->()")
        def dot(a: jax.Array, b: jax.Array) -> jax.Array:
            assert a.ndim == 1  # always called on core elements
            return jnp.sum(a * b)


        assert dot(jnp.ones((4, 3)), jnp.ones((1, 3))).shape == (4,)
        ```
    """
    if pyfunc is None:
        return cast(
            Callable[[Callable[_P, _R]], Callable[_P, _R]],
            functools.partial(jnp.vectorize, excluded=excluded, signature=signature),
        )
    return cast(Callable[_P, _R], jnp.vectorize(pyfunc, excluded=excluded, signature=signature))


@overload
def linearize(
    fn: Callable[[*_Ts], _R], *primals: *_Ts, has_aux: Literal[False] = False
) -> tuple[_R, Callable[[*_Ts], _R]]: ...


@overload
def linearize(
    fn: Callable[[*_Ts], tuple[_R, _Aux]], *primals: *_Ts, has_aux: Literal[True]
) -> tuple[_R, Callable[[*_Ts], _R], _Aux]: ...


def linearize(
    fn: Callable[[*_Ts], _R] | Callable[[*_Ts], tuple[_R, _Aux]], *primals: *_Ts, has_aux: bool = False
) -> tuple[_R, Callable[[*_Ts], _R]] | tuple[_R, Callable[[*_Ts], _R], _Aux]:
    """Evaluate `fn` at `primals` and return its linearisation there, like `jax.linearize`.

    The returned JVP function evaluates the Jacobian-vector product at the fixed point `primals`
    without re-running the nonlinear part of `fn`, which pays off when applying the Jacobian to
    many tangents (e.g. inside an iterative linear solver). This wrapper only adds precise types:
    the JVP function takes tangents shaped like `primals` and returns a tangent shaped like the
    output.

    Args:
        fn: Function to linearise. With `has_aux=True` it must return `(output, aux)`.
        *primals: The point at which to linearise, one value (pytree) per positional argument.
        has_aux: Whether `fn` returns auxiliary data alongside its output.

    Returns:
        `(output, jvp_fn)`, or `(output, jvp_fn, aux)` if `has_aux` is `True`, where
        `jvp_fn(*tangents)` is the Jacobian of `fn` at `primals` applied to `tangents`.

    Example:
        ```python
        import jax.numpy as jnp
        from jarp.tree import linearize

        y, jvp_fn = linearize(jnp.sin, jnp.float32(0.0))
        assert y == 0.0 and jvp_fn(jnp.float32(2.0)) == 2.0  # cos(0) * 2
        ```
    """
    result: Any = jax.linearize(fn, *primals, has_aux=True) if has_aux else jax.linearize(fn, *primals)
    return result


class _InferSpecs:
    """Stand-in default meaning "let `jax.shard_map` infer `in_specs` from the arguments"."""

    def __repr__(self) -> str:
        return "<inferred>"


_INFER = _InferSpecs()


@overload
def shard_map(
    f: Callable[_P, _R],
    /,
    *,
    out_specs: object,
    in_specs: object = _INFER,
    mesh: jax.sharding.Mesh | jax.sharding.AbstractMesh | None = None,
    axis_names: Set[Any] = frozenset(),
    check_vma: bool = True,
) -> Callable[_P, _R]: ...


@overload
def shard_map(
    f: None = None,
    /,
    *,
    out_specs: object,
    in_specs: object = _INFER,
    mesh: jax.sharding.Mesh | jax.sharding.AbstractMesh | None = None,
    axis_names: Set[Any] = frozenset(),
    check_vma: bool = True,
) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]: ...


def shard_map(
    f: Callable[_P, _R] | None = None,
    /,
    *,
    out_specs: object,
    in_specs: object = _INFER,
    mesh: jax.sharding.Mesh | jax.sharding.AbstractMesh | None = None,
    axis_names: Set[Any] = frozenset(),
    check_vma: bool = True,
) -> Callable[_P, _R] | Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """Map a function over shards of data on a device mesh, like `jax.shard_map`, keeping its signature.

    Each device runs `f` on its own shard of the inputs (single program, multiple data); `f`
    sees per-shard shapes and may communicate with `jax.lax.psum` and friends over the named mesh
    axes. This wrapper only adds precise types and can be used with or without `f`.

    Args:
        f: The per-shard function. If omitted, a decorator taking the function is returned.
        out_specs: Pytree of `jax.sharding.PartitionSpec` (a prefix of the output) saying how
            output shards are assembled; a mesh axis not mentioned promises replication.
        in_specs: Pytree of `PartitionSpec` (a prefix of the positional arguments) saying how
            inputs are split. If omitted, JAX infers the specs from the arguments' shardings, which
            needs every mesh axis to be `Explicit`. `None` marks inputs as static.
        mesh: The `jax.sharding.Mesh` to run on; `None` takes it from the `jax.set_mesh` context.
        axis_names: Mesh axes over which `f` is manual; empty means all of them.
        check_vma: Whether to check that outputs are replicated as `out_specs` promises, which
            also enables more efficient transposes under `grad`.

    Returns:
        The sharded function, typed like `f`; or, if `f` is omitted, a decorator.

    Example:
        ```python
        import jax
        import jax.numpy as jnp
        from jax.sharding import PartitionSpec as P
        from jarp.tree import shard_map

        mesh = jax.make_mesh((jax.device_count(),), ("batch",), axis_types=(jax.sharding.AxisType.Auto,))


        @shard_map(mesh=mesh, in_specs=P("batch"), out_specs=P())
        def total(x: jax.Array) -> jax.Array:
            return jax.lax.psum(jnp.sum(x), "batch")


        assert total(jnp.ones(4 * jax.device_count())) == 4 * jax.device_count()
        ```
    """
    kwargs: dict[str, Any] = {"out_specs": out_specs, "mesh": mesh, "axis_names": axis_names, "check_vma": check_vma}
    if in_specs is not _INFER:
        kwargs["in_specs"] = in_specs
    if f is None:
        return cast(Callable[[Callable[_P, _R]], Callable[_P, _R]], functools.partial(jax.shard_map, **kwargs))
    return cast(Callable[_P, _R], jax.shard_map(f, **kwargs))
