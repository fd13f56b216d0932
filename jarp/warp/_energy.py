"""`Energy`: a scalar energy with hand-written derivative kernels, wired into JAX's autodiff."""

from __future__ import annotations

import functools as ft
import inspect
from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple, TypeGuard, get_args

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_derivatives import SymbolicZero
from jaxtyping import Array, PyTree

from ._jax._linear import LinearMap, linear_call
from ._jax._primitive import ForwardModeError
from ._module._base import AbstractWarpModule
from ._plan import _cache_table, _dtypes


def _first(out: jax.Array | tuple[jax.Array, ...] | list[jax.Array]) -> jax.Array:
    return out[0] if isinstance(out, (tuple, list)) else out


def _nonzero(t: jax.Array | SymbolicZero) -> TypeGuard[jax.Array]:
    return not isinstance(t, SymbolicZero)


HessianKind = Literal["exact", "projected"]
"""What ``hess_prod`` computes: the exact Hessian, or a projected (clamped, positive semi-definite) one."""


class Energy(eqx.Module):
    """A scalar energy ``E(x, *params)`` whose derivatives are user kernels.

    Build it with `jarp.warp.energy`. Under JAX's autodiff:

    * ``jax.grad(E)`` runs the ``grad`` kernel; ``jax.jvp(E)`` contracts it with the tangent;
    * ``jax.jvp(jax.grad(E))`` (a Hessian-vector product) runs the ``hess_prod`` kernel, and
      reverse mode over ``grad`` uses it too (the Hessian is symmetric), so ``jax.hessian``,
      ``jax.jacfwd(jax.grad(E))`` and ``jax.linearize(jax.grad(E), x)`` work;
    * derivatives with respect to floating-point ``params`` go through Warp's adjoint of
      the ``fun`` and ``grad`` modules (build them with ``enable_backward=True``).

    With ``hessian="projected"`` the ``hess_prod`` kernel is a solver's operator only
    (`Energy.hess_prod`, `Energy.hess_diag`, `Energy.hess_quad`): the derivatives of
    ``E.grad`` with respect to ``x`` go through Warp's adjoint of the ``grad`` module instead
    (exact; it needs ``enable_backward=True``), or are refused with an explanation.

    Integer ``params`` (edge lists, element connectivity) are passed through untouched.
    """

    fun: Callable[..., Any] = eqx.field(static=True)
    grad_fn: Callable[..., Any] = eqx.field(static=True)
    hess_prod_fn: Callable[..., Any] = eqx.field(static=True)
    hess_diag_fn: Callable[..., Any] | None = eqx.field(static=True, default=None)
    hess_quad_fn: Callable[..., Any] | None = eqx.field(static=True, default=None)
    hessian: HessianKind = eqx.field(static=True, default="exact")
    direction: int = eqx.field(static=True, default=-1)

    def __call__(self, x: jax.Array, *params: PyTree) -> jax.Array:
        """The energy at ``x``, as a 0-d array."""
        return _energy(self, x, *params)

    def grad(self, x: jax.Array, *params: PyTree) -> jax.Array:
        """The gradient ``dE/dx`` (shaped like ``x``), differentiable through ``hess_prod``."""
        return _gradient(self, x, *params)

    def hess_prod(self, x: jax.Array, *params: PyTree, v: jax.Array) -> jax.Array:
        """The Hessian-vector product ``H(x) v`` (the projected Hessian with ``hessian="projected"``)."""
        return _first(self.hess_prod_fn(*_with_direction(self.direction, x, params, v)))

    def hess_diag(self, x: jax.Array, *params: PyTree) -> jax.Array:
        """The diagonal of the Hessian (shaped like ``x``), e.g. for a Jacobi preconditioner."""
        if self.hess_diag_fn is None:
            raise ValueError("energy(): no hess_diag module was given; pass hess_diag=... to energy().")
        return _first(self.hess_diag_fn(x, *params))

    def hess_quad(self, x: jax.Array, *params: PyTree, v: jax.Array) -> jax.Array:
        """The quadratic form ``v^T H(x) v``, as a 0-d array (the curvature along ``v``).

        Runs the ``hess_quad`` module if one was given (one reduction, no ``H v`` array),
        else ``jnp.vdot(v, E.hess_prod(x, *params, v=v))``. The Hessian is the same as
        ``hess_prod``'s: projected with ``hessian="projected"``.

        Args:
            x: the point, shaped like the ``grad`` kernel's output.
            *params: the energy's parameters.
            v: the direction, shaped like ``x``.

        Returns:
            ``v^T H(x) v``, a 0-d array.

        Example:
            ```python
            # the exact step along a search direction d for a quadratic model, in nonlinear CG
            alpha = -jnp.vdot(E.grad(x, *p), d) / E.hess_quad(x, *p, v=d)
            ```
        """
        if self.hess_quad_fn is None:
            return jnp.vdot(v, self.hess_prod(x, *params, v=v))
        out = _first(self.hess_quad_fn(*_with_direction(self.direction, x, params, v)))
        if out.size != 1:
            raise ValueError(f"energy(): hess_quad must return a one-element array, got shape {out.shape}.")
        return out.reshape(())


