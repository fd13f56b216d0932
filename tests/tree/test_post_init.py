from __future__ import annotations

import dataclasses
import io
import threading

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jarp.tree import no_post_init, skip_post_init_if_disabled


class SortedKeys(eqx.Module):
    keys: jax.Array
    values: jax.Array

    @skip_post_init_if_disabled
    def __check_init__(self) -> None:
        if self.keys.shape != self.values.shape:
            raise ValueError("keys and values must have the same shape")
        if not bool(np.all(np.diff(np.asarray(self.keys)) > 0)):  # needs concrete values
            raise ValueError("keys must be strictly increasing")


@dataclasses.dataclass(frozen=True)
class Interval:
    low: float
    high: float
    margin: dataclasses.InitVar[float] = 0.0

    @skip_post_init_if_disabled
    def __post_init__(self, margin: float) -> None:
        if self.low + margin > self.high:
            raise ValueError("empty interval")


def _valid() -> SortedKeys:
    return SortedKeys(jnp.array([1, 2, 3]), jnp.array([0.1, 0.2, 0.3]))


def test_validation_runs_by_default() -> None:
    _valid()
    with pytest.raises(ValueError, match="strictly increasing"):
        SortedKeys(jnp.array([2, 1]), jnp.zeros(2))
    with pytest.raises(ValueError, match="empty interval"):
        Interval(0.0, 1.0, margin=2.0)
    assert SortedKeys.__check_init__.__name__ == "__check_init__"


def test_no_post_init_suspends_and_restores() -> None:
    with no_post_init():
        SortedKeys(jnp.array([2, 1]), jnp.zeros(2))
        Interval(0.0, 1.0, margin=2.0)
        with no_post_init():  # re-entrant
            SortedKeys(jnp.array([2, 1]), jnp.zeros(2))
        SortedKeys(jnp.array([2, 1]), jnp.zeros(2))  # still suspended after the inner block
    with pytest.raises(ValueError, match="strictly increasing"):
        SortedKeys(jnp.array([2, 1]), jnp.zeros(2))


def test_restored_after_an_exception() -> None:
    with pytest.raises(RuntimeError, match="boom"), no_post_init():
        raise RuntimeError("boom")
    with pytest.raises(ValueError, match="strictly increasing"):
        SortedKeys(jnp.array([2, 1]), jnp.zeros(2))


def test_as_a_decorator() -> None:
    @no_post_init()
    def build() -> SortedKeys:
        return SortedKeys(jnp.array([3, 3]), jnp.zeros(2))

    assert build().keys.tolist() == [3, 3]
    with pytest.raises(ValueError, match="strictly increasing"):
        SortedKeys(jnp.array([3, 3]), jnp.zeros(2))


def test_deserialisation_into_a_placeholder_template() -> None:
    original = _valid()
    buffer = io.BytesIO()
    eqx.tree_serialise_leaves(buffer, original)
    buffer.seek(0)
    with pytest.raises(ValueError, match="strictly increasing"):
        SortedKeys(jnp.zeros(3, jnp.int32), jnp.zeros(3))  # the natural placeholder is invalid
    with no_post_init():
        template = SortedKeys(jnp.zeros(3, jnp.int32), jnp.zeros(3))
    restored = eqx.tree_deserialise_leaves(buffer, template)
    assert restored.keys.tolist() == [1, 2, 3]
    np.testing.assert_array_equal(restored.values, original.values)


def test_shape_only_skeleton_with_filter_eval_shape() -> None:
    # The check needs concrete values, so building an abstract skeleton fails unless it is suspended.
    with pytest.raises(jax.errors.TracerArrayConversionError):
        eqx.filter_eval_shape(SortedKeys, jnp.arange(4), jnp.zeros(4))
    with no_post_init():
        skeleton = eqx.filter_eval_shape(SortedKeys, jnp.arange(4), jnp.zeros(4))
    assert skeleton.keys.shape == (4,)
    assert isinstance(skeleton.keys, jax.ShapeDtypeStruct)


def test_structural_updates() -> None:
    table = _valid()
    # eqx.tree_at rebuilds Modules without calling __init__, so it never validates ...
    shuffled = eqx.tree_at(lambda t: t.keys, table, jnp.array([3, 1, 2]))
    assert shuffled.keys.tolist() == [3, 1, 2]
    # ... but dataclasses.replace does, and several dependent steps pass through invalid states.
    with pytest.raises(ValueError, match="same shape"):
        dataclasses.replace(table, keys=jnp.array([1, 2, 3, 4]))
    with no_post_init():
        grown = dataclasses.replace(table, keys=jnp.array([1, 2, 3, 4]))
        grown = dataclasses.replace(grown, values=jnp.append(grown.values, 0.4))
    grown = dataclasses.replace(grown)  # validates the final state
    assert grown.values.shape == (4,)


def test_under_jit() -> None:
    class Positive(eqx.Module):
        x: jax.Array

        @skip_post_init_if_disabled
        def __check_init__(self) -> None:
            if not bool(jnp.all(self.x > 0)):  # concrete only
                raise ValueError("x must be positive")

    @jax.jit
    def build(x: jax.Array) -> jax.Array:
        with no_post_init():
            return Positive(x * 2).x

    assert build(jnp.ones(2)).tolist() == [2.0, 2.0]
    with pytest.raises(jax.errors.TracerBoolConversionError):
        jax.jit(lambda x: Positive(x).x)(jnp.ones(2))


def test_thread_local() -> None:
    inside = threading.Event()
    checked = threading.Event()
    errors: list[BaseException] = []

    def hold_the_switch() -> None:
        with no_post_init():
            inside.set()
            checked.wait(timeout=30)

    def validate_elsewhere() -> None:
        inside.wait(timeout=30)
        try:
            SortedKeys(jnp.array([2, 1]), jnp.zeros(2))
        except ValueError as e:
            errors.append(e)
        finally:
            checked.set()

    threads = [threading.Thread(target=hold_the_switch), threading.Thread(target=validate_elsewhere)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(errors) == 1
    assert "strictly increasing" in str(errors[0])
    # And the other direction: a suspension in another thread leaves this one suspended or not as it was.
    with no_post_init():
        worker = threading.Thread(target=lambda: errors.append(_try_invalid()))
        worker.start()
        worker.join(timeout=60)
        SortedKeys(jnp.array([2, 1]), jnp.zeros(2))
    assert isinstance(errors[-1], ValueError)


def _try_invalid() -> BaseException | None:
    try:
        SortedKeys(jnp.array([2, 1]), jnp.zeros(2))
    except ValueError as e:
        return e
    return None
