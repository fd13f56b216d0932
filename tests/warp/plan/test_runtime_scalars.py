"""Kernel variants (`jarp/warp/_plan/_runtime_scalars.py`): a traced scalar's variant and the bounds-checked build.

A variant is a new kernel in a Warp module of its own; it must build as the kernel it derives from (that kernel's
module options, such as ``fast_math``, and its kernel options, such as ``enable_backward``), or a call with a traced
scalar would compute with other arithmetic than the same call with a static one.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jarp.warp import jax_kernel
from jarp.warp._plan import _runtime_scalars
from tests.support import kernels_options as ko


def test_a_runtime_scalar_variant_builds_as_its_kernel() -> None:
    derived = _runtime_scalars.variant(ko.scale, ("s",))
    assert derived.module is not ko.scale.module
    assert derived.module.options["fast_math"] is True
    assert derived.module.options["max_unroll"] == 3
    assert derived.options.get("enable_backward") is False


def test_the_bounds_checked_build_keeps_the_options_and_adds_debug_mode() -> None:
    derived = _runtime_scalars.bounds_checked(ko.scale)
    assert derived.module.options["mode"] == "debug"
    assert derived.module.options["fast_math"] is True
    assert derived.options.get("enable_backward") is False
    assert ko.scale.module.options.get("mode") != "debug"  # the original module is untouched


def test_a_traced_scalar_runs_the_variant_with_the_right_values() -> None:
    kernel = jax_kernel(ko.scale)
    x = jnp.arange(5.0, dtype=jnp.float32)
    out = jax.jit(lambda x, s: kernel(x, s)[0])(x, jnp.float32(1.5))
    np.testing.assert_allclose(out, np.arange(5.0) * 1.5, rtol=1e-6)