def _with_direction(position: int, x: jax.Array, params: Sequence[PyTree], v: jax.Array) -> list[PyTree]:
    """The arguments of ``hess_prod``/``hess_quad``: ``x, *params`` with the direction ``v`` at ``position``."""
    args = [x, *params]
    at = position if position >= 0 else len(args) + 1 + position
    if not 0 < at <= len(args):
        # ``list.insert`` clamps: an out-of-range direction would silently go last, or before x.
        raise ValueError(
            f"energy(): direction={position} is outside hess_prod's inputs: x, {len(params)} parameter(s) and v."
        )
    args.insert(at, v)
    return args


def _value(self: Energy, x: jax.Array, *params: PyTree) -> jax.Array:
    out = _first(self.fun(x, *params))
    if out.size != 1:
        raise ValueError(f"energy(): fun must return a one-element array, got shape {out.shape}.")
    return out.reshape(())


# -- parameters as flat operands ------------------------------------------------------------------
#
# ``params`` may hold pytrees (a struct parameter is a dict, NamedTuple or eqx.Module of its fields).
# The rules below see them flattened: the array leaves are the custom_jvp's operands (so a struct's
# float array field is differentiated like any float array parameter), everything else (the tree
# structure, a struct's static value fields, Python scalars) travels as a static `_Layout`.


class _Layout(NamedTuple):
    """How to rebuild ``params`` from their array leaves: `eqx.partition`'s two halves, each as a tree definition
    (and the static half's leaves), hashable so that a layout keys the cache of custom_jvp functions."""

    # jaxlib ships no stubs: PyTreeDef's type is unknown to the checker
    array_def: jax.tree_util.PyTreeDef  # pyright: ignore[reportInvalidTypeForm]
    static_def: jax.tree_util.PyTreeDef  # pyright: ignore[reportInvalidTypeForm]
    static_leaves: tuple[Any, ...]

    def rebuild(self, arrays: Sequence[Array | np.ndarray]) -> list[PyTree]:
        static = jax.tree_util.tree_unflatten(self.static_def, self.static_leaves)
        return list(eqx.combine(jax.tree_util.tree_unflatten(self.array_def, list(arrays)), static))


def _cached(make: Callable[[_Layout], Any]) -> Callable[[_Layout], Any]:
    """``make(layout)`` memoised per layout (one custom_jvp function per parameter layout), uncached if unhashable."""
    cached = ft.lru_cache(maxsize=256)(make)
    _cache_table.register(cached, f"{make.__module__}.{make.__qualname__}")

    def get(layout: _Layout) -> Any:
        try:
            return cached(layout)
        except TypeError:  # an unhashable static leaf
            return make(layout)

    return get


def _is_array(x: object) -> bool:
    return isinstance(x, (jax.Array, np.ndarray))


def _flatten(params: Sequence[PyTree]) -> tuple[_Layout, list[Array | np.ndarray]]:
    dynamic, static = eqx.partition(tuple(params), _is_array)
    arrays, array_def = jax.tree_util.tree_flatten(dynamic)
    static_leaves, static_def = jax.tree_util.tree_flatten(static)
    return _Layout(array_def, static_def, tuple(static_leaves)), arrays


