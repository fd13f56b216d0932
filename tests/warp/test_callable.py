"""What only a ``jarp.warp.JaxCallable`` has: annotated Python functions as targets, and its own options.

The target must be a callable whose parameters are all annotated; a callable has no ``launch_dims`` (the function
launches its kernels itself); the graph-mode, side-effect, staging and preload options are accepted on the CPU, and
``protect_inputs`` can be turned off for functions that do not write their inputs. The module contract both kinds
share is in ``test_module.py``; the units a call flows through have their own files (``test_binding.py``,
``test_dims.py``, ``test_batching.py``, ``test_autodiff.py``, ``test_generic.py``, ``test_transforms.py``).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp

from jarp.warp import jax_callable
from tests.warp import kernels as k


@pytest.mark.parametrize("obj", [42, "scale_func"], ids=["int", "str"])
def test_non_callable_is_type_error(obj):
    with pytest.raises(TypeError, match="func"):
        jax_callable(obj)
    with pytest.raises(TypeError, match="func"):
        jax_callable(num_outputs=1)(obj)


def test_unannotated_function_names_the_parameter():
    def unannotated(alpha_in, beta_out: wp.array(dtype=float)):
        pass

    with pytest.raises(TypeError, match="alpha_in"):
        jax_callable(unannotated)


def test_no_launch_dims_call_option():
    with pytest.raises(TypeError, match="launch_dims"):
        jax_callable(k.scale_func)(jnp.ones(3, dtype=jnp.float32), 2.0, launch_dims=3)


@pytest.mark.parametrize(
    "options",
    [
        {"graph_mode": wp.JaxCallableGraphMode.NONE},
        {"graph_mode": wp.JaxCallableGraphMode.WARP},
        {"has_side_effect": True},
        {"stage_in_argnames": ["a"], "stage_out_argnames": ["out"], "graph_cache_max": 2},
        {"module_preload_mode": wp.JaxModulePreloadMode.NONE},
        {"protect_inputs": False},
    ],
    ids=["graph-none", "graph-warp", "side-effect", "staging", "preload-none", "unprotected-inputs"],
)
def test_options_accepted_on_cpu(options):
    m = jax_callable(k.scale_func, **options)
    x = np.arange(5, dtype=np.float32)
    (y,) = jax.jit(lambda x: m(x, -3.0))(jnp.asarray(x))
    np.testing.assert_array_equal(y, -3.0 * x)
    (y,) = m(jnp.asarray(x), 0.5)
    np.testing.assert_array_equal(y, 0.5 * x)
    (y,) = jax.vmap(lambda x: m(x, 2.0))(jnp.asarray(np.stack([x, -x])))
    np.testing.assert_array_equal(y, np.stack([2.0 * x, -2.0 * x]))


def test_protect_inputs_is_part_of_the_module_value():
    assert jax_callable(k.scale_func) == jax_callable(k.scale_func, protect_inputs=True)
    assert jax_callable(k.scale_func) != jax_callable(k.scale_func, protect_inputs=False)
