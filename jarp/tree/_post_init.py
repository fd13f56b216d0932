from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Concatenate, ParamSpec, TypeVar

_Self = TypeVar("_Self")
_P = ParamSpec("_P")


class _State(threading.local):
    depth: int = 0


_state = _State()


@contextlib.contextmanager
def no_post_init() -> Iterator[None]:
    """Suspend validation decorated with `skip_post_init_if_disabled` for the duration of a block.

    Module invariants checked in `__check_init__` (Equinox) or `__post_init__` (dataclasses) can
    be in the way when a Module is built as a placeholder: the "like" template passed to
    `eqx.tree_deserialise_leaves`, a skeleton built under `eqx.filter_eval_shape` (where values
    are abstract), or an intermediate `dataclasses.replace` during a structural update. Inside
    this context, checks decorated with [`jarp.tree.skip_post_init_if_disabled`][] do nothing.

    The switch is thread-local (other threads keep validating) and re-entrant. It acts when the
    Module is constructed, which under `jax.jit` is at trace time. It can also decorate a
    function: `@no_post_init()`.

    Yields:
        Nothing.

    Example:
        ```python
        import io

        import equinox as eqx
        import jax
        import jax.numpy as jnp
        from jarp.tree import no_post_init, skip_post_init_if_disabled


        class Probabilities(eqx.Module):
            p: jax.Array

            @skip_post_init_if_disabled
            def __check_init__(self) -> None:
                if not jnp.isclose(jnp.sum(self.p), 1.0):
                    raise ValueError("probabilities must sum to one")


        buffer = io.BytesIO()
        eqx.tree_serialise_leaves(buffer, Probabilities(jnp.array([0.25, 0.75])))
        buffer.seek(0)
        with no_post_init():
            template = Probabilities(jnp.zeros(2))  # a placeholder: only its structure and shapes matter
        restored = eqx.tree_deserialise_leaves(buffer, template)
        assert restored.p.tolist() == [0.25, 0.75]
        ```
    """
    _state.depth += 1
    try:
        yield
    finally:
        _state.depth -= 1


def skip_post_init_if_disabled(
    post_init: Callable[Concatenate[_Self, _P], None],
) -> Callable[Concatenate[_Self, _P], None]:
    """Make a `__check_init__` or `__post_init__` method do nothing inside [`jarp.tree.no_post_init`][].

    Decorate the validation method of an `eqx.Module` (or a dataclass) with this to let
    deserialisation, shape-only construction and structural updates build temporarily invalid
    instances. Outside `no_post_init`, the method runs as usual.

    Args:
        post_init: The validation method, called with the new instance (and, for a dataclass
            `__post_init__`, its `InitVar` values).

    Returns:
        A method with the same signature that returns `None` without calling `post_init` while
        validation is suspended in the current thread.

    Example:
        ```python
        import dataclasses

        import equinox as eqx
        import jax
        import jax.numpy as jnp
        from jarp.tree import no_post_init, skip_post_init_if_disabled


        class Sorted(eqx.Module):
            keys: jax.Array

            @skip_post_init_if_disabled
            def __check_init__(self) -> None:
                if not bool(jnp.all(self.keys[1:] >= self.keys[:-1])):
                    raise ValueError("keys must be sorted")


        table = Sorted(jnp.array([1, 2, 3]))
        with no_post_init():  # an invalid intermediate state, fixed up right after
            table = dataclasses.replace(table, keys=jnp.array([3, 1, 2]))
        assert table.keys.tolist() == [3, 1, 2]
        table = dataclasses.replace(table, keys=jnp.sort(table.keys))  # validated again
        assert table.keys.tolist() == [1, 2, 3]

        try:  # outside `no_post_init` the check runs as usual
            Sorted(jnp.array([2, 1]))
        except ValueError as error:
            assert str(error) == "keys must be sorted"
        else:
            raise AssertionError("an unsorted table was built")
        ```
    """

    @functools.wraps(post_init)
    def wrapper(self: _Self, /, *args: _P.args, **kwargs: _P.kwargs) -> None:
        if _state.depth > 0:
            return None
        return post_init(self, *args, **kwargs)

    return wrapper