def _of_params(
    fn: Callable[..., Any], x: jax.Array, params: Sequence[PyTree], idx: Sequence[int]
) -> Callable[..., Any]:
    """``fn(x, *params)`` as a function of the params at positions ``idx`` only."""

    def f(*values: Array) -> Any:
        full = list(params)
        for i, v in zip(idx, values, strict=True):
            full[i] = v
        return fn(x, *full)

    return f


def _param_vjp(fn: Callable[..., Any], x: jax.Array, params: Sequence[PyTree], ct: jax.Array) -> list[Array | None]:
    """Cotangents of the floating-point ``params`` of ``fn(x, *params)`` (reverse mode, Warp's adjoint)."""
    idx = [i for i, p in enumerate(params) if _dtypes.is_float_array(p, numpy=False)]
    _, pullback = jax.vjp(_of_params(fn, x, params, idx), *[params[i] for i in idx])
    grads = pullback(ct)
    out: list[Array | None] = [None] * len(params)
    for i, g in zip(idx, grads, strict=True):
        out[i] = g
    return out


def _energy(self: Energy, x: jax.Array, *params: PyTree) -> jax.Array:
    layout, arrays = _flatten(params)
    return _energy_rule(layout)(self, x, *arrays)


def _gradient(self: Energy, x: jax.Array, *params: PyTree) -> jax.Array:
    layout, arrays = _flatten(params)
    return _gradient_rule(layout)(self, x, *arrays)


@_cached
def _energy_rule(layout: _Layout) -> Any:
    """The energy as a function of ``(self, x, *array_leaves)``, with its custom_jvp."""

    @jax.custom_jvp
    def energy_flat(self: Energy, x: jax.Array, *leaves: Array) -> jax.Array:
        return _value(self, x, *layout.rebuild(leaves))

    def jvp(
        primals: tuple[Energy, Array, *tuple[Array, ...]], tangents: tuple[Energy, *tuple[Array | SymbolicZero, ...]]
    ) -> tuple[Array, Array]:
        self, x, *leaves = primals
        _, dx, *dleaves = tangents
        e = energy_flat(self, x, *leaves)  # itself, so that an outer forward mode uses this rule again
        t = jnp.zeros_like(e)
        if _nonzero(dx):
            t = t + jnp.vdot(_gradient_rule(layout)(self, x, *leaves), dx)
        if any(_nonzero(dp) and _dtypes.is_float_array(p, numpy=False) for p, dp in zip(leaves, dleaves, strict=True)):
            grads = _param_vjp(lambda x, *p: _value(self, x, *layout.rebuild(p)), x, leaves, jnp.ones_like(e))
            for g, dp in zip(grads, dleaves, strict=True):
                if g is not None and _nonzero(dp):
                    t = t + jnp.vdot(g, dp)
        return e, t

    energy_flat.defjvp(jvp, symbolic_zeros=True)
    return energy_flat


