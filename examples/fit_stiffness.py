"""Recover the stiffness of a hanging 2D mass-spring net from its observed equilibrium shape.

The flagship jarp example. A triangulated grid of springs hangs from its top row under gravity, with a weighted bar
along its bottom edge. Its elastic energy, gradient, Hessian-vector product and Hessian diagonal are four hand-written
Warp kernels (float64, ``wp.vec2d`` positions), wrapped as jarp modules and combined by `jarp.warp.energy` into one
differentiable `jarp.warp.Energy`. That energy lives inside `SpringNet`, an ordinary `eqx.Module` whose learnable
parameter is the logarithm of the stiffness of each region of the net.

The "observed" shape is the equilibrium under the true stiffness. Training minimises the misfit
``|x*(k) - x_obs|^2`` where ``x*(k)`` is the equilibrium for stiffness ``k``:

* the inner solve is Newton's method inside `jax.lax.while_loop`, each step a Jacobi-preconditioned
  `jax.scipy.sparse.linalg.cg` solve whose matvec is the Warp Hessian-vector-product kernel, followed by a
  backtracking line search on the energy;
* the outer gradient comes from implicit differentiation (`equinox.filter_custom_vjp` around the solver): at the
  equilibrium the residual ``r(x*, k) = 0``, so ``dL/dk = -(dr/dk)^T lam`` with ``H lam = dL/dx``. The adjoint
  ``lam`` is another CG solve with the Hessian kernel, and ``(dr/dk)^T lam`` is the reverse-mode derivative of the
  gradient kernel with respect to its stiffness input (Warp's adjoint of the gradient kernel);
* the optimiser is a small Adam written in JAX, and the whole outer step runs under `eqx.filter_jit`.

The trained model is saved with `eqx.tree_serialise_leaves` and reloaded, and a PNG shows the loss curve, the rest,
observed and recovered shapes, and the true and recovered stiffness of every region.

Run (needs the ``examples`` extra for the progress bar and the PNG: ``pip install -e .[examples]``):

    python examples/fit_stiffness.py                     # 20 x 20 nodes, 4 x 4 regions, 500 steps
    python examples/fit_stiffness.py --grid 6 --regions 2 --steps 40 --out /tmp/fit
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import warp as wp
from jaxtyping import Array, Float, Int

import jarp.warp

jax.config.update("jax_enable_x64", True)  # the physics runs in float64: set before any array is created
wp.config.quiet = True

LOAD = 3.0  # total weight of the net, and of the bar along its bottom edge (in units of the stiffness)

# ----------------------------------------------------------------------------------------------------------------------
# Warp kernels: a 2D spring energy 0.5 * k * (|x_i - x_j| - L)^2 summed over the springs, and its derivatives
# ----------------------------------------------------------------------------------------------------------------------


@wp.kernel
def spring_energy_kernel(
    x: wp.array(dtype=wp.vec2d),
    edges: wp.array(dtype=wp.vec2i),
    k: wp.array(dtype=wp.float64),
    rest: wp.array(dtype=wp.float64),
    energy: wp.array(dtype=wp.float64),
):
    """Accumulate the energy of spring ``e`` into ``energy[0]`` (a pure output, so it starts at zero)."""
    e = wp.tid()
    d = x[edges[e][0]] - x[edges[e][1]]
    s = wp.length(d) - rest[e]
    wp.atomic_add(energy, 0, wp.float64(0.5) * k[e] * s * s)


@wp.kernel
def spring_grad_kernel(
    x: wp.array(dtype=wp.vec2d),
    edges: wp.array(dtype=wp.vec2i),
    k: wp.array(dtype=wp.float64),
    rest: wp.array(dtype=wp.float64),
    grad: wp.array(dtype=wp.vec2d),
):
    """Scatter the gradient of spring ``e``'s energy onto its two end nodes."""
    e = wp.tid()
    i = edges[e][0]
    j = edges[e][1]
    d = x[i] - x[j]
    length = wp.length(d)
    f = k[e] * (length - rest[e]) / length * d
    wp.atomic_add(grad, i, f)
    wp.atomic_sub(grad, j, f)


