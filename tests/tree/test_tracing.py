from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jarp.tree import NotJaxCompatibleError, is_traced, no_jax_tracing


def test_is_traced_on_concrete_values() -> None:
    for value in (jnp.ones(2), np.ones(2), 1.0, "s", None, {"a": [jnp.ones(1)]}):
        assert not is_traced(value)


def test_is_traced_inside_transformations() -> None:
    seen: list[bool] = []

    def record(x: jax.Array) -> jax.Array:
        seen.append(is_traced(x))
        seen.append(is_traced({"nested": [1.0, x]}))
        seen.append(is_traced(np.ones(1)))  # NumPy constants are never tracers
        return jnp.sum(x)

    x = jnp.ones(2)
    jax.jit(record)(x)
    jax.vmap(record)(x)
    jax.grad(record)(x)
    assert seen == [True, True, False] * 3


@no_jax_tracing
def _summarise(x: jax.Array, *, state: dict[str, jax.Array] | None = None) -> float:
    """Concrete summary."""
    return float(np.sum(x)) + (0.0 if state is None else float(np.sum(state["pos"])))


def test_no_jax_tracing_allows_concrete_calls() -> None:
    assert _summarise(jnp.ones(3)) == 3.0
    assert _summarise(jnp.ones(3), state={"pos": jnp.ones(2)}) == 5.0
    assert _summarise.__name__ == "_summarise"
    assert _summarise.__doc__ == "Concrete summary."
    # Static arguments of jit and NumPy constants are not tracers.
    assert jax.jit(lambda n: jnp.float32(_summarise(np.ones(n))), static_argnums=0)(2) == 2.0


def test_no_jax_tracing_rejects_tracers() -> None:
    assert issubclass(NotJaxCompatibleError, TypeError)
    with pytest.raises(NotJaxCompatibleError, match=r"`_summarise` cannot be used inside a JAX transformation.*`x`"):
        jax.jit(_summarise)(jnp.ones(2))
    with pytest.raises(NotJaxCompatibleError, match=r"argument `x` is a tracer \(BatchTracer"):
        jax.vmap(_summarise)(jnp.ones((2, 2)))
    with pytest.raises(NotJaxCompatibleError, match=r"`x`"):
        jax.grad(_summarise)(jnp.ones(2))


def test_no_jax_tracing_names_nested_keyword_argument() -> None:
    @jax.jit
    def f(pos: jax.Array) -> jax.Array:
        _summarise(np.ones(2), state={"pos": pos})
        return pos

    with pytest.raises(NotJaxCompatibleError, match=r"argument `state\['pos'\]` is a tracer"):
        f(jnp.ones(2))


def test_no_jax_tracing_on_callables_without_signature() -> None:
    guarded = no_jax_tracing(max)  # builtins like `max` have no inspectable signature
    assert guarded(1, 2) == 2
    with pytest.raises(NotJaxCompatibleError, match=r"`args\[1\]`"):
        jax.jit(lambda x: guarded(1, x))(jnp.float32(1.0))