@_cached
def _gradient_rule(layout: _Layout) -> Any:
    """The gradient as a function of ``(self, x, *array_leaves)``, with its custom_jvp (the Hessian)."""

    @jax.custom_jvp
    def gradient_flat(self: Energy, x: jax.Array, *leaves: Array) -> jax.Array:
        return _first(self.grad_fn(x, *layout.rebuild(leaves)))

    def jvp(
        primals: tuple[Energy, Array, *tuple[Array, ...]], tangents: tuple[Energy, *tuple[Array | SymbolicZero, ...]]
    ) -> tuple[Array, Array]:
        self, x, *leaves = primals
        _, dx, *dleaves = tangents
        g = gradient_flat(self, x, *leaves)
        t = jnp.zeros_like(g)
        if _nonzero(dx):
            hvp = _exact_hvp(self, layout) if self.hessian == "projected" else _kernel_hvp(self, layout)
            # The Hessian is symmetric: the tangent map is its own transpose.
            t = t + linear_call(hvp, hvp, (x, *leaves), (dx,))[0]
        idx = [
            i
            for i, (p, dp) in enumerate(zip(leaves, dleaves, strict=True))
            if _dtypes.is_float_array(p, numpy=False) and _nonzero(dp)
        ]
        if idx:

            def grad_of(x: jax.Array, *p: Array) -> jax.Array:
                return _first(self.grad_fn(x, *layout.rebuild(p)))

            def mixed(res: tuple[Array, ...], lin: tuple[Array, ...]) -> tuple[Array]:
                # Forward mode needs a jvp rule on the grad module; reverse mode only uses `mixed_t`.
                xx, *pp = res
                f = _of_params(grad_of, xx, pp, idx)
                try:
                    return (jax.jvp(f, tuple(pp[i] for i in idx), tuple(lin))[1],)
                except ForwardModeError as e:
                    raise ForwardModeError(
                        "energy(): forward mode over E.grad with respect to a parameter (jax.jvp, jax.jacfwd or "
                        "jax.linearize of E.grad in its params) needs the grad module's own forward derivative, and "
                        "Warp's adjoint gives reverse mode only. Use reverse mode over E.grad for parameter "
                        "derivatives (jax.vjp, jax.jacrev, or jax.grad of a scalar of E.grad; optimistix's "
                        "ImplicitAdjoint does), or give the grad module a jvp= rule computing d(grad)/d(params) . dp. "
                        "Forward mode with respect to x needs no more: it runs hess_prod (hessian='exact') or "
                        f"Warp's adjoint of grad (hessian='projected'). ({e})"
                    ) from e

            def mixed_t(res: tuple[Array, ...], cts: tuple[Array, ...]) -> tuple[Array, ...]:
                xx, *pp = res
                grads = _param_vjp(grad_of, xx, pp, cts[0])
                # the params at idx are float arrays: their cotangents are arrays, not None
                return tuple(grads[i] for i in idx)  # pyright: ignore[reportReturnType]

            # idx keeps the nonzero tangents only: arrays, not SymbolicZero
            t = t + linear_call(mixed, mixed_t, (x, *leaves), tuple(dleaves[i] for i in idx), out_shapes=(g,))[0]  # pyright: ignore[reportArgumentType]
        return g, t

    gradient_flat.defjvp(jvp, symbolic_zeros=True)
    return gradient_flat


def _kernel_hvp(self: Energy, layout: _Layout) -> LinearMap:
    """``H v`` through the ``hess_prod`` module, as a `linear_call` map."""

    def hvp(res: tuple[Array, ...], lin: tuple[Array, ...]) -> tuple[Array, ...]:
        args = _with_direction(self.direction, res[0], layout.rebuild(res[1:]), lin[0])
        return (_first(self.hess_prod_fn(*args)),)

    return hvp


def _exact_hvp(self: Energy, layout: _Layout) -> LinearMap:
    """``H v`` through reverse mode of the ``grad`` module (Warp's adjoint), as a `linear_call` map.

    The pullback of ``grad`` at ``x`` is ``v -> J^T v`` with ``J = dgrad/dx``, which is the
    Hessian; it is symmetric, so the same map is the tangent map and its transpose.
    """
    if getattr(self.grad_fn, "enable_backward", True) is False:
        raise TypeError(
            "energy(hessian='projected'): the hess_prod module is a projected (clamped) Hessian, not the "
            "derivative of E.grad, so forward mode over E.grad (jax.jvp, jax.jacfwd, jax.hessian, jax.linearize) "
            "and reverse mode over it with respect to x do not use it. jarp differentiates the grad module "
            "through Warp's adjoint instead (exact), which needs it built with enable_backward=True, e.g. "
            "jax_kernel(grad_kernel, ..., enable_backward=True). Otherwise pass an exact hess_prod with "
            "hessian='exact', or use E.hess_prod(x, *params, v=v) directly as a solver's linear operator."
        )

    def hvp(res: tuple[Array, ...], lin: tuple[Array, ...]) -> tuple[Array, ...]:
        xx, *pp = res
        params = layout.rebuild(pp)
        _, pullback = jax.vjp(lambda x: _first(self.grad_fn(x, *params)), xx)
        return pullback(lin[0])

    return hvp


