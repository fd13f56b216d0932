"""A ``wp.struct`` argument works in every spelling, for plain and generic kernels, concrete or traced.

The same struct value is given as a dict, a NamedTuple, a plain dataclass (not a pytree), an ``eqx.Module``, an object
carrying the fields as attributes, and a Warp struct instance, to a plain kernel and to a generic one (``Any``-typed,
resolved by ``arg_types_factory`` from the struct's first floating-point array field, which is not its first field).
Each combination runs eagerly, with NumPy arrays, under ``jit`` and ``vmap`` (the struct closed over with concrete
arrays, and built inside from traced ones), and under ``grad`` (the struct's float array field differentiated through
Warp's adjoint), against NumPy references. float32 runs in the default process; float64, and float32 structs while
``jax_enable_x64`` is on, in the ``x64`` one.

Also here: the dtype inference of generic targets on its own (``warp_dtypes``), the messages of malformed struct
arguments (naming the field, short, never an array's contents), and eager calls seeing later changes to a struct
given as a mutable object. The Warp code lives in ``tests/support/kernels_spellings.py``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp
from jax.test_util import check_grads

from jarp.warp import jax_kernel
from jarp.warp._plan._binding import struct_like_fields, warp_dtypes
from tests.support import kernels_spellings as kp

pytestmark = pytest.mark.launch_paths  # also run on the Python launch path (noxfile.py)

# ======================================================================================================================
# The six spellings of one struct value
# ======================================================================================================================


class SpringsTuple(NamedTuple):
    ends: Any
    k: Any
    rest: float


@dataclasses.dataclass
class SpringsData:  # a plain (mutable, unhashable) dataclass: not a pytree, one opaque leaf to JAX
    ends: Any
    k: Any
    rest: float


class SpringsModule(eqx.Module):
    ends: Any
    k: Any
    rest: float = eqx.field(static=True)


class SpringsAttrs:
    """Any object with the fields as attributes (not a pytree, hashed by identity)."""

    def __init__(self, ends: Any, k: Any, rest: float) -> None:
        self.ends = ends
        self.k = k
        self.rest = rest
        self._cache = "private attributes are not fields"


def _warp_instance(struct_type: Any, ends: Any, k: Any, rest: float) -> Any:
    s = struct_type()
    s.ends = wp.array(np.asarray(ends), dtype=wp.vec2i)
    s.k = wp.array(np.asarray(k))
    s.rest = rest
    return s


SPELLINGS: dict[str, Callable[..., Any]] = {
    "dict": lambda t, ends, k, rest: {"ends": ends, "k": k, "rest": rest},
    "namedtuple": lambda t, ends, k, rest: SpringsTuple(ends, k, rest),
    "dataclass": lambda t, ends, k, rest: SpringsData(ends, k, rest),
    "eqx_module": lambda t, ends, k, rest: SpringsModule(ends, k, rest),
    "object": lambda t, ends, k, rest: SpringsAttrs(ends, k, rest),
    "warp_struct": _warp_instance,  # holds wp.arrays: built from concrete arrays only, never from tracers
}

# ======================================================================================================================
# The kernels, their data and a NumPy reference
# ======================================================================================================================

N_SPRINGS = 6
X = np.array([[0.0, 0.0], [1.2, 0.1], [2.1, -0.3], [0.4, 1.1], [1.5, 1.4]])
ENDS = np.array([[0, 1], [1, 2], [0, 3], [1, 3], [1, 4], [3, 4]], np.int32)
K = np.array([1.0, 2.5, 0.5, 1.5, 3.0, 0.75])
REST = 0.75


class Kind(NamedTuple):
    module: Any
    struct_type: Any  # the Warp struct type the kernel takes (a Warp struct instance must be of it)
    dtype: Any  # NumPy float type of the data


def _kind(name: str) -> Kind:
    generic = jax_kernel(
        kp.springs_energy,
        arg_types_factory=kp.springs_arg_types,
        enable_backward=True,
        launch_dims=N_SPRINGS,
        output_dims=1,
    )
    kinds = {
        "plain32": (kp.springs32_energy, kp.Springs32, np.float32),
        "plain64": (kp.springs64_energy, kp.Springs64, np.float64),
        "generic32": (None, kp.Springs[wp.float32], np.float32),
        "generic64": (None, kp.Springs[wp.float64], np.float64),
    }
    kernel, struct_type, dtype = kinds[name]
    module = (
        generic if kernel is None else jax_kernel(kernel, enable_backward=True, launch_dims=N_SPRINGS, output_dims=1)
    )
    return Kind(module, struct_type, dtype)


def _reference(x: np.ndarray, k: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """Energy, dE/dk and dE/dx, in float64 NumPy (analytic)."""
    x = np.asarray(x, np.float64)
    k = np.asarray(k, np.float64)
    diff = x[ENDS[:, 1]] - x[ENDS[:, 0]]
    length = np.linalg.norm(diff, axis=1)
    d = length - REST
    de_dx = np.zeros_like(x)
    pull = (2.0 * k * d / length)[:, None] * diff
    np.add.at(de_dx, ENDS[:, 1], pull)
    np.add.at(de_dx, ENDS[:, 0], -pull)
    return float(np.sum(k * d * d)), d * d, de_dx


def _rtol(dtype: Any) -> float:
    return 2e-5 if dtype == np.float32 else 1e-12


KINDS = [
    pytest.param("plain32", id="plain32"),
    pytest.param("generic32", id="generic32"),
    pytest.param("plain64", id="plain64-x64", marks=pytest.mark.x64),
    pytest.param("generic64", id="generic64-x64", marks=pytest.mark.x64),
    # float32 structs while x64 is on: a Python float value field must not decide the dtype (it would say float64)
    pytest.param("generic32", id="generic32-x64", marks=pytest.mark.x64),
]
MODES = ["eager", "numpy", "jit", "vmap", "grad"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind_name", KINDS)
@pytest.mark.parametrize("spelling", list(SPELLINGS))
def test_every_spelling(spelling: str, kind_name: str, mode: str) -> None:
    kind = _kind(kind_name)
    make = SPELLINGS[spelling]
    dtype = kind.dtype
    x, k = X.astype(dtype), K.astype(dtype)
    ends = jnp.asarray(ENDS)
    rtol = _rtol(dtype)

    def energy(springs: Any, x: Any) -> Any:
        (e,) = kind.module(x, springs)
        assert e.dtype == dtype
        assert e.shape == (1,)
        return e[0]

    def build(k: Any) -> Any:
        return make(kind.struct_type, ends, k, REST)

    traced_ok = spelling != "warp_struct"  # a Warp struct instance's fields are wp.arrays: no tracers in it
    if mode == "eager":
        e = energy(build(jnp.asarray(k)), jnp.asarray(x))
        np.testing.assert_allclose(e, _reference(x, k)[0], rtol=rtol)
    elif mode == "numpy":
        springs = make(kind.struct_type, ENDS, k, REST)  # NumPy arrays in the struct, and for x
        np.testing.assert_allclose(energy(springs, x), _reference(x, k)[0], rtol=rtol)
    elif mode == "jit":
        springs = build(jnp.asarray(k))  # closed over: concrete arrays inside jit
        e = jax.jit(lambda x: energy(springs, x))(jnp.asarray(x))
        np.testing.assert_allclose(e, _reference(x, k)[0], rtol=rtol)
        if traced_ok:  # built inside: traced arrays
            e = jax.jit(lambda k, x: energy(build(k), x))(jnp.asarray(k), jnp.asarray(x))
            np.testing.assert_allclose(e, _reference(x, k)[0], rtol=rtol)
    elif mode == "vmap":
        xs = np.stack([x, 1.1 * x, x[::-1]]).astype(dtype)
        springs = build(jnp.asarray(k))  # closed over, x batched
        es = jax.vmap(lambda x: energy(springs, x))(jnp.asarray(xs))
        np.testing.assert_allclose(es, [_reference(xi, k)[0] for xi in xs], rtol=rtol)
        if traced_ok:  # the struct's array field batched
            kb = np.stack([k, 2.0 * k, k[::-1]]).astype(dtype)
            es = jax.vmap(lambda k: energy(build(k), jnp.asarray(x)))(jnp.asarray(kb))
            np.testing.assert_allclose(es, [_reference(x, ki)[0] for ki in kb], rtol=rtol)
    else:
        _, de_dk, de_dx = _reference(x, k)
        if traced_ok:
            gk, gx = jax.grad(lambda k, x: energy(build(k), x), argnums=(0, 1))(jnp.asarray(k), jnp.asarray(x))
            assert gk.dtype == dtype
            np.testing.assert_allclose(gk, de_dk, rtol=rtol, atol=rtol)
        else:  # the struct is a constant here; differentiate x through it
            springs = build(jnp.asarray(k))
            gx = jax.grad(lambda x: energy(springs, x))(jnp.asarray(x))
        np.testing.assert_allclose(gx, de_dx, rtol=rtol, atol=rtol)
        if dtype == np.float64 and traced_ok:
            check_grads(lambda k: energy(build(k), jnp.asarray(x)), (jnp.asarray(k),), order=1, modes=["rev"])


# ======================================================================================================================
# Dtype inference of generic targets
# ======================================================================================================================


@pytest.mark.parametrize("spelling", list(SPELLINGS))
def test_generic_dtype_from_the_first_float_array_field(spelling: str) -> None:
    """Concrete JAX arrays, NumPy arrays, wp.arrays and tracers are leaves; integers and value fields come later."""
    make = SPELLINGS[spelling]
    struct_type = kp.Springs[wp.float32]
    k32 = K.astype(np.float32)
    for arrays in ((jnp.asarray(ENDS), jnp.asarray(k32)), (ENDS, k32)):
        s = make(struct_type, *arrays, 2)  # an int value field: never the dtype while a float array is there
        assert warp_dtypes([jnp.zeros((2, 2), jnp.float32), s]) == (wp.float32, wp.float32)
        nested = {"outer": 1, "springs": s}
        assert warp_dtypes([nested]) == (wp.float32,)
    if spelling != "warp_struct":
        seen = []
        jax.jit(lambda k: seen.append(warp_dtypes([make(struct_type, jnp.asarray(ENDS), k, 2)])))(jnp.asarray(k32))
        jax.vmap(lambda k: seen.append(warp_dtypes([make(struct_type, jnp.asarray(ENDS), k, 2)])))(
            jnp.stack([jnp.asarray(k32)] * 2)
        )
        assert seen == [(wp.float32,)] * 2


def test_generic_dtype_fallbacks_and_leaves() -> None:
    ints = SpringsData(jnp.asarray(ENDS), None, 2)
    assert warp_dtypes([ints]) == (wp.int32,)  # no float array: the first array field
    assert warp_dtypes([SpringsAttrs(None, None, 0.5)]) == (wp.float32,)  # no array: the first value field
    assert warp_dtypes([{"v": wp.vec3h(1.0, 2.0, 3.0), "s": wp.float16(1.0)}]) == (wp.float16,)  # Warp values
    w = wp.array(np.ones(3, np.float32))
    assert warp_dtypes([{"w": w}, w]) == (wp.float32, wp.float32)  # a wp.array is a leaf, never walked
    assert warp_dtypes([jnp.ones(2, jnp.float32)]) == (wp.float32,)


def test_struct_like_fields_of_each_spelling() -> None:
    for spelling, make in SPELLINGS.items():
        fields = struct_like_fields(make(kp.Springs[wp.float32], ENDS, K.astype(np.float32), REST))
        assert fields is not None, spelling
        assert [name for name, _ in fields] == ["ends", "k", "rest"], spelling
    for leaf in (jnp.ones(2), np.ones(2), np.float32(1.0), wp.array(np.ones(2, np.float32)), 1.5, "s", None):
        assert struct_like_fields(leaf) is None


# ======================================================================================================================
# Errors: named, short, no array contents
# ======================================================================================================================

BIG = 100_000


@pytest.mark.parametrize("spelling", [s for s in SPELLINGS if s != "warp_struct"])
@pytest.mark.parametrize("kind_name", ["plain32", "generic32"])
def test_wrong_field_dtype_names_the_field_briefly(spelling: str, kind_name: str) -> None:
    kind = _kind(kind_name)
    # a big float64 NumPy array where a float32 one belongs (the generic kernel resolves to float32, as JAX would
    # hold it): the message names the field and stays short
    springs = SPELLINGS[spelling](kind.struct_type, ENDS, np.arange(BIG, dtype=np.float64) + 12345.0, REST)
    with pytest.raises(TypeError) as info:
        kind.module(X.astype(np.float32), springs)
    message = str(info.value)
    assert "'springs.k' has dtype float64" in message, message
    assert len(message) < 500, message
    assert "12346" not in message, message


@pytest.mark.parametrize("spelling", ["dataclass", "object", "eqx_module"])
def test_generic_without_arrays_or_numbers_is_a_short_error(spelling: str) -> None:
    kind = _kind("generic32")
    springs = SPELLINGS[spelling](kind.struct_type, "no", "arrays", "here")
    with pytest.raises(
        TypeError, match=r"argument 1 \('springs', \w+\) for the generic target: it holds no array or number"
    ) as info:
        kind.module(X.astype(np.float32), springs)
    assert len(str(info.value)) < 400


def test_generic_struct_with_a_huge_dataclass_does_not_print_it() -> None:
    """The message that embedded a dataclass's arrays (4,500 characters) is short and names the field."""
    kind = _kind("generic32")
    springs = SpringsData(ENDS, np.linspace(0.0, 1.0, BIG).astype(np.complex64), REST)
    with pytest.raises(TypeError) as info:
        kind.module(X.astype(np.float32), springs)
    message = str(info.value)
    assert "field 'springs.k': dtype complex64 has no Warp scalar type" in message, message
    assert len(message) < 500, message


