from __future__ import annotations

import functools
from typing import Any, TypeVar

import equinox as eqx
import jax

_T = TypeVar("_T")


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _identity(x: object, message: str) -> Any:
    return x


@_identity.defjvp
def _identity_jvp(message: str, primals: tuple[Any], tangents: tuple[Any]) -> Any:
    raise NotImplementedError(message)


def non_differentiable(x: _T, *, name: str | None = None) -> _T:
    """Return `x` unchanged, but raise if anything is differentiated through it.

    Marks values whose derivative would be silently wrong or meaningless, such as integer-valued
    neighbour lists computed from positions, or outputs of kernels without an adjoint. Unlike
    `jax.lax.stop_gradient`, which silently returns zero, this fails loudly, in forward mode
    (`jax.jvp`, `jax.jacfwd`) and reverse mode (`jax.grad`, `jax.vjp`) alike, as soon as a
    nonzero tangent reaches `x`. Values that do not depend on the differentiated inputs pass
    freely, and `jit` and `vmap` are unaffected.

    Args:
        x: A pytree. Its array leaves are guarded; other leaves are returned as they are.
        name: Optional name of the value, used in the error message.

    Returns:
        `x`, unchanged.

    Raises:
        NotImplementedError: At trace time, when `x` is differentiated through.

    Example:
        ```python
        import jax
        import jax.numpy as jnp
        from jarp.tree import non_differentiable


        def f(x: jax.Array) -> jax.Array:
            return jnp.sum(non_differentiable(x, name="x") ** 2)


        assert f(jnp.ones(3)) == 3.0
        try:
            jax.grad(f)(jnp.ones(3))
        except NotImplementedError as e:
            assert "`x`" in str(e)
        else:
            raise AssertionError("expected an error")
        ```
    """
    what = "this value" if name is None else f"`{name}`"
    message = (
        f"non_differentiable: attempted to differentiate through {what}, which was marked with "
        "`jarp.tree.non_differentiable`. Its derivative is not available. If a zero derivative is what "
        "you want, use `jax.lax.stop_gradient` instead; otherwise make sure the differentiated inputs do "
        "not flow into it (differentiate with respect to other arguments, or compute it outside the "
        "differentiated function)."
    )
    dynamic, static = eqx.partition(x, eqx.is_array)
    return eqx.combine(_identity(dynamic, message), static)
