"""Tests of `jarp.warp.types`: dtypes that follow JAX's precision."""

from __future__ import annotations

import itertools
import warnings
from typing import Any

import jax
import pytest
import warp as wp
from hypothesis import given
from hypothesis import strategies as st

from jarp.warp import types

SIZES = range(1, 10)
VECTOR_NAMES = [f"vec{n}" for n in SIZES]
MATRIX_NAMES = [f"mat{r}{c}" for r, c in itertools.product(SIZES, SIZES)]
BUILTINS_F32 = {"vec2": wp.vec2f, "vec3": wp.vec3f, "vec4": wp.vec4f, "mat22": wp.mat22f, "mat33": wp.mat33f}
BUILTINS_F64 = {"vec2": wp.vec2d, "vec3": wp.vec3d, "vec4": wp.vec4d, "mat22": wp.mat22d, "mat44": wp.mat44d}


def _assert_vector(dtype: Any, length: int, scalar: Any) -> None:
    assert wp.types.type_is_vector(dtype)
    assert wp.types.types_equal(dtype, wp.types.vector(length, scalar))


def _assert_matrix(dtype: Any, rows: int, cols: int, scalar: Any) -> None:
    assert wp.types.type_is_matrix(dtype)
    assert wp.types.types_equal(dtype, wp.types.matrix((rows, cols), scalar))


# --- float32 (jax_enable_x64 off) -------------------------------------------------------------------------------


def test_floating_is_float32() -> None:
    assert types.floating is wp.float32


@pytest.mark.parametrize("length", SIZES)
def test_vec_names_are_float32_vectors(length: int) -> None:
    _assert_vector(getattr(types, f"vec{length}"), length, wp.float32)


@pytest.mark.parametrize(("rows", "cols"), list(itertools.product(SIZES, SIZES)))
def test_mat_names_are_float32_matrices(rows: int, cols: int) -> None:
    _assert_matrix(getattr(types, f"mat{rows}{cols}"), rows, cols, wp.float32)


@pytest.mark.parametrize(("name", "builtin"), BUILTINS_F32.items())
def test_names_are_warp_builtins_where_warp_has_them(name: str, builtin: Any) -> None:
    assert getattr(types, name) is builtin


@pytest.mark.parametrize("name", ["vec1", "vec5", "mat11", "mat19", "mat91", "mat23", "mat99"])
def test_names_give_the_same_object_on_every_read(name: str) -> None:
    assert getattr(types, name) is getattr(types, name)


@given(length=st.integers(1, 32))
def test_vector_builds_float32_vectors(length: int) -> None:
    dtype = types.vector(length)
    _assert_vector(dtype, length, wp.float32)
    assert types.vector(length) is dtype
    if length <= 9:
        assert getattr(types, f"vec{length}") is dtype


@given(rows=st.integers(1, 12), cols=st.integers(1, 12))
def test_matrix_builds_float32_matrices(rows: int, cols: int) -> None:
    dtype = types.matrix((rows, cols))
    _assert_matrix(dtype, rows, cols, wp.float32)
    assert types.matrix([rows, cols]) is dtype
    if rows <= 9 and cols <= 9:
        assert getattr(types, f"mat{rows}{cols}") is dtype


def test_names_follow_precision_changes_at_read_time() -> None:
    # Only reads the flag: nothing is traced while it is on.
    with jax.enable_x64(True):
        assert types.floating is wp.float64
        assert types.vec3 is wp.vec3d
        assert types.vector(3) is wp.vec3d
        _assert_matrix(types.mat23, 2, 3, wp.float64)
    assert types.floating is wp.float32
    assert types.vec3 is wp.vec3f


@pytest.mark.parametrize("alias", ["float", "float_"])
def test_deprecated_aliases_warn_and_give_floating(alias: str) -> None:
    with pytest.warns(DeprecationWarning, match=r"jarp\.warp\.types\.floating") as record:
        value = getattr(types, alias)
    assert value is wp.float32
    assert record[0].filename == __file__  # points at the caller, not at jarp


def test_current_names_do_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _ = types.floating, types.vec3, types.mat33