@wp.func
def spring_block(d: wp.vec2d, k: wp.float64, rest: wp.float64):
    """The 2 x 2 Hessian block of one spring: k ((1 - L/l) I + (L/l) n n^T), with n = d / l."""
    length = wp.length(d)
    n = d / length
    one = wp.float64(1.0)
    return k * ((one - rest / length) * wp.identity(n=2, dtype=wp.float64) + (rest / length) * wp.outer(n, n))


@wp.kernel
def spring_hess_prod_kernel(
    x: wp.array(dtype=wp.vec2d),
    edges: wp.array(dtype=wp.vec2i),
    k: wp.array(dtype=wp.float64),
    rest: wp.array(dtype=wp.float64),
    v: wp.array(dtype=wp.vec2d),
    hv: wp.array(dtype=wp.vec2d),
):
    """Scatter spring ``e``'s contribution to the Hessian-vector product ``H(x) v``."""
    e = wp.tid()
    i = edges[e][0]
    j = edges[e][1]
    w = spring_block(x[i] - x[j], k[e], rest[e]) * (v[i] - v[j])
    wp.atomic_add(hv, i, w)
    wp.atomic_sub(hv, j, w)


@wp.kernel
def spring_hess_diag_kernel(
    x: wp.array(dtype=wp.vec2d),
    edges: wp.array(dtype=wp.vec2i),
    k: wp.array(dtype=wp.float64),
    rest: wp.array(dtype=wp.float64),
    diag: wp.array(dtype=wp.vec2d),
):
    """Scatter spring ``e``'s contribution to the Hessian's diagonal (for a Jacobi preconditioner)."""
    e = wp.tid()
    i = edges[e][0]
    j = edges[e][1]
    block = spring_block(x[i] - x[j], k[e], rest[e])
    dd = wp.vec2d(block[0, 0], block[1, 1])
    wp.atomic_add(diag, i, dd)
    wp.atomic_add(diag, j, dd)


def spring_energy(n_nodes: int, n_springs: int) -> jarp.warp.Energy:
    """The four kernels as one `jarp.warp.Energy`: ``E(x, edges, k, rest)`` for ``n_nodes`` and ``n_springs``.

    Every kernel launches one thread per spring; the gradient-like outputs hold one ``vec2d`` per node. The energy and
    gradient modules are built with ``enable_backward=True`` so that derivatives with respect to the float parameters
    (the stiffness ``k``) go through Warp's adjoint kernels.
    """
    fun = jarp.warp.jax_kernel(spring_energy_kernel, launch_dims=n_springs, output_dims=1, enable_backward=True)
    grad = jarp.warp.jax_kernel(spring_grad_kernel, launch_dims=n_springs, output_dims=n_nodes, enable_backward=True)
    hess_prod = jarp.warp.jax_kernel(spring_hess_prod_kernel, launch_dims=n_springs, output_dims=n_nodes)
    hess_diag = jarp.warp.jax_kernel(spring_hess_diag_kernel, launch_dims=n_springs, output_dims=n_nodes)
    return jarp.warp.energy(fun, grad, hess_prod, hess_diag)


# ----------------------------------------------------------------------------------------------------------------------
# The model: a spring net with learnable per-region stiffness
# ----------------------------------------------------------------------------------------------------------------------


class SolverOptions(eqx.Module):
    """Tolerances of the inner Newton-CG solve and of the adjoint CG solve (static: part of the compiled program)."""

    tol: float = eqx.field(static=True, default=1e-10)  # stop when max |residual| <= tol * max |load|
    max_newton: int = eqx.field(static=True, default=60)
    cg_tol: float = eqx.field(static=True, default=1e-6)  # relative tolerance of every Newton step's CG solve
    cg_maxiter: int = eqx.field(static=True, default=2000)
    adjoint_tol: float = eqx.field(static=True, default=1e-10)  # relative tolerance of the adjoint CG solve


