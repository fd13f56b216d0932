"""Tests of `jarp.warp._struct.struct`: plain and dtype-generic Warp structs."""

from __future__ import annotations

import threading
import time
from typing import Any, ClassVar

import jax
import numpy as np
import pytest
import warp as wp
from hypothesis import given, settings
from hypothesis import strategies as st

from jarp.warp._struct import struct
from tests.support.kernels_generic_struct import Params, Plain, affine32, affine64


def _launch32(p: Any, count: int) -> np.ndarray:
    q = Plain()
    q.count = count
    out = wp.zeros(4, dtype=wp.float32, device="cpu")
    wp.launch(affine32, dim=4, inputs=[p, q], outputs=[out], device="cpu")
    return out.numpy()


def _launch64(p: Any) -> np.ndarray:
    out = wp.zeros(4, dtype=wp.float64, device="cpu")
    wp.launch(affine64, dim=4, inputs=[p], outputs=[out], device="cpu")
    return out.numpy()


def _counting_generic(delay: float = 0.0) -> tuple[Any, list[Any]]:
    """Return a fresh generic struct and the list of dtypes its factory was called with."""
    calls: list[Any] = []

    @struct
    class Counted:
        @staticmethod
        def __annotations_factory__(dtype: Any) -> dict[str, Any]:
            calls.append(dtype)
            time.sleep(delay)  # widens the window in which a racing thread could build it again
            return {"value": dtype}

    return Counted, calls


# --- float32 (jax_enable_x64 off) -------------------------------------------------------------------------------


def test_plain_class_becomes_a_warp_struct() -> None:
    q = Plain()
    assert q.count == 0
    q.count = 7
    assert q.count == 7
    assert not isinstance(Plain, type)  # a Warp struct, not a class


def test_generic_struct_in_a_kernel_float32() -> None:
    p = Params(scale=2.0, offset=wp.vec3f(0.0, 10.0, 0.0))
    np.testing.assert_array_equal(_launch32(p, count=5), [15.0, 17.0, 19.0, 21.0])


def test_specialised_float64_struct_in_a_kernel() -> None:
    p = Params[wp.float64]()
    p.scale = 0.5
    p.offset = wp.vec3d(0.0, 0.0, 1.0)
    np.testing.assert_array_equal(_launch64(p), [1.0, 1.5, 2.0, 2.5])


def test_default_instance_follows_floating() -> None:
    assert type(Params()) is type(Params[wp.float32]())
    with jax.enable_x64(True):  # only reads the flag
        assert type(Params()) is type(Params[wp.float64]())


@settings(deadline=None)  # the first example compiles the kernels (a cold Warp cache takes seconds)
@given(value=st.floats(-1e6, 1e6))
def test_kernels_see_fields_in_the_precision_of_the_dtype(value: float) -> None:
    p32 = Params(scale=value)
    expected32 = np.float32(value) * np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(_launch32(p32, count=0), expected32)
    p64 = Params[wp.float64]()
    p64.scale = value
    np.testing.assert_array_equal(_launch64(p64), value * np.arange(4, dtype=np.float64))


def test_specialisations_are_cached_per_dtype() -> None:
    generic, calls = _counting_generic()
    assert generic[wp.float32] is generic[wp.float32]
    assert generic[wp.float64] is not generic[wp.float32]
    assert generic[wp.int32] is generic[wp.int32]
    assert calls == [wp.float32, wp.float64, wp.int32]
    generic(value=1.0)
    assert calls == [wp.float32, wp.float64, wp.int32]  # Cls() reuses Cls[floating]


def test_concurrent_specialisation_builds_once() -> None:
    generic, calls = _counting_generic(delay=0.05)
    barrier = threading.Barrier(8)
    results: list[Any] = []

    def work() -> None:
        barrier.wait()
        results.append(generic[wp.int16])

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 8
    assert all(r is results[0] for r in results)
    assert calls == [wp.int16]


