from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator, Sequence

import jax
import jax.numpy as jnp
from jaxtyping import PRNGKeyArray


def key_chain(rng: PRNGKeyArray, shape: int | Sequence[int] = ()) -> Iterator[PRNGKeyArray]:
    """Turn one PRNG key into an infinite, deterministic stream of independent keys.

    Replaces the `key, subkey = jax.random.split(key)` bookkeeping in loops: draw a fresh key
    with `next(keys)` or by zipping the chain with the items to process. The `n`-th key is
    `jax.random.fold_in(base, n)` for a `base` split off `rng`, so the stream depends only on `rng`
    and is the same under `jit` and in eager mode. `rng` is consumed by the call (as by
    `jax.random.split`); do not use it again.

    Args:
        rng: A single PRNG key: a scalar typed key from `jax.random.key`, or a legacy raw key from
            `jax.random.PRNGKey`.
        shape: Shape of the key array produced at each step; `()` gives single keys.

    Returns:
        An infinite iterator of key arrays of the given shape, each usable once.

    Raises:
        ValueError: If `rng` is a batch of keys rather than a single key.

    Example:
        ```python
        import jax
        from jarp.tree import key_chain

        keys = key_chain(jax.random.key(0))
        noise = [jax.random.normal(key, (3,)) for key, _ in zip(keys, range(4))]
        pair = next(key_chain(jax.random.key(1), shape=(2,)))
        assert pair.shape == (2,)
        ```
    """
    if isinstance(shape, int):
        shape = (shape,)
    shape = tuple(operator.index(n) for n in shape)
    rng = jnp.asarray(rng)
    typed = jnp.issubdtype(rng.dtype, jax.dtypes.prng_key)
    if (typed and rng.ndim != 0) or (not typed and rng.ndim != 1):
        kind = "typed key array" if typed else f"raw key array of dtype {rng.dtype}"
        raise ValueError(
            f"key_chain: `rng` must be a single PRNG key (a scalar from `jax.random.key`, or a raw key of shape "
            f"(2,) from `jax.random.PRNGKey`), but got a {kind} of shape {rng.shape}. For one chain per key of a "
            "batch, call `key_chain` inside `jax.vmap`."
        )
    (base,) = jax.random.split(rng, 1)
    return _chain(base, shape)


def _chain(base: PRNGKeyArray, shape: tuple[int, ...]) -> Iterator[PRNGKeyArray]:
    for n in itertools.count():
        key = jax.random.fold_in(base, n)
        yield key if shape == () else jax.random.split(key, shape)
