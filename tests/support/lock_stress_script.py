"""Run jarp's commonest paths on several threads at once with every lock checking its place in the lock order.

Run in a process of its own with ``JARP_LOCK_ORDER=check`` (`tests/warp/test_locks.py`): a lock taken out of the
order raises `LockOrderError` in the thread that took it; a deadlock leaves a thread alive past the deadline. Prints
``LOCKS OK`` and the locks seen held inside a callable's function when every thread finished cleanly.
"""

from __future__ import annotations

import sys
import threading
import traceback

import jax
import jax.numpy as jnp
import warp as wp

import jarp.warp
from jarp.warp._upstream import _locks


@wp.kernel
def scale(x: wp.array(dtype=float), s: float, y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = s * x[i]


@wp.kernel
def closest(mesh: wp.uint64, p: wp.array(dtype=wp.vec3), d: wp.array(dtype=float)):
    i = wp.tid()
    q = wp.mesh_query_point_no_sign(mesh, p[i], 10.0)
    if q.result:
        d[i] = wp.length(p[i] - wp.mesh_eval_position(mesh, q.face, q.u, q.v))


seen_in_callable: list[list[str]] = []


def inner(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    seen_in_callable.append(_locks.held())
    wp.launch(scale, dim=x.shape, inputs=[x, 2.0], outputs=[y])


def kernels(k: int) -> None:
    module = jarp.warp.jax_kernel(scale, enable_backward=True)
    x = jnp.arange(8.0 + k % 3)
    jax.block_until_ready(jax.jit(lambda a: module(a, 3.0)[0])(x))
    jax.block_until_ready(module(x, float(k))[0])  # eager
    jax.block_until_ready(jax.grad(lambda a: module(a, 2.0)[0].sum())(x))
    jax.block_until_ready(jax.vmap(lambda a: module(a, 2.0)[0])(jnp.ones((3, 5))))


def callables(k: int) -> None:
    module = jarp.warp.jax_callable(inner, enable_backward=True)
    x = jnp.arange(6.0 + k % 2)
    jax.block_until_ready(jax.jit(lambda a: module(a)[0])(x))
    jax.block_until_ready(jax.grad(lambda a: module(a)[0].sum())(x))


def geometry(k: int) -> None:
    points = jnp.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]) * (1.0 + 0.1 * k)
    mesh = jarp.warp.Mesh(points=points, indices=jnp.array([[0, 1, 2]], jnp.int32))
    module = jarp.warp.jax_kernel(closest, enable_backward=True)
    p = jnp.array([[0.2, 0.2, 1.0], [0.5, 0.1, -1.0]])
    jax.block_until_ready(jax.jit(lambda m: module(m, p)[0])(mesh))
    jax.block_until_ready(
        jax.grad(lambda pts: module(jarp.warp.Mesh(points=pts, indices=mesh.indices), p)[0].sum())(points)
    )


def housekeeping(k: int) -> None:
    jarp.warp.list_plans()
    jarp.warp.runtime_info()
    if k % 3 == 0:
        jarp.warp.clear_caches()
    jarp.warp.set_checking_mode(k % 2 == 0)
    jarp.warp.set_cpu_threads(1 + k % 2)
    if k % 4 == 1:
        jarp.warp.patch_warp()
        jarp.warp.unpatch_warp()


def main() -> int:
    assert _locks.CHECKING, "run with JARP_LOCK_ORDER=check"
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    failures: list[str] = []

    def worker(job, k0: int) -> None:
        try:
            for k in range(rounds):
                job(k0 + k)
        except BaseException:  # reported by the main thread
            failures.append(f"{job.__name__}: {traceback.format_exc()}")

    jobs = [kernels, callables, geometry, housekeeping, kernels, callables]
    threads = [threading.Thread(target=worker, args=(job, 10 * n), daemon=True) for n, job in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    alive = [t.name for t in threads if t.is_alive()]
    if alive or failures:
        print("LOCKS FAILED", alive, *failures, sep="\n")
        return 1
    print("LOCKS OK", sorted({name for names in seen_in_callable for name in names}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