def energy(
    fun: Callable[..., Any],
    grad: Callable[..., Any],
    hess_prod: Callable[..., Any],
    hess_diag: Callable[..., Any] | None = None,
    *,
    hess_quad: Callable[..., Any] | None = None,
    hessian: HessianKind = "exact",
    direction: str | int = -1,
) -> Energy:
    """Wrap an energy and its derivative kernels as one differentiable `Energy` module.

    Args:
        fun: ``fun(x, *params)`` returning a one-element array (the energy), e.g. a
            `JaxKernel` that accumulates ``wp.atomic_add(energy, 0, ...)``.
        grad: ``grad(x, *params)`` returning ``dE/dx``, shaped like ``x``.
        hess_prod: ``hess_prod(x, *params, v)`` returning ``H(x) v``, shaped like ``x``.
        hess_diag: optional ``hess_diag(x, *params)`` returning the Hessian's diagonal.
        hess_quad: optional ``hess_quad(x, *params, v)`` returning ``v^T H(x) v`` as a
            one-element array (a line search's curvature, without the ``H v`` array). Without
            it, `Energy.hess_quad` computes ``jnp.vdot(v, hess_prod(x, *params, v))``.
        hessian: what ``hess_prod`` (and ``hess_diag``, ``hess_quad``) compute. ``"exact"``
            (default): the Hessian of ``fun``; JAX then uses ``hess_prod`` as the derivative
            of ``E.grad``. ``"projected"``: a projected Hessian (per-element blocks clamped to
            positive semi-definite, as FEM codes do for Newton), which is not a derivative:
            ``E.hess_prod`` stays a solver's operator, and the derivatives of ``E.grad`` with
            respect to ``x`` (``jax.jvp``, ``jax.jacfwd``, ``jax.hessian``, ``jax.linearize``,
            reverse mode over ``E.grad``) go through Warp's adjoint of the ``grad`` module
            instead, which is exact and needs ``enable_backward=True`` on it; without it
            they raise a `TypeError` that says so.
        direction: where ``hess_prod`` and ``hess_quad`` take the direction ``v``: the name of that
            parameter (``"v"``) or its position among their inputs (``x`` is position 0; negative counts
            from the end). The default, ``-1``, is after every parameter: ``hess_prod(x, *params, v)``.
            A kernel written ``hess_prod(u, v, mesh, material, out)`` is ``direction="v"`` (or ``1``).

    Returns:
        An `Energy` ``E`` with ``E(x, *params)`` a 0-d array, and methods ``E.grad``,
        ``E.hess_prod``, ``E.hess_diag`` and ``E.hess_quad``.

    Example:
        ```python
        E = jarp.warp.energy(energy_kernel, grad_kernel, hess_prod_kernel)
        g = jax.grad(E)(x, edges, stiffness)              # runs grad_kernel
        hv = jax.jvp(lambda x: E.grad(x, edges, stiffness), (x,), (v,))[1]  # runs hess_prod_kernel

        # A clamped (PSD) Hessian for Newton-CG; derivatives of E.grad stay exact.
        grad_module = jarp.warp.jax_kernel(grad_kernel, launch_dims=m, output_dims=n, enable_backward=True)
        Ep = jarp.warp.energy(energy_module, grad_module, projected_hess_prod_module, hessian="projected")
        hv = jax.jvp(lambda x: Ep.grad(x, *p), (x,), (v,))[1]  # exact H v, through Warp's adjoint of grad
        pv = Ep.hess_prod(x, *p, v=v)                            # the projected H v, for CG
        ```
    """
    for name, f in (
        ("fun", fun),
        ("grad", grad),
        ("hess_prod", hess_prod),
        ("hess_diag", hess_diag),
        ("hess_quad", hess_quad),
    ):
        if f is not None and not callable(f):
            raise TypeError(f"energy(): {name} must be a jarp module or a function, got {type(f).__name__}.")
    if hessian not in get_args(HessianKind):
        raise ValueError(
            f"energy(): hessian must be 'exact' (hess_prod is the Hessian of fun) or 'projected' (a clamped, "
            f"positive semi-definite Hessian, not used as a derivative), got {hessian!r}."
        )
    position = _check_signatures(
        {"fun": fun, "grad": grad, "hess_prod": hess_prod, "hess_diag": hess_diag, "hess_quad": hess_quad}, direction
    )
    return Energy(fun, grad, hess_prod, hess_diag, hess_quad_fn=hess_quad, hessian=hessian, direction=position)