def test_classmethod_factory_receives_the_class() -> None:
    @struct
    class WithClassmethod:
        width = 4

        @classmethod
        def __annotations_factory__(cls, dtype: Any) -> dict[str, Any]:
            return {"v": wp.types.vector(cls.width, dtype)}

    inst = WithClassmethod[wp.float64]()
    inst.v = wp.types.vector(4, wp.float64)(1.0, 2.0, 3.0, 4.0)
    assert list(inst.v) == [1.0, 2.0, 3.0, 4.0]


def test_instances_are_instances_of_the_generic_class_and_keep_its_methods() -> None:
    p = Params(scale=3.0)
    assert isinstance(p, Params)
    assert isinstance(Params[wp.float64](), Params)
    assert not isinstance(Plain(), Params)
    assert not isinstance(3.0, Params)
    assert p.phrase() == "scale=3.0"
    assert Params.__doc__ == "A generic struct: a scale and an offset vector of one scalar type."
    assert Params.__qualname__ == "Params"


def test_unknown_fields_raise_type_error() -> None:
    with pytest.raises(TypeError, match=r"unknown field\(s\) 'sclae'; the fields of Params\[float32\] are 'scale', "):
        Params(sclae=1.0)


def test_positional_arguments_raise_type_error() -> None:
    with pytest.raises(TypeError, match="takes fields by keyword only, got 1 positional"):
        Params(1.0)


@pytest.mark.parametrize("dtype", [float, "float32", np.float32, wp.vec3f, None], ids=str)
def test_subscript_rejects_non_scalar_dtypes(dtype: Any) -> None:
    with pytest.raises(TypeError, match=r"Params\[\.\.\.\] takes a Warp scalar dtype"):
        Params[dtype]


@pytest.mark.parametrize("result", [None, [("a", wp.float32)], {1: wp.float32}], ids=str)
def test_factory_must_return_a_dict_of_annotations(result: Any) -> None:
    @struct
    class Bad:
        @staticmethod
        def __annotations_factory__(dtype: Any) -> Any:
            del dtype
            return result

    with pytest.raises(TypeError, match=r"Bad.__annotations_factory__\(float32\) must return a dict"):
        Bad[wp.float32]


def test_warp_errors_name_the_specialisation() -> None:
    @struct
    class Unsupported:
        @staticmethod
        def __annotations_factory__(dtype: Any) -> dict[str, Any]:
            del dtype
            return {"bad": object}

    with pytest.raises(Exception) as info:  # noqa: PT011 - whatever Warp raises
        Unsupported[wp.float32]
    assert any("Unsupported[float32]" in note for note in getattr(info.value, "__notes__", []))


def test_struct_rejects_non_classes() -> None:
    with pytest.raises(TypeError, match="struct\\(\\) takes a class, got 3 of type int"):
        struct(3)  # type: ignore[type-var]


def test_non_callable_factory_raises_type_error() -> None:
    class NotCallable:
        __annotations_factory__: ClassVar[dict[str, Any]] = {"a": wp.float32}

    with pytest.raises(TypeError, match="__annotations_factory__ must be a staticmethod or classmethod"):
        struct(NotCallable)


def test_template_with_a_custom_metaclass() -> None:
    class Meta(type):
        pass

    class Template(metaclass=Meta):
        @staticmethod
        def __annotations_factory__(dtype: Any) -> dict[str, Any]:
            return {"x": dtype}

    generic = struct(Template)
    assert isinstance(generic, Meta)
    assert isinstance(generic(x=1.5), generic)


# --- float64 (JAX_ENABLE_X64=1 process) -------------------------------------------------------------------------


@pytest.mark.x64
def test_default_instance_is_float64_with_x64() -> None:
    p = Params(scale=1.0 / 3.0, offset=wp.vec3d(0.0, 0.0, 2.0))
    assert type(p) is type(Params[wp.float64]())
    assert p.scale == 1.0 / 3.0
    np.testing.assert_allclose(_launch64(p), 2.0 + np.arange(4) / 3.0, rtol=0, atol=1e-15)


@pytest.mark.x64
def test_float32_specialisation_still_works_with_x64() -> None:
    p = Params[wp.float32]()
    p.scale = 1.0
    np.testing.assert_array_equal(_launch32(p, count=1), [1.0, 2.0, 3.0, 4.0])
