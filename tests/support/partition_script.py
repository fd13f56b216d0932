"""Batched jarp calls under ``jax.jit`` with the batch sharded over four CPU devices.

Run as a module from the repository root with ``XLA_FLAGS=--xla_force_host_platform_device_count=4``
(``tests/warp/transforms/test_partitioning.py`` does), naming the partitioner, ``gspmd`` or ``shardy``:

    python -m tests.support.partition_script shardy

For auto and explicit meshes it checks that XLA partitions each call along its batch dims (the compiled program
has no all-gather, the output keeps the batch sharding) and that the values equal the unsharded run's, for one
and two batch dims, inputs broadcast across the batch (whole or over some batch dims), a callable, reverse mode
(also with an operand sharded off its batch dims), and that an unbatched call lowers as before. Prints one line per check and ``partition ok`` at the end.
"""

import contextlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

jax.config.update("jax_use_shardy_partitioner", sys.argv[1] == "shardy")

from jarp.warp import jax_callable, jax_kernel  # noqa: E402
from jarp.warp._ffi import _executors, _native  # noqa: E402
from tests.support import kernels as k  # noqa: E402

assert jax.device_count() == 4
add = jax_kernel(k.add_kernel)
add_c = jax_callable(k.add_func, num_outputs=1)
g = jax_kernel(k.scale_sum_square, enable_backward=True)
rng = np.random.default_rng(0)
A = rng.standard_normal((8, 16)).astype(np.float32)
A3 = rng.standard_normal((4, 3, 16)).astype(np.float32)
C = rng.standard_normal((4, 16)).astype(np.float32)
W = rng.standard_normal(16).astype(np.float32)


def one(a):  # one batch dim; W broadcast across the batch
    return jax.vmap(lambda r: add(r, W)[0])(a)


def callable_one(a):
    return jax.vmap(lambda r: add_c(r, W)[0])(a)


def two(a3, c):  # two batch dims: a3 batched over both, c over the outer one only, W over neither
    return jax.vmap(lambda m, r: jax.vmap(lambda x: add(x, r)[0] + add(x, W)[0])(m))(a3, c)


def grad(a):  # reverse mode (the adjoint's cotangent buffers are in-out)
    return jax.grad(lambda a: jnp.sum(jax.vmap(lambda r: g(r, W, 2.0)[0])(a) ** 1.5))(a)


def unbatched(a):
    return add(a.reshape(-1), jnp.tile(W, 8))[0]


# Count the partitioned calls that reach Python: on the native path, a kernel's call is served natively from its
# second run on (its descriptor is published at the first), in-out copies (an adjoint's cotangents) included.
python_runs = [0]
_run = _executors._PartitionedExecutor.run


def _counting_run(self, frame):
    python_runs[0] += 1
    return _run(self, frame)


_executors._PartitionedExecutor.run = _counting_run


def check(name, f, args, batched=True):
    expected = jax.jit(f)(*args)  # one device, nothing sharded
    sharded = [jax.device_put(x, NamedSharding(mesh, P("b"))) for x in args]
    text = jax.jit(f).lower(*sharded).compile().as_text()
    lowered = jax.jit(f).lower(*sharded).as_text()
    out = jax.jit(f)(*sharded)
    np.testing.assert_allclose(np.asarray(out), np.asarray(expected), rtol=1e-6, atol=1e-6, err_msg=name)
    before = python_runs[0]
    again = jax.jit(f)(*sharded)
    np.testing.assert_array_equal(np.asarray(again), np.asarray(out), err_msg=name)
    if batched and _native.active() is not None and name != "callable":
        assert python_runs[0] == before, f"{name}: {python_runs[0] - before} partitioned calls reached Python"
    if batched:
        assert "all-gather" not in text, f"{name}: the compiled program gathers\n{text}"
        assert "num_batch_dims" in lowered, name
        spec = tuple(out.sharding.spec) + (None,) * (out.ndim - len(out.sharding.spec))
        assert spec[0] == "b", f"{name}: output sharded {out.sharding}"
        assert all(s is None for s in spec[1:]), f"{name}: output sharded {out.sharding}"
        assert out.addressable_shards[0].data.shape[0] == out.shape[0] // 4, name
    else:
        assert "num_batch_dims" not in lowered, name
        assert "partitioned" not in lowered, name
    print(f"{sys.argv[1]} {kind}: {name} ok", flush=True)


for axis_type in (AxisType.Auto, AxisType.Explicit):
    kind = axis_type.name.lower()
    mesh = jax.make_mesh((4,), ("b",), axis_types=(axis_type,))
    with jax.set_mesh(mesh) if axis_type is AxisType.Explicit else contextlib.nullcontext():
        check("one batch dim, broadcast input", one, (A,))
        check("callable", callable_one, (A,))
        check("two batch dims, broadcast inputs", two, (A3, C))
        check("grad", grad, (A,))
        check("unbatched", unbatched, (A,), batched=False)
# An explicit mesh that also shards a batched operand off its batch dims: the call is partitioned along the batch
# only, and reverse mode gives the cotangent its primal's sharding (JAX checks the backward rule's types).
mesh2 = jax.make_mesh((2, 2), ("b", "x"), axis_types=(AxisType.Explicit,) * 2)
with jax.set_mesh(mesh2):
    out = jax.jit(grad)(jax.device_put(A, NamedSharding(mesh2, P("b", "x"))))
np.testing.assert_allclose(np.asarray(out), np.asarray(jax.jit(grad)(A)), rtol=1e-6, atol=1e-6)
assert tuple(out.sharding.spec) == ("b", "x"), out.sharding
print(f"{sys.argv[1]} explicit: grad, an operand also sharded off the batch ok", flush=True)
print("partition ok", flush=True)