@pytest.mark.parametrize(
    "name", ["vec10", "vec0", "vec01", "mat1", "mat10", "mat01", "mat222", "mat0", "vec", "double", "f32"]
)
def test_unknown_names_raise_attribute_error(name: str) -> None:
    with pytest.raises(AttributeError, match=rf"'jarp\.warp\.types' has no attribute '{name}'") as info:
        getattr(types, name)
    assert info.value.name == name
    assert not hasattr(types, name)


def test_size_one_names_match_liblaf_jarp() -> None:
    # liblaf-jarp served vec1..vec9 and mat11..mat99, including the 1 x n and n x 1 shapes.
    _assert_vector(types.vec1, 1, wp.float32)
    _assert_matrix(types.mat11, 1, 1, wp.float32)
    _assert_matrix(types.mat13, 1, 3, wp.float32)
    _assert_matrix(types.mat31, 3, 1, wp.float32)
    assert types.vec1 is types.vector(1)
    assert types.mat19 is types.matrix((1, 9))
    assert not wp.types.types_equal(types.mat13, types.mat31)


def test_from_import_resolves_names() -> None:
    from jarp.warp.types import floating, mat34, vec3

    assert floating is wp.float32
    assert vec3 is wp.vec3f
    _assert_matrix(mat34, 3, 4, wp.float32)


def test_dir_lists_every_dtype_name_and_only_readable_names() -> None:
    names = dir(types)
    assert names == sorted(names)
    assert {"floating", "vector", "matrix", *VECTOR_NAMES, *MATRIX_NAMES} <= set(names)
    assert "float" not in names
    assert "float_" not in names
    for name in names:
        getattr(types, name)


@pytest.mark.parametrize(
    ("length", "error"),
    [(0, ValueError), (-3, ValueError), (2.0, TypeError), (True, TypeError), ("3", TypeError), (None, TypeError)],
)
def test_vector_rejects_bad_lengths(length: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="length must be a positive int"):
        types.vector(length)


@pytest.mark.parametrize(
    ("shape", "error", "match"),
    [
        ((3,), TypeError, "shape must be a"),
        ((1, 2, 3), TypeError, "shape must be a"),
        (3, TypeError, "shape must be a"),
        ("33", TypeError, "shape must be a"),
        ((0, 3), ValueError, r"shape\[0\] \(rows\)"),
        ((3, -1), ValueError, r"shape\[1\] \(cols\)"),
        ((3, 1.5), TypeError, r"shape\[1\] \(cols\)"),
    ],
)
def test_matrix_rejects_bad_shapes(shape: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        types.matrix(shape)


# --- float64 (JAX_ENABLE_X64=1 process) -------------------------------------------------------------------------


@pytest.mark.x64
def test_floating_is_float64_with_x64() -> None:
    assert types.floating is wp.float64


@pytest.mark.x64
@pytest.mark.parametrize("name", VECTOR_NAMES + MATRIX_NAMES)
def test_names_are_float64_with_x64(name: str) -> None:
    dtype = getattr(types, name)
    if name.startswith("vec"):
        _assert_vector(dtype, int(name[3]), wp.float64)
    else:
        _assert_matrix(dtype, int(name[3]), int(name[4]), wp.float64)


@pytest.mark.x64
def test_size_one_names_are_float64_with_x64() -> None:
    _assert_vector(types.vec1, 1, wp.float64)
    _assert_matrix(types.mat91, 9, 1, wp.float64)
    with jax.enable_x64(False):
        _assert_vector(types.vec1, 1, wp.float32)


@pytest.mark.x64
@pytest.mark.parametrize(("name", "builtin"), BUILTINS_F64.items())
def test_names_are_warp_builtins_with_x64(name: str, builtin: Any) -> None:
    assert getattr(types, name) is builtin


@pytest.mark.x64
@given(length=st.integers(1, 32), rows=st.integers(1, 12), cols=st.integers(1, 12))
def test_vector_and_matrix_build_float64_with_x64(length: int, rows: int, cols: int) -> None:
    _assert_vector(types.vector(length), length, wp.float64)
    _assert_matrix(types.matrix((rows, cols)), rows, cols, wp.float64)


@pytest.mark.x64
@pytest.mark.parametrize("alias", ["float", "float_"])
def test_deprecated_aliases_give_float64_with_x64(alias: str) -> None:
    with pytest.warns(DeprecationWarning, match="deprecated"):
        assert getattr(types, alias) is wp.float64
