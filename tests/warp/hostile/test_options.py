"""Hostile input: random construction options.

Random ``num_outputs`` (negative, too many, strings, ``None``, floats, bools) and ``in_out_argnames`` (unknown names,
scalars, outputs, duplicates, a bare string) are accepted only when they describe the kernel's parameters consistently,
else refused naming the option. The modules, their NumPy references and the checks are in ``tests/support/hostile.py``.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jarp.warp import jax_callable, jax_kernel
from tests.support import kernels_hostile as kh
from tests.support.hostile import (
    ERRORS,
    KINDS,
    _no_hang,  # noqa: F401 (autouse fixture)
    fuzz,
)

pytestmark = pytest.mark.launch_paths  # also run on the Python launch path (noxfile.py)


# ======================================================================================================================
# Construction options: random num_outputs / in_out_argnames are accepted or refused naming the option
# ======================================================================================================================


@fuzz(max_examples=30)
@given(
    num_outputs=st.one_of(st.integers(-2, 6), st.sampled_from(["1", None, 2.5])),  # 1.0, True: the test below
    in_out=st.one_of(
        st.lists(st.sampled_from(["a", "gain", "shift", "flip", "out", "zzz"]), max_size=3), st.sampled_from(["a", ""])
    ),
    kind=st.sampled_from(KINDS),
)
def test_random_output_options_at_construction(num_outputs, in_out, kind):
    target = kh.knobs_kernel if kind == "kernel" else kh.knobs_func
    build = jax_kernel if kind == "kernel" else jax_callable
    try:
        build(target, num_outputs=num_outputs, in_out_argnames=in_out)
        refusal = None
    except ERRORS as e:
        refusal = str(e)
    if refusal is not None:
        assert any(o in refusal for o in ("num_outputs", "in_out_argnames", "output parameter")), refusal
        return
    # accepted: the options describe knobs' parameters consistently (every output is an array; a, out in-out at most)
    names = [in_out] if isinstance(in_out, str) else list(in_out)
    assert isinstance(num_outputs, int), num_outputs
    assert num_outputs - len(names) in (0, 1), (num_outputs, names)
    assert set(names) <= {"a", "out"}, names
    assert len(set(names)) == len(names), names


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("value", [1.0, True])
def test_non_int_num_outputs_is_refused_even_after_an_int_one(kind, value):
    target = kh.knobs_kernel if kind == "kernel" else kh.knobs_func
    build = jax_kernel if kind == "kernel" else jax_callable
    build(target, num_outputs=1)
    with pytest.raises(TypeError, match="num_outputs"):
        build(target, num_outputs=value)