def _no_rest() -> Any:
    springs = SpringsAttrs(ENDS, K.astype(np.float32), REST)
    del springs.rest
    return springs


LONG = "x" * 10_000
MALFORMED = {
    "missing_attribute": (_no_rest, r"missing field 'springs\.rest' \(no attribute 'rest' on the SpringsAttrs"),
    "wp_array_for_the_struct": (
        lambda: wp.array(K.astype(np.float32)),
        r"'springs' is a struct Springs32 and got a wp\.array of shape \(6,\) and dtype float32",
    ),
    "wp_array_of_another_dtype": (
        lambda: {"ends": wp.array(K.astype(np.float32)), "k": K.astype(np.float32), "rest": REST},
        r"'springs\.ends' expects a 1-d wp\.array of vec2i, got a 1-d wp\.array of float32",
    ),
    "many_long_unknown_keys": (
        lambda: {"ends": ENDS, "k": K.astype(np.float32), "rest": REST} | {f"{LONG}{i}": 1 for i in range(20)},
        r"unknown field\(s\) 'springs\.xxx.*\.\.\..* and 17 more",
    ),
    "long_string_for_a_value_field": (
        lambda: {"ends": ENDS, "k": K.astype(np.float32), "rest": LONG},
        r"'springs\.rest' expects a value float32 \(a number\), got str 'xxx.*\.\.\.",
    ),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_struct_values_name_the_field_briefly(case: str) -> None:
    make, match = MALFORMED[case]
    with pytest.raises(TypeError, match=match) as info:
        _kind("plain32").module(X.astype(np.float32), make())
    assert len(str(info.value)) < 400, str(info.value)


# ======================================================================================================================
# Eager calls read a mutable struct object's fields at every call
# ======================================================================================================================


@pytest.mark.parametrize("spelling", ["object", "warp_struct"])
def test_eager_calls_see_changed_fields(spelling: str) -> None:
    kind = _kind("plain32")
    x = jnp.asarray(X.astype(np.float32))
    k = K.astype(np.float32)
    springs = SPELLINGS[spelling](kind.struct_type, jnp.asarray(ENDS), jnp.asarray(k), REST)
    (first,) = kind.module(x, springs)
    np.testing.assert_allclose(first[0], _reference(X, k)[0], rtol=2e-5)
    springs.k = wp.array(2.0 * k) if spelling == "warp_struct" else jnp.asarray(2.0 * k)
    springs.rest = 0.5
    (second,) = kind.module(x, springs)
    diff = X[ENDS[:, 1]] - X[ENDS[:, 0]]
    expected = np.sum(2.0 * K * (np.linalg.norm(diff, axis=1) - 0.5) ** 2)
    np.testing.assert_allclose(second[0], expected, rtol=2e-5)
