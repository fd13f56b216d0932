from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jarp.tree import key_chain


def _data(keys: list[jax.Array]) -> np.ndarray:
    return np.stack([np.asarray(jax.random.key_data(k)) for k in keys])


def test_deterministic_and_distinct() -> None:
    first = list(itertools.islice(key_chain(jax.random.key(0)), 50))
    again = list(itertools.islice(key_chain(jax.random.key(0)), 50))
    other = list(itertools.islice(key_chain(jax.random.key(1)), 50))
    np.testing.assert_array_equal(_data(first), _data(again))
    assert len({tuple(row) for row in _data(first)}) == 50
    assert not {tuple(row) for row in _data(first)} & {tuple(row) for row in _data(other)}
    assert all(k.shape == () and jax.dtypes.issubdtype(k.dtype, jax.dtypes.prng_key) for k in first)


def test_keys_give_independent_samples_and_are_each_usable_once() -> None:
    # conftest enables jax_debug_key_reuse, so using any key twice would raise here.
    samples = jnp.stack(
        [jax.random.normal(key, (4,)) for key, _ in zip(key_chain(jax.random.key(3)), range(20), strict=False)]
    )
    assert len(np.unique(np.asarray(samples[:, 0]))) == 20


def test_input_key_is_consumed() -> None:
    rng = jax.random.key(0)
    key_chain(rng)
    with pytest.raises(jax.errors.KeyReuseError):
        jax.random.normal(rng)


def test_shapes() -> None:
    batch = next(key_chain(jax.random.key(0), shape=(2, 3)))
    assert batch.shape == (2, 3)
    assert len({tuple(row) for row in np.asarray(jax.random.key_data(batch)).reshape(6, -1)}) == 6
    assert next(key_chain(jax.random.key(0), shape=4)).shape == (4,)


def test_legacy_raw_keys() -> None:
    keys = list(itertools.islice(key_chain(jax.random.PRNGKey(0)), 3))
    assert all(k.shape == (2,) and k.dtype == jnp.uint32 for k in keys)
    assert len({tuple(np.asarray(k)) for k in keys}) == 3
    assert next(key_chain(jax.random.PRNGKey(0), shape=(5,))).shape == (5, 2)


def test_rejects_batches_of_keys() -> None:
    with pytest.raises(ValueError, match=r"single PRNG key.*typed key array of shape \(3,\).*jax.vmap"):
        key_chain(jax.random.split(jax.random.key(0), 3))
    with pytest.raises(ValueError, match=r"raw key array of dtype uint32 of shape \(3, 2\)"):
        key_chain(jax.random.split(jax.random.PRNGKey(0), 3))


def test_same_keys_under_jit() -> None:
    @jax.jit
    def draw(rng: jax.Array) -> jax.Array:
        return jnp.stack([jax.random.key_data(k) for k, _ in zip(key_chain(rng), range(5), strict=False)])

    eager = _data(list(itertools.islice(key_chain(jax.random.key(7)), 5)))
    np.testing.assert_array_equal(draw(jax.random.key(7)), eager)


def _reference(rng: jax.Array, count: int, shape: tuple[int, ...] = ()) -> list[jax.Array]:
    """The documented stream built by hand: the n-th key is ``fold_in(base, n)`` for ``(base,) = split(rng, 1)``."""
    (base,) = jax.random.split(rng, 1)
    keys = [jax.random.fold_in(base, n) for n in range(count)]
    return keys if shape == () else [jax.random.split(k, shape) for k in keys]


@pytest.mark.parametrize("make", [jax.random.key, jax.random.PRNGKey], ids=["typed", "raw"])
@pytest.mark.parametrize("shape", [(), (2, 3)], ids=["single", "batch"])
def test_stream_matches_a_hand_built_reference_eagerly_and_under_jit(make, shape) -> None:
    expected = np.stack([np.asarray(jax.random.key_data(k)) for k in _reference(make(7), 6, shape)])

    def draw(rng: jax.Array) -> jax.Array:
        return jnp.stack([jax.random.key_data(k) for k, _ in zip(key_chain(rng, shape), range(6), strict=False)])

    np.testing.assert_array_equal(draw(make(7)), expected)
    np.testing.assert_array_equal(jax.jit(draw)(make(7)), expected)


def test_under_vmap() -> None:
    def noise(rng: jax.Array) -> jax.Array:
        keys = key_chain(rng)
        return jnp.stack([jax.random.uniform(next(keys)) for _ in range(3)])

    rngs = jax.random.split(jax.random.key(0), 4)
    batched = jax.vmap(noise)(rngs)
    assert batched.shape == (4, 3)
    assert len(np.unique(np.asarray(batched))) == 12
    np.testing.assert_array_equal(batched[2], noise(jax.random.split(jax.random.key(0), 4)[2]))