class SpringNet(eqx.Module):
    """A 2D mass-spring net under a fixed load, with pinned nodes and a learnable stiffness per region.

    The spring constant of spring ``e`` is ``exp(log_stiffness[region[e]]) / rest_length[e]``: the learnable value is
    a material stiffness (force per unit strain), positive by construction, and independent of the mesh size.
    The total energy is the elastic energy (Warp kernels) minus the work of the load, ``E(x) - <load, x>``; pinned
    degrees of freedom are held at their rest positions by the 0/1 mask ``free``.
    """

    log_stiffness: Float[Array, " regions"]  # the only trained leaf
    rest_positions: Float[Array, "nodes 2"]
    edges: Int[Array, "springs 2"]
    rest_length: Float[Array, " springs"]
    region: Int[Array, " springs"]
    free: Float[Array, "nodes 2"]  # 1 where a degree of freedom is free, 0 where it is pinned
    load: Float[Array, "nodes 2"]  # external force on every node (gravity, the bar), zero on pinned nodes
    energy: jarp.warp.Energy  # the Warp kernels: static fields only, no array leaves
    options: SolverOptions

    def __init__(
        self,
        log_stiffness: Float[Array, " regions"],
        rest_positions: Float[Array, "nodes 2"],
        edges: Int[Array, "springs 2"],
        region: Int[Array, " springs"],
        free: Float[Array, "nodes 2"],
        load: Float[Array, "nodes 2"],
        options: SolverOptions | None = None,
    ) -> None:
        """Build the net; rest lengths come from ``rest_positions`` and the kernels are sized from the arrays."""
        self.log_stiffness = log_stiffness
        self.rest_positions = rest_positions
        self.edges = edges
        d = rest_positions[edges[:, 0]] - rest_positions[edges[:, 1]]
        self.rest_length = jnp.sqrt(jnp.sum(d * d, axis=-1))
        self.region = region
        self.free = free
        self.load = free * load
        self.energy = spring_energy(rest_positions.shape[0], edges.shape[0])
        self.options = SolverOptions() if options is None else options

    def spring_constants(self) -> Float[Array, " springs"]:
        """The spring constant of every spring: its region's stiffness over its rest length."""
        return jnp.exp(self.log_stiffness)[self.region] / self.rest_length

    def _args(self) -> tuple[jax.Array, jax.Array, jax.Array]:
        return self.edges, self.spring_constants(), self.rest_length

    def total_energy(self, x: Float[Array, "nodes 2"]) -> Float[Array, ""]:
        """Elastic energy (the Warp energy kernel) minus the work of the load."""
        return self.energy(x, *self._args()) - jnp.vdot(self.load, x)

    def residual(self, x: Float[Array, "nodes 2"]) -> Float[Array, "nodes 2"]:
        """The out-of-balance force on the free degrees of freedom (the Warp gradient kernel); zero at equilibrium.

        Differentiable: with respect to ``x`` through the Hessian-product kernel, with respect to the stiffness
        through Warp's adjoint of the gradient kernel.
        """
        return self.free * (self.energy.grad(x, *self._args()) - self.load)

    def hess_prod(self, x: Float[Array, "nodes 2"], v: Float[Array, "nodes 2"]) -> Float[Array, "nodes 2"]:
        """``H v`` for the Hessian restricted to the free degrees of freedom (identity on the pinned ones)."""
        hv = self.energy.hess_prod(x, *self._args(), v=self.free * v)
        return self.free * hv + (1.0 - self.free) * v

    def hess_diag(self, x: Float[Array, "nodes 2"]) -> Float[Array, "nodes 2"]:
        """The diagonal of `hess_prod`'s matrix, for the Jacobi preconditioner."""
        return self.free * self.energy.hess_diag(x, *self._args()) + (1.0 - self.free)

    def cg(self, x: Float[Array, "nodes 2"], b: Float[Array, "nodes 2"], tol: float) -> Float[Array, "nodes 2"]:
        """Solve ``H(x) y = b`` with Jacobi-preconditioned CG; the matvec is the Warp Hessian-product kernel."""
        diag = self.hess_diag(x)
        y, _ = jax.scipy.sparse.linalg.cg(
            lambda v: self.hess_prod(x, v),
            b,
            tol=tol,
            maxiter=self.options.cg_maxiter,
            M=lambda r: r / diag,
        )
        return y

    def solve(self, x_init: Float[Array, "nodes 2"]) -> tuple[Float[Array, "nodes 2"], Int[Array, ""]]:
        """The equilibrium reached by Newton-CG with a backtracking line search from ``x_init``.

        Returns the positions and the number of Newton steps taken. Not differentiable by itself; use `equilibrium`.
        """
        opts = self.options
        stop = opts.tol * jnp.max(jnp.abs(self.load))
        x_init = self.free * x_init + (1.0 - self.free) * self.rest_positions

        def not_done(state: tuple[jax.Array, jax.Array, jax.Array]) -> jax.Array:
            _, r, it = state
            return (jnp.max(jnp.abs(r)) > stop) & (it < opts.max_newton)

        def newton_step(state: tuple[jax.Array, jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array, jax.Array]:
            x, r, it = state
            dx = self.cg(x, -r, opts.cg_tol)
            slope = jnp.vdot(r, dx)
            # Far from equilibrium the Hessian may be indefinite (springs in compression): fall back to the
            # preconditioned steepest-descent direction when CG did not return a descent direction.
            dx = jnp.where(slope < 0, dx, -r / self.hess_diag(x))
            slope = jnp.vdot(r, dx)
            e0 = self.total_energy(x)
            slack = 1e-12 * jnp.abs(e0)  # energy differences below round-off count as a decrease

            def too_long(alpha: jax.Array) -> jax.Array:
                trial = self.total_energy(x + alpha * dx)
                return (trial > e0 + 1e-4 * alpha * slope + slack) & (alpha > 1e-6)

            alpha = jax.lax.while_loop(too_long, lambda a: 0.5 * a, jnp.ones((), x.dtype))
            x = x + alpha * dx
            return x, self.residual(x), it + 1

        state = (x_init, self.residual(x_init), jnp.zeros((), jnp.int32))
        x, _, iterations = jax.lax.while_loop(not_done, newton_step, state)
        return x, iterations


@eqx.filter_custom_vjp
def equilibrium(net: SpringNet, x_init: Float[Array, "nodes 2"]) -> Float[Array, "nodes 2"]:
    """The equilibrium positions ``x*`` of ``net``, differentiable with respect to the net by the implicit function
    theorem (no differentiation through the Newton iterations). ``x_init`` is only a starting point.
    """
    return net.solve(x_init)[0]


@equilibrium.def_fwd
def _equilibrium_fwd(
    perturbed: Any, net: SpringNet, x_init: Float[Array, "nodes 2"]
) -> tuple[Float[Array, "nodes 2"], Float[Array, "nodes 2"]]:
    del perturbed
    x, _ = net.solve(x_init)
    return x, x  # the equilibrium is the only residual the backward pass needs


@equilibrium.def_bwd
def _equilibrium_bwd(
    x: Float[Array, "nodes 2"], x_bar: Float[Array, "nodes 2"] | None, perturbed: Any, net: SpringNet, x_init: Any
) -> Any:
    """Implicit differentiation: ``r(x*(p), p) = 0`` gives ``dx*/dp = -H^{-1} dr/dp``, so the cotangent of the
    parameters is ``-(dr/dp)^T lam`` with ``H lam = x_bar`` (``H`` is symmetric)."""
    del x_init
    if x_bar is None:
        return jax.tree_util.tree_map(lambda _: None, net)
    lam = net.cg(x, net.free * x_bar, net.options.adjoint_tol)  # pinned positions do not depend on the parameters
    diff, static = eqx.partition(net, perturbed)
    _, pullback = eqx.filter_vjp(lambda d: eqx.combine(d, static).residual(x), diff)
    (grads,) = pullback(-lam)
    return grads


def misfit(x: Float[Array, "nodes 2"], x_obs: Float[Array, "nodes 2"], net: SpringNet) -> Float[Array, ""]:
    """``|x - x_obs|^2`` over the free nodes, relative to the observed displacement ``|x_obs - x_rest|^2``."""
    scale = jnp.sum(net.free * (x_obs - net.rest_positions) ** 2)
    return jnp.sum(net.free * (x - x_obs) ** 2) / scale


def fit_loss(
    net: SpringNet, x_init: Float[Array, "nodes 2"], x_obs: Float[Array, "nodes 2"]
) -> tuple[Float[Array, ""], Float[Array, "nodes 2"]]:
    """The outer loss of ``net`` against the observed shape, and the equilibrium it was computed at."""
    x = equilibrium(net, x_init)
    return misfit(x, x_obs, net), x


# ----------------------------------------------------------------------------------------------------------------------
# Problem set-up
# ----------------------------------------------------------------------------------------------------------------------


def make_net(
    grid: int, regions: int, log_stiffness: Float[Array, " regions"] | None = None, options: SolverOptions | None = None
) -> SpringNet:
    """A ``grid`` x ``grid`` triangulated square net of unit width hanging from its top row.

    Springs join horizontal and vertical neighbours and one diagonal per cell (alternating, so the net is
    symmetric). The net is split into ``regions`` x ``regions`` regions by spring midpoint. The load is gravity on
    every node plus a heavier bar along the bottom row. ``log_stiffness`` defaults to zeros (stiffness 1).
    """
    if grid < 2 or regions < 1:
        raise ValueError(f"need grid >= 2 and regions >= 1, got grid={grid}, regions={regions}")
    h = 1.0 / (grid - 1)
    jj, ii = np.meshgrid(np.arange(grid), np.arange(grid), indexing="ij")  # row j (downwards), column i
    rest = np.stack([ii.ravel() * h, -jj.ravel() * h], axis=-1)

    def node(i: int, j: int) -> int:
        return j * grid + i

    edges = []
    for j in range(grid):
        for i in range(grid):
            if i + 1 < grid:
                edges.append((node(i, j), node(i + 1, j)))
            if j + 1 < grid:
                edges.append((node(i, j), node(i, j + 1)))
            if i + 1 < grid and j + 1 < grid:
                if (i + j) % 2 == 0:
                    edges.append((node(i, j), node(i + 1, j + 1)))
                else:
                    edges.append((node(i + 1, j), node(i, j + 1)))
    edges_np = np.asarray(edges, np.int32)
    mid = 0.5 * (rest[edges_np[:, 0]] + rest[edges_np[:, 1]])
    col = np.minimum((mid[:, 0] * regions).astype(np.int32), regions - 1)
    row = np.minimum((-mid[:, 1] * regions).astype(np.int32), regions - 1)
    region = (row * regions + col).astype(np.int32)

    free = np.ones_like(rest)
    free[jj.ravel() == 0] = 0.0  # the top row is pinned
    # Gravity, scaled so that the total weight does not depend on the resolution, plus a bar as heavy as the net
    # hung from the bottom row, so that every row of springs is loaded.
    weight = np.zeros_like(rest)
    weight[:, 1] = -LOAD / grid**2
    weight[jj.ravel() == grid - 1, 1] += -LOAD / grid
    if log_stiffness is None:
        log_stiffness = jnp.zeros(regions * regions, jnp.float64)
    return SpringNet(
        log_stiffness,
        jnp.asarray(rest, jnp.float64),
        jnp.asarray(edges_np),
        jnp.asarray(region),
        jnp.asarray(free, jnp.float64),
        jnp.asarray(weight, jnp.float64),
        options,
    )


def true_log_stiffness(regions: int, seed: int) -> Float[Array, " regions"]:
    """The hidden stiffness of every region: log-normal, spread about a factor of two either side of 1."""
    rng = np.random.default_rng(seed)
    return jnp.asarray(np.clip(0.45 * rng.standard_normal(regions * regions), -0.8, 0.8), jnp.float64)


# ----------------------------------------------------------------------------------------------------------------------
# Training: Adam on log_stiffness, the whole step under eqx.filter_jit
# ----------------------------------------------------------------------------------------------------------------------


class Adam(eqx.Module):
    """The state of a plain Adam optimiser over a pytree of parameters."""

    mu: Any
    nu: Any
    count: Int[Array, ""]

    @staticmethod
    def init(params: Any) -> Adam:
        """Zero moments for ``params``."""
        zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
        return Adam(zeros, zeros, jnp.zeros((), jnp.int32))

    def update(self, grads: Any, params: Any, lr: Float[Array, ""]) -> tuple[Any, Adam]:
        """One Adam step: the new parameters and optimiser state."""
        b1, b2, eps = 0.9, 0.999, 1e-12
        count = self.count + 1
        mu = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, self.mu, grads)
        nu = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, self.nu, grads)
        t = count.astype(lr.dtype)
        step = lr * jnp.sqrt(1 - b2**t) / (1 - b1**t)
        params = jax.tree_util.tree_map(lambda p, m, v: p - step * m / (jnp.sqrt(v) + eps), params, mu, nu)
        return params, Adam(mu, nu, count)


