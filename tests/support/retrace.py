"""Counting the traces of a model rebuilt afresh, for the tests of comparison by value.

Used by `tests/warp/modules/test_rebuilds.py` and `tests/warp/plan/test_static_keys.py`.
"""

from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np

X = jnp.arange(4.0, dtype=jnp.float32)


class Model(eqx.Module):
    """A model holding one adding module (a kernel or callable ``add(a, b)`` returning ``(a + b,)``)."""

    add: Any

    def __call__(self, a: Any, b: Any) -> Any:
        return self.add(a, b)[0]


def count_traces(build: Any, n: int = 3) -> int:
    """How many times ``eqx.filter_jit`` traces a call of ``n`` models, each built afresh by ``build()``."""
    count = 0

    @eqx.filter_jit
    def run(model: Model, a: Any, b: Any) -> Any:
        nonlocal count
        count += 1
        return model(a, b)

    for _ in range(n):
        np.testing.assert_allclose(run(Model(build()), X, X), 2 * np.asarray(X))
    return count
