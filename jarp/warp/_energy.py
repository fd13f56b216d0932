"""`Energy`: a scalar energy with hand-written derivative kernels, wired into JAX's autodiff."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero

from ._rules import linear_call


def _first(out: Any) -> jax.Array:
    return out[0] if isinstance(out, (tuple, list)) else out


def _nonzero(t: Any) -> bool:
    return not isinstance(t, SymbolicZero)


def _is_float(x: Any) -> bool:
    return isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jnp.inexact)


class Energy(eqx.Module):
    """A scalar energy ``E(x, *params)`` whose derivatives are user kernels.

    Build it with `jarp.warp.energy`. Under JAX's autodiff:

    * ``jax.grad(E)`` runs the ``grad`` kernel; ``jax.jvp(E)`` contracts it with the tangent;
    * ``jax.jvp(jax.grad(E))`` (a Hessian-vector product) runs the ``hess_prod`` kernel, and
      reverse mode over ``grad`` uses it too (the Hessian is symmetric), so ``jax.hessian``,
      ``jax.jacfwd(jax.grad(E))`` and ``jax.linearize(jax.grad(E), x)`` work;
    * derivatives with respect to floating-point ``params`` go through Warp's adjoint of
      the ``fun`` and ``grad`` modules (build them with ``enable_backward=True``).

    Integer ``params`` (edge lists, element connectivity) are passed through untouched.
    """

    fun: Callable[..., Any] = eqx.field(static=True)
    grad_fn: Callable[..., Any] = eqx.field(static=True)
    hess_prod_fn: Callable[..., Any] = eqx.field(static=True)
    hess_diag_fn: Callable[..., Any] | None = eqx.field(static=True, default=None)

    def __call__(self, x: jax.Array, *params: Any) -> jax.Array:
        """The energy at ``x``, as a 0-d array."""
        return _energy(self, x, *params)

    def grad(self, x: jax.Array, *params: Any) -> jax.Array:
        """The gradient ``dE/dx`` (shaped like ``x``), differentiable through ``hess_prod``."""
        return _gradient(self, x, *params)

    def hess_prod(self, x: jax.Array, *params: Any, v: jax.Array) -> jax.Array:
        """The Hessian-vector product ``H(x) v``."""
        return _first(self.hess_prod_fn(x, *params, v))

    def hess_diag(self, x: jax.Array, *params: Any) -> jax.Array:
        """The diagonal of the Hessian (shaped like ``x``), e.g. for a Jacobi preconditioner."""
        if self.hess_diag_fn is None:
            raise ValueError("energy(): no hess_diag module was given; pass hess_diag=... to energy().")
        return _first(self.hess_diag_fn(x, *params))


def _value(self: Energy, x: jax.Array, *params: Any) -> jax.Array:
    out = _first(self.fun(x, *params))
    if out.size != 1:
        raise ValueError(f"energy(): fun must return a one-element array, got shape {out.shape}.")
    return out.reshape(())


def _of_params(fn: Callable[..., Any], x: jax.Array, params: Sequence[Any], idx: Sequence[int]) -> Callable[..., Any]:
    """``fn(x, *params)`` as a function of the params at positions ``idx`` only."""

    def f(*values: Any) -> Any:
        full = list(params)
        for i, v in zip(idx, values, strict=True):
            full[i] = v
        return fn(x, *full)

    return f


def _param_vjp(fn: Callable[..., Any], x: jax.Array, params: Sequence[Any], ct: jax.Array) -> list[Any]:
    """Cotangents of the floating-point ``params`` of ``fn(x, *params)`` (reverse mode, Warp's adjoint)."""
    idx = [i for i, p in enumerate(params) if _is_float(p)]
    _, pullback = jax.vjp(_of_params(fn, x, params, idx), *[params[i] for i in idx])
    grads = pullback(ct)
    out: list[Any] = [None] * len(params)
    for i, g in zip(idx, grads, strict=True):
        out[i] = g
    return out


@jax.custom_jvp
def _energy(self: Energy, x: jax.Array, *params: Any) -> jax.Array:
    return _value(self, x, *params)


def _energy_jvp(primals: Any, tangents: Any) -> Any:
    self, x, *params = primals
    _, dx, *dparams = tangents
    e = _energy(self, x, *params)  # itself, so that an outer forward mode uses this rule again
    t = jnp.zeros_like(e)
    if _nonzero(dx):
        t = t + jnp.vdot(_gradient(self, x, *params), dx)
    if any(_nonzero(dp) and _is_float(p) for p, dp in zip(params, dparams, strict=True)):
        grads = _param_vjp(lambda x, *p: _value(self, x, *p), x, params, jnp.ones_like(e))
        for g, dp in zip(grads, dparams, strict=True):
            if g is not None and _nonzero(dp):
                t = t + jnp.vdot(g, dp)
    return e, t


_energy.defjvp(_energy_jvp, symbolic_zeros=True)


@jax.custom_jvp
def _gradient(self: Energy, x: jax.Array, *params: Any) -> jax.Array:
    return _first(self.grad_fn(x, *params))


def _gradient_jvp(primals: Any, tangents: Any) -> Any:
    self, x, *params = primals
    _, dx, *dparams = tangents
    g = _gradient(self, x, *params)
    t = jnp.zeros_like(g)
    if _nonzero(dx):

        def hvp(res: Any, lin: Any) -> Any:
            return (_first(self.hess_prod_fn(res[0], *res[1:], lin[0])),)

        # The Hessian is symmetric: the tangent map is its own transpose.
        t = t + linear_call(hvp, hvp, (x, *params), (dx,))[0]
    idx = [i for i, (p, dp) in enumerate(zip(params, dparams, strict=True)) if _is_float(p) and _nonzero(dp)]
    if idx:

        def mixed(res: Any, lin: Any) -> Any:
            # Forward mode needs a jvp rule on the grad module; reverse mode only uses `mixed_t`.
            xx, *pp = res
            f = _of_params(lambda x, *p: _first(self.grad_fn(x, *p)), xx, pp, idx)
            return (jax.jvp(f, tuple(pp[i] for i in idx), tuple(lin))[1],)

        def mixed_t(res: Any, cts: Any) -> Any:
            xx, *pp = res
            grads = _param_vjp(lambda x, *p: _first(self.grad_fn(x, *p)), xx, pp, cts[0])
            return tuple(grads[i] for i in idx)

        t = t + linear_call(mixed, mixed_t, (x, *params), tuple(dparams[i] for i in idx), out_shapes=(g,))[0]
    return g, t


_gradient.defjvp(_gradient_jvp, symbolic_zeros=True)


def energy(
    fun: Callable[..., Any],
    grad: Callable[..., Any],
    hess_prod: Callable[..., Any],
    hess_diag: Callable[..., Any] | None = None,
) -> Energy:
    """Wrap an energy and its derivative kernels as one differentiable `Energy` module.

    Args:
        fun: ``fun(x, *params)`` returning a one-element array (the energy), e.g. a
            `JaxKernel` that accumulates ``wp.atomic_add(energy, 0, ...)``.
        grad: ``grad(x, *params)`` returning ``dE/dx``, shaped like ``x``.
        hess_prod: ``hess_prod(x, *params, v)`` returning ``H(x) v``, shaped like ``x``.
        hess_diag: optional ``hess_diag(x, *params)`` returning the Hessian's diagonal.

    Returns:
        An `Energy` ``E`` with ``E(x, *params)`` a 0-d array, and methods ``E.grad``,
        ``E.hess_prod`` and ``E.hess_diag``.

    Example:
        ```python
        E = jarp.warp.energy(energy_kernel, grad_kernel, hess_prod_kernel)
        g = jax.grad(E)(x, edges, stiffness)              # runs grad_kernel
        hv = jax.jvp(lambda x: E.grad(x, edges, stiffness), (x,), (v,))[1]  # runs hess_prod_kernel
        ```
    """
    for name, f in (("fun", fun), ("grad", grad), ("hess_prod", hess_prod), ("hess_diag", hess_diag)):
        if f is not None and not callable(f):
            raise TypeError(f"energy(): {name} must be a jarp module or a function, got {type(f).__name__}.")
    return Energy(fun, grad, hess_prod, hess_diag)