def trainable(net: SpringNet) -> SpringNet:
    """Filter spec selecting ``log_stiffness``, the only trained leaf."""
    spec = jax.tree_util.tree_map(lambda _: False, net)
    return eqx.tree_at(lambda n: n.log_stiffness, spec, replace=True)


@eqx.filter_jit
def train_step(
    params: SpringNet,
    static: SpringNet,
    opt: Adam,
    x_init: Float[Array, "nodes 2"],
    x_obs: Float[Array, "nodes 2"],
    lr: Float[Array, ""],
) -> tuple[SpringNet, Adam, Float[Array, ""], Float[Array, "nodes 2"]]:
    """One outer step: equilibrium solve, implicit gradient, Adam update.

    Returns the new parameters and optimiser state, the loss before the update and the equilibrium it was computed
    at (the warm start of the next solve).
    """

    def loss_fn(p: SpringNet) -> tuple[Float[Array, ""], Float[Array, "nodes 2"]]:
        return fit_loss(eqx.combine(p, static), x_init, x_obs)

    (loss, x), grads = eqx.filter_value_and_grad(loss_fn, has_aux=True)(params)
    params, opt = opt.update(grads, params, lr)
    return params, opt, loss, x


@eqx.filter_jit
def solve_equilibrium(net: SpringNet, x_init: Float[Array, "nodes 2"]) -> tuple[jax.Array, jax.Array]:
    """Jitted `SpringNet.solve`: the equilibrium and the number of Newton steps."""
    return net.solve(x_init)


