"""What only a ``jarp.warp.JaxCallable`` has: annotated Python functions as targets, and its own options.

The target must be a callable whose parameters are all annotated; a callable has no ``launch_dims`` (the function
launches its kernels itself); the graph-mode, side-effect, staging and preload options are accepted on the CPU, and
``protect_inputs`` can be turned off for functions that do not write their inputs. The module contract both kinds
share is in ``test_base.py``; the units a call flows through have their own files (``plan/test_binding.py``,
``plan/test_dims.py``, ``transforms/test_batching.py``, ``transforms/test_autodiff.py``, ``test_generic.py``,
``transforms/test_compositions.py``).
"""

import functools
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp

from jarp.warp import jax_callable
from tests.support import kernels as k


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


# -- parametrised callables: a function built per model rebuilds equal ----------------------------------------------


class _Scaler(eqx.Module):
    """A callable object compared by value: its constant is a static field."""

    s: float = eqx.field(static=True)

    def __call__(self, a: wp.array(dtype=float), out: wp.array(dtype=float)):
        wp.launch(k.scale_kernel, dim=a.shape, inputs=[a, self.s], outputs=[out], device=a.device)


def _scaled(s: float, a: wp.array(dtype=float), out: wp.array(dtype=float)):
    wp.launch(k.scale_kernel, dim=a.shape, inputs=[a, s], outputs=[out], device=a.device)


class _Model(eqx.Module):
    layer: Any

    def __call__(self, x):
        return self.layer(x)[0]


@pytest.mark.parametrize(
    "build",
    [lambda s: jax_callable(_Scaler(s)), lambda s: jax_callable(functools.partial(_scaled, s))],
    ids=["eqx-module", "partial"],
)
def test_rebuilt_parametrised_callable_is_equal_and_does_not_retrace(build):
    assert build(2.0) == build(2.0)
    assert hash(build(2.0)) == hash(build(2.0))
    assert build(2.0) != build(3.0)

    @eqx.filter_jit
    @eqx.debug.assert_max_traces(max_traces=2)  # one per distinct constant
    def run(model, x):
        return model(x)

    x = jnp.arange(4.0, dtype=jnp.float32)
    for _ in range(3):
        np.testing.assert_allclose(run(_Model(build(2.0)), x), 2.0 * np.arange(4.0))
    np.testing.assert_allclose(run(_Model(build(3.0)), x), 3.0 * np.arange(4.0))


def test_a_structure_built_in_the_function_outlives_the_tape(monkeypatch: pytest.MonkeyPatch) -> None:
    # The backward pass runs the function again under a wp.Tape and plays the tape back after it returned: the mesh
    # it built (a local) must still be alive then, or the adjoint launch reads a freed mesh id
    from jax.test_util import check_grads

    from tests.support import kernels_geometry as kg

    points = jnp.asarray([[0, 0, 0], [1, 0, 0], [0, 1, 0]], jnp.float32)
    indices = jnp.asarray([0, 1, 2], jnp.int32)
    m = jax_callable(kg.mesh_distance, enable_backward=True, output_dims={"d": 2})
    backward = wp.Tape.backward
    dead_at_backward = []

    def checked_backward(tape: wp.Tape, *args: Any, **kwargs: Any) -> None:
        # the mesh of the forward run just replayed under this tape is the last one built; stop before the
        # playback reads a freed mesh (which would crash the process rather than fail the test)
        dead_at_backward.extend(r for r in kg.LIVE_MESHES[-1:] if r() is None)
        if dead_at_backward:
            raise RuntimeError("a mesh the taped function built was freed before the tape was played back")
        backward(tape, *args, **kwargs)

    monkeypatch.setattr(wp.Tape, "backward", checked_backward)

    def total(p: jax.Array) -> jax.Array:
        return jnp.sum(m(points, indices, p)[0])

    p = jnp.asarray([[0.2, 0.2, 0.5], [0.1, 0.3, -0.25]], jnp.float32)
    np.testing.assert_allclose(total(p), 0.75, rtol=1e-6)
    np.testing.assert_allclose(jax.grad(total)(p), [[0, 0, 1], [0, 0, -1]], atol=1e-5)
    check_grads(total, (p,), order=1, modes=["rev"], atol=1e-2, rtol=1e-2, eps=1e-2)
    assert kg.LIVE_MESHES, "the function ran"
    assert dead_at_backward == [], "a mesh the taped function built was freed before the tape was played back"
