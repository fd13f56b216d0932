"""Hostile input: ``vmap`` with random ``in_axes``.

Negative axes, size-0 batches, unbatched inputs, nested ``vmap`` and a batched runtime scalar, with both vmap methods
where they are right for the kernel, NumPy or JAX inputs, with and without ``jit``: the result matches NumPy slice by
slice and the caller's arrays stay intact. The modules, their NumPy references and the checks are in
``tests/support/hostile.py``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.hostile import (
    CASES,
    F32,
    _no_hang,  # noqa: F401 (autouse fixture)
    as_form,
    assert_unchanged,
    check_result,
    fuzz,
    kinds_of,
    out_shape,
    snapshot,
)

pytestmark = pytest.mark.launch_paths  # also run on the Python launch path (noxfile.py)


# ======================================================================================================================
# vmap with random in_axes (size-0 batches, negative axes, nested), both vmap methods where they are valid
# ======================================================================================================================


def batched_inputs(rng, case, shapes, batch, axes):
    """Inputs batched along ``axes`` (None: shared), and the unbatched inputs of each batch slice."""
    common = case.fill(rng, shapes)
    slices = [case.fill(rng, shapes) for _ in range(batch)]
    per_slice = [[s[k] if axes[k] is not None else common[k] for k in range(len(shapes))] for s in slices]
    args = []
    for k, axis in enumerate(axes):
        if axis is None:
            args.append(common[k])
            continue
        stacked = np.stack([s[k] for s in slices]) if batch else np.zeros((0, *shapes[k]), common[k].dtype)
        args.append(np.moveaxis(stacked, 0, axis))
    return args, per_slice


@pytest.mark.parametrize("name", list(CASES))
@fuzz(max_examples=10)
@given(data=st.data())
def test_vmap_with_random_in_axes(name, data):
    case = CASES[name]
    kind = data.draw(st.sampled_from(kinds_of(case)), label="kind")
    methods = ["sequential", "broadcast_all"] if case.foldable else ["sequential"]
    method = data.draw(st.sampled_from(methods), label="vmap_method")
    form = data.draw(st.sampled_from(["numpy", "jax"]), label="form")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    shapes = case.shapes(data)
    batch = data.draw(st.integers(0, 3), label="batch")
    axes = [data.draw(st.one_of(st.none(), st.integers(-s.ndim - 1, s.ndim)), label="axis") for s in case.arrays]
    if all(a is None for a in axes):
        axes[0] = 0
    outer = data.draw(st.integers(0, 2), label="outer batch")  # 0: no outer vmap
    scalars = {}
    if name == "knobs" and kind == "kernel" and data.draw(st.booleans(), label="runtime gain"):
        scalars["gain"] = "batched"

    def one_level():
        args, per_slice = batched_inputs(rng, case, shapes, batch, axes)
        gains = rng.integers(-8, 9, size=batch).astype(np.float32) / 4
        expect = [case.expected(s, {"gain": g} if scalars else None) for s, g in zip(per_slice, gains, strict=True)]
        single = out_shape(case, case.fill(rng, shapes))
        expect = np.stack(expect) if batch else np.zeros((0, *single), F32)
        return args, gains, expect

    module = case.module(kind)

    def f(*xs):
        *arrays, gain = xs
        values = {"gain": gain} if scalars else {}
        return module(*case.merge(arrays, values), vmap_method=method)

    in_axes = (*axes, 0 if scalars else None)
    g = jax.vmap(f, in_axes=in_axes)
    if outer:
        levels = [one_level() for _ in range(outer)]
        args = [np.stack([lv[0][k] for lv in levels]) for k in range(len(axes))]
        gains = np.stack([lv[1] for lv in levels])
        expect = np.stack([lv[2] for lv in levels])
        g = jax.vmap(g, in_axes=0)
    else:
        args, gains, expect = one_level()
    args = [as_form(a, form) for a in args]
    snap = snapshot(args)
    if data.draw(st.booleans(), label="jit"):
        g = jax.jit(g)
    check_result(g(*args, jnp.asarray(gains) if scalars else None), [expect])
    assert_unchanged(snap)