def _inputs(f: Callable[..., Any]) -> list[tuple[str, str | None]] | None:
    """``(name, type or None)`` of each positional input of ``f``; None where they are not known before a call."""
    if isinstance(f, AbstractWarpModule):
        specs = f.input_specs()
        if specs is None:
            return None
        return [(s.name, None if s.generic else s.phrase()) for s in specs]  # a generic parameter has no type yet
    try:
        params = inspect.signature(f).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        return None
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [(p.name, None) for p in params if p.kind in kinds and p.default is inspect.Parameter.empty]


def _check_signatures(fns: dict[str, Callable[..., Any] | None], direction: str | int) -> int:
    """Check the derivative functions' inputs against ``fun``'s; return the direction's position (from the end if < 0).

    ``fun``, ``grad`` and ``hess_diag`` take ``(x, *params)``; ``hess_prod`` and ``hess_quad`` the same with the
    direction inserted at ``direction``. Where a module's inputs are known (a jarp module, or a function's
    signature) their number must agree, and where both sides have a type (non-generic jarp modules) it must too.
    """
    known = {name: _inputs(f) for name, f in fns.items() if f is not None}

    def listing(inputs: list[tuple[str, str | None]]) -> str:
        return ", ".join(n for n, _ in inputs)

    with_v = [name for name in ("hess_prod", "hess_quad") if known.get(name) is not None]
    if isinstance(direction, str):
        if not with_v:
            raise TypeError(
                f"energy(): direction={direction!r} names a parameter, but hess_prod's parameters are not known before "
                "a call (a generic jax_callable, or a function taking *args); pass its position instead, e.g. "
                "direction=1."
            )
        positions = {}
        for name in with_v:
            names = [n for n, _ in known[name]]  # type: ignore[union-attr]
            if direction not in names:
                raise ValueError(
                    f"energy(): direction={direction!r} is not a parameter of {name} (its inputs are "
                    f"{listing(known[name])}); name the parameter that takes the direction v."  # type: ignore[arg-type]
                )
            positions[name] = names.index(direction)
        if len(set(positions.values())) > 1:
            raise ValueError(
                f"energy(): the direction {direction!r} is at different positions in hess_prod and hess_quad "
                f"({positions}); jarp passes it at one position to both."
            )
        position = next(iter(positions.values()))
    elif isinstance(direction, int) and not isinstance(direction, bool):
        position = direction
    else:
        raise TypeError(f"energy(): direction must be a parameter name or a position (int), got {direction!r}.")
    if position == 0:
        raise ValueError("energy(): direction=0 is the point x's position; x comes first in every energy function.")
    reference = known.get("fun")
    if reference is None:
        return position
    n = len(reference)
    at = position if position >= 0 else n + 1 + position
    if not 0 < at <= n:  # checked here too: hess_prod's own inputs may be unknown (a function taking *args)
        raise ValueError(
            f"energy(): direction={direction!r} is outside hess_prod's inputs (fun's {listing(reference)}, and v)."
        )
    for name, inputs in known.items():
        if inputs is None or name == "fun":
            continue
        params = list(inputs)
        if name in ("hess_prod", "hess_quad"):
            if len(params) != n + 1:
                raise TypeError(
                    f"energy(): {name} takes {len(params)} inputs ({listing(params)}), fun takes {n} "
                    f"({listing(reference)}); {name} takes fun's inputs and the direction v."
                )
            del params[at]
        elif len(params) != n:
            raise TypeError(
                f"energy(): {name} takes {len(params)} inputs ({listing(params)}), fun takes {n} "
                f"({listing(reference)}); they must take the same (x, *params)."
            )
        for (pname, ptype), (rname, rtype) in zip(params, reference, strict=True):
            if ptype is not None and rtype is not None and ptype != rtype:
                raise TypeError(
                    f"energy(): {name}'s input {pname!r} is a {ptype}, but fun's input {rname!r} at the same position "
                    f"is a {rtype}; every function gets the same (x, *params)"
                    + (f" (the direction is at position {position})." if name in ("hess_prod", "hess_quad") else ".")
                )
    return position
