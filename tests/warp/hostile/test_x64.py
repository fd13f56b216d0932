"""Hostile input: 64-bit values in the float64 process (tests marked ``x64``).

With ``JAX_ENABLE_X64=1``, 64-bit JAX arrays and scalars passed to the float32/int32 kernels are refused naming the
argument (and, for arrays, pointing at ``astype``), while the right types, Python floats included, still work. The
modules, their NumPy references and the checks are in ``tests/support/hostile.py``.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.hostile import (
    CASES,
    _no_hang,  # noqa: F401 (autouse fixture)
    _ref_knobs,
    call,
    check_error,
    check_result,
    draw_valid,
    fuzz,
    kinds_of,
    quoted,
)

pytestmark = pytest.mark.launch_paths  # also run on the Python launch path (noxfile.py)


# ======================================================================================================================
# float64 process: 64-bit JAX arrays and scalars reach the float32/int32 kernels
# ======================================================================================================================


@pytest.mark.x64
@pytest.mark.parametrize("name", list(CASES))
@fuzz(max_examples=8)
@given(data=st.data())
def test_x64_wide_jax_arrays_are_refused_naming_the_argument(name, data):
    case = CASES[name]
    kind = data.draw(st.sampled_from(kinds_of(case)), label="kind")
    arrays, _ = draw_valid(data, case)
    k = data.draw(st.integers(0, len(arrays) - 1), label="which")
    wide = {np.dtype(np.float32): jnp.float64, np.dtype(np.int32): jnp.int64}[case.arrays[k].dtype]
    args = [jnp.asarray(a) for a in arrays]
    args[k] = args[k].astype(wide)
    with pytest.raises(TypeError) as excinfo:
        call(case.module(kind), case.merge(args), data.draw(st.sampled_from(["eager", "jit"]), label="mode"))
    msg = check_error(excinfo, quoted(case.arrays[k].name))
    assert str(np.dtype(wide)) in msg, msg
    assert "astype" in msg, msg
    # the right types still work in the float64 process, Python floats included (static, converted to float32)
    check_result(case.module(kind)(*case.merge(map(jnp.asarray, arrays))), [case.expected(arrays)])


@pytest.mark.x64
def test_x64_scalars():
    case = CASES["knobs"]
    a = np.arange(3, dtype=np.float32)
    check_result(case.kernel(jnp.asarray(a), 0.1, 2, False), [_ref_knobs(a, 0.1, 2, False)])
    check_result(case.kernel(jnp.asarray(a), jnp.float32(0.5), 2, False), [_ref_knobs(a, 0.5, 2, False)])
    for value in (jnp.float64(0.5), jnp.asarray(0.5)):
        with pytest.raises(TypeError) as excinfo:
            case.kernel(jnp.asarray(a), value, 2, False)
        assert "float64" in check_error(excinfo, "'gain'")
    with pytest.raises(TypeError) as excinfo:
        case.kernel(jnp.asarray(a), 1.0, jnp.int64(2), False)
    check_error(excinfo, "'shift'")