def progress(steps: int) -> tuple[Iterable[int], Callable[[str], None], Callable[[float], None]]:
    """A tqdm bar when tqdm is installed (the ``examples`` extra), plain prints otherwise.

    Returns the step iterator, a function printing a line, and one showing the current loss on the bar.
    """
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return range(steps), print, lambda loss: None
    bar = tqdm(range(steps), desc="fitting stiffness", disable=None)
    return bar, tqdm.write, lambda loss: bar.set_postfix(loss=f"{loss:.2e}")


def stiffness_error(net: SpringNet, k_true: Float[Array, " regions"]) -> float:
    """The largest relative error of the recovered region stiffness."""
    return float(jnp.max(jnp.abs(jnp.exp(net.log_stiffness) - k_true) / k_true))


def plot(
    path: Path,
    losses: list[float],
    net: SpringNet,
    x_obs: np.ndarray,
    x_fit: np.ndarray,
    k_true: np.ndarray,
) -> None:
    """Write the PNG: loss curve; rest, observed and recovered shapes; true vs recovered stiffness per region."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection

    edges = np.asarray(net.edges)
    rest = np.asarray(net.rest_positions)
    k_fit = np.exp(np.asarray(net.log_stiffness))
    fig, (ax_loss, ax_rest, ax_net, ax_k) = plt.subplots(
        1, 4, figsize=(19, 4.8), gridspec_kw={"width_ratios": [1, 0.9, 0.9, 1]}
    )

    ax_loss.semilogy(np.arange(1, len(losses) + 1), losses)
    ax_loss.set_xlabel("Adam step")
    ax_loss.set_ylabel("relative misfit |x*(k) - x_obs|^2")
    ax_loss.set_title("loss")
    ax_loss.grid(True, which="both", alpha=0.3)

    # The rest shape, each spring coloured by the (hidden) true stiffness of its region.
    springs = LineCollection(rest[edges], cmap="viridis", linewidths=1.2)
    springs.set_array(k_true[np.asarray(net.region)])
    ax_rest.add_collection(springs)
    fig.colorbar(springs, ax=ax_rest, fraction=0.046, pad=0.04, label="true stiffness")
    pinned = np.asarray(net.free)[:, 1] == 0
    ax_rest.plot(rest[pinned, 0], rest[pinned, 1], "k^", markersize=4)
    ax_rest.set_title("rest shape (top row pinned)")

    # The deformed shapes: observed (true stiffness) and recovered (fitted stiffness), over the rest outline.
    ax_net.add_collection(LineCollection(rest[edges], colors="0.85", linewidths=0.6, label="rest"))
    ax_net.add_collection(LineCollection(x_obs[edges], colors="tab:blue", linewidths=1.8, label="observed (true k)"))
    ax_net.add_collection(
        LineCollection(x_fit[edges], colors="tab:red", linewidths=0.8, linestyles="--", label="recovered (fitted k)")
    )
    ax_net.set_title("deformed under gravity and a bottom bar")
    ax_net.legend(loc="lower left", fontsize=8, framealpha=0.9)
    for ax in (ax_rest, ax_net):
        ax.set_xlim(-0.1, 1.1)
        ax.set_ylim(min(x_obs[:, 1].min(), x_fit[:, 1].min()) - 0.05, 0.05)
        ax.set_aspect("equal")

    idx = np.arange(len(k_true))
    ax_k.bar(idx - 0.2, k_true, width=0.4, label="true", color="tab:blue")
    ax_k.bar(idx + 0.2, k_fit, width=0.4, label="recovered", color="tab:red")
    ax_k.set_xlabel("region (row-major, top row first)")
    ax_k.set_ylabel("stiffness")
    ax_k.set_xticks(idx)
    ax_k.set_title("per-region stiffness")
    ax_k.legend()

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """Generate the observations, fit the stiffness, save/reload the model and write the PNG."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", type=int, default=20, help="nodes per side of the square net (>= 3)")
    parser.add_argument("--regions", type=int, default=4, help="regions per side, each with its own stiffness")
    parser.add_argument("--steps", type=int, default=500, help="Adam steps")
    parser.add_argument("--lr", type=float, default=0.05, help="initial Adam learning rate")
    parser.add_argument("--decay", type=float, default=0.1, help="final learning rate over initial")
    parser.add_argument("--seed", type=int, default=0, help="seed of the hidden stiffness")
    parser.add_argument("--out", type=Path, default=None, help="output directory (default: a new temporary one)")
    args = parser.parse_args(argv)
    if args.grid < 3 or not 1 <= args.regions < args.grid or args.steps < 1:
        parser.error("need --grid >= 3, 1 <= --regions < --grid and --steps >= 1")
    out = args.out if args.out is not None else Path(tempfile.mkdtemp(prefix="jarp_fit_stiffness_"))
    out.mkdir(parents=True, exist_ok=True)

    start = time.perf_counter()
    log_k_true = true_log_stiffness(args.regions, args.seed)
    k_true = jnp.exp(log_k_true)
    true_net = make_net(args.grid, args.regions, log_k_true)
    x_obs, newton_steps = solve_equilibrium(true_net, true_net.rest_positions)
    strain = float(
        jnp.max(
            jnp.abs(
                jnp.linalg.norm(x_obs[true_net.edges[:, 0]] - x_obs[true_net.edges[:, 1]], axis=-1)
                / true_net.rest_length
                - 1
            )
        )
    )
    residual = float(jnp.max(jnp.abs(true_net.residual(x_obs))))
    print(
        f"spring net: {args.grid} x {args.grid} nodes, {true_net.edges.shape[0]} springs, "
        f"{args.regions * args.regions} stiffness regions"
    )
    print(
        f"observed equilibrium: {int(newton_steps)} Newton steps from rest, max strain {strain:.1%}, "
        f"max |residual| {residual:.1e}"
    )

    net = make_net(args.grid, args.regions)  # the initial guess: stiffness 1 everywhere
    print(f"initial max relative stiffness error: {stiffness_error(net, k_true):.3f}")
    params, static = eqx.partition(net, trainable(net))
    opt = Adam.init(params)
    x = net.rest_positions
    steps, log, show = progress(args.steps)
    every = max(args.steps // 10, 1)
    losses: list[float] = []
    for step in steps:
        # Exponential decay of the learning rate, to `decay` times its initial value at the last step.
        lr = jnp.asarray(args.lr * args.decay ** (step / max(args.steps - 1, 1)), jnp.float64)
        params, opt, loss, x = train_step(params, static, opt, x, x_obs, lr)
        losses.append(float(loss))
        show(losses[-1])
        if step == 0 or (step + 1) % every == 0 or step + 1 == args.steps:
            err = stiffness_error(eqx.combine(params, static), k_true)
            log(f"step {step + 1:4d}  loss {losses[-1]:.3e}  max relative stiffness error {err:.2e}")
    trained = eqx.combine(params, static)
    x_fit, _ = solve_equilibrium(trained, x)
    final = float(misfit(x_fit, x_obs, trained))
    print(f"loss: initial {losses[0]:.3e} -> final {final:.3e} in {args.steps} steps")
    err = stiffness_error(trained, k_true)
    print(f"stiffness error: max relative {err:.2e}")
    print("true stiffness:     ", np.array2string(np.asarray(k_true), precision=4))
    print("recovered stiffness:", np.array2string(np.exp(np.asarray(trained.log_stiffness)), precision=4))

    model_path = out / "spring_net.eqx"
    eqx.tree_serialise_leaves(model_path, trained)
    reloaded = eqx.tree_deserialise_leaves(model_path, make_net(args.grid, args.regions))
    same = bool(eqx.tree_equal(reloaded, trained))
    same = same and bool(jnp.array_equal(solve_equilibrium(reloaded, x)[0], x_fit))
    print(f"saved {model_path} and reloaded it: {'round-tripped' if same else 'MISMATCH'}")

    png = out / "fit_stiffness.png"
    try:
        plot(png, losses, trained, np.asarray(x_obs), np.asarray(x_fit), np.asarray(k_true))
        print(f"wrote {png}")
    except ImportError:
        print("matplotlib is not installed (pip install -e .[examples]); no PNG written")
    print(f"total time {time.perf_counter() - start:.1f} s")
    return 0 if same and math.isfinite(final) else 1


if __name__ == "__main__":
    raise SystemExit(main())
