"""What only a ``jarp.warp.JaxKernel`` has: its target must be a Warp kernel.

The module contract both kinds share is in ``test_base.py``; the units a ``JaxKernel`` call flows through have
their own files (``plan/test_binding.py``, ``plan/test_dims.py``, ``transforms/test_batching.py``,
``transforms/test_autodiff.py``, ``test_generic.py``, ``transforms/test_compositions.py``); the analysis of which inputs
a kernel writes is in ``plan/test_analysis.py`` and ``hostile/test_writes.py``.
"""

import pytest
import warp as wp

from jarp.warp import jax_kernel
from tests.support import kernels as k


@pytest.mark.parametrize(
    "obj", [lambda x: x, k.example_func, 42, "triple_kernel"], ids=["lambda", "func", "int", "str"]
)
def test_non_kernel_is_type_error(obj):
    with pytest.raises(TypeError, match="kernel"):
        jax_kernel(obj)
    with pytest.raises(TypeError, match="kernel"):
        jax_kernel(num_outputs=1)(obj)


@wp.struct
class _Field:
    a: wp.array(dtype=float)
    k: float


@wp.kernel
def _writes_struct_field(s: _Field, out: wp.array(dtype=float)):
    i = wp.tid()
    s.a[i] = s.k
    out[i] = s.k


def test_kernel_writing_a_struct_field_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"struct field\(s\) \['s\.a'\]"):
        jax_kernel(_writes_struct_field)


@wp.kernel(entry_point_abi="external_constant_params", enable_backward=False, module="unique")
def _constant_params_kernel(a: wp.array(dtype=float)):
    a[0] = 1.0


def test_a_kernel_with_another_entry_point_abi_is_refused_at_construction() -> None:
    # Its CUDA entry point reads the parameters from constant memory: launching it as a Warp-ABI kernel would pass
    # them where it never looks (wp.launch refuses it too).
    with pytest.raises(ValueError, match=r"'_constant_params_kernel' uses Warp's entry_point_abi='external_constant"):
        jax_kernel(_constant_params_kernel)
