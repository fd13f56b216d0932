"""Recover the stiffness of a hanging 2D mass-spring net from its observed equilibrium shape.

The flagship jarp example. A triangulated grid of springs hangs from its top row under gravity, with a weighted bar
along its bottom edge. Its elastic energy, gradient, Hessian-vector product and Hessian diagonal are four hand-written
Warp kernels (float64, ``wp.vec2d`` positions), wrapped as jarp modules and combined by `jarp.warp.energy` into one
differentiable `jarp.warp.Energy`. That energy lives inside `SpringNet`, an ordinary `eqx.Module` whose learnable
parameter is the logarithm of the stiffness of each region of the net.

The "observed" shape is the equilibrium under the true stiffness. Training minimises the misfit
``|x*(k) - x_obs|^2`` where ``x*(k)`` is the equilibrium for stiffness ``k``:

* the inner solve is an `optimistix` root find of the residual (`optx.Newton`): each Newton step is a `lineax` CG
  solve whose operator is the Jacobian of the residual, which `jarp.warp.Energy` applies with the Warp
  Hessian-vector-product kernel (matrix-free, no Jacobian is formed), preconditioned by the Warp Hessian diagonal;
* the outer gradient comes from implicit differentiation, `optx.ImplicitAdjoint`: at the equilibrium the residual
  ``r(x*, k) = 0``, so ``dL/dk = -(dr/dk)^T lam`` with ``H lam = dL/dx``. The adjoint ``lam`` is another CG solve
  with the Hessian kernel, and ``(dr/dk)^T lam`` is Warp's adjoint of the gradient kernel with respect to the
  stiffness; nothing is differentiated through the Newton iterations;
* the optimiser is `optax.adam` with an `optax.exponential_decay` learning rate, applied with
  `eqx.filter_value_and_grad` and `eqx.apply_updates`; the whole outer step runs under `eqx.filter_jit`.

It gives the same fit as the hand-written Adam, Newton loop and ``custom_vjp`` it replaced (jarp before the energy module):
with the defaults, the same loss (2.001e-2 -> 2.103e-13) and stiffness error (1.02e-5) at every printed step, to
the four printed digits; the implicit gradients of the two agreed to 2e-12 relative.

The trained model is saved with `eqx.tree_serialise_leaves` and reloaded, and a PNG shows the loss curve, the rest,
observed and recovered shapes, and the true and recovered stiffness of every region.

Run (needs the ``examples`` extra: optax, optimistix and lineax, tqdm for the progress bar, matplotlib for the PNG:
``pip install -e .[examples]``):

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
import lineax as lx
import numpy as np
import optax
import optimistix as optx
import warp as wp
from jaxtyping import Array, Float, Int

import jarp.warp

jax.config.update("jax_enable_x64", True)  # the physics runs in float64: set before any array is created
wp.config.log_level = wp.LOG_WARNING  # no banner, no per-module load lines

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

    def positions(self, u: Float[Array, "nodes 2"]) -> Float[Array, "nodes 2"]:
        """The node positions for displacements ``u`` of the free degrees of freedom (pinned ones stay at rest)."""
        return self.rest_positions + self.free * u

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


# ----------------------------------------------------------------------------------------------------------------------
# The equilibrium: an optimistix Newton root find, lineax CG on the Warp Hessian product, implicit adjoint
# ----------------------------------------------------------------------------------------------------------------------

# The Jacobian of `equilibrium_residual` is the Hessian of the energy on the free degrees of freedom and the identity
# on the pinned ones: symmetric positive definite while the springs are in tension (as in this hanging net). The tags
# let `lx.CG` accept it, in the Newton steps and in the implicit adjoint.
HESSIAN_TAGS = frozenset({lx.symmetric_tag, lx.positive_semidefinite_tag})


class JacobiCG(lx.AbstractLinearSolver):
    """`lineax.CG` with a fixed Jacobi (Hessian-diagonal) preconditioner and a tolerance relative to the right side.

    `optx.Newton` and `optx.ImplicitAdjoint` call `lineax.linear_solve` without ``options``, so the preconditioner
    cannot be passed as ``options={"preconditioner": ...}``; this wrapper adds it to every solve. ``lx.CG`` tests each
    component, ``|r_i| <= atol + rtol |b_i|``; the absolute floor ``max(atol, rtol * max |b|)`` makes ``rtol`` a
    tolerance on the whole residual, as in ``jax.scipy.sparse.linalg.cg``, so that zero entries of ``b`` do not demand
    an exact solve. For the Newton steps ``atol`` is the Newton tolerance on the residual: the last Newton step
    (optimistix's Cauchy test takes one step after the residual is already small) then costs one CG iteration.
    """

    inverse_diagonal: Float[Array, "nodes 2"]  # 1 / diag(H), the preconditioner
    rtol: float = eqx.field(static=True)
    max_steps: int = eqx.field(static=True)
    atol: Float[Array, ""] | float = 0.0  # an absolute floor of the tolerance

    def _cg(self, vector: Float[Array, "nodes 2"]) -> lx.CG:
        atol = jnp.maximum(self.atol, self.rtol * jnp.max(jnp.abs(vector)))
        return lx.CG(rtol=self.rtol, atol=atol, max_steps=self.max_steps)

    def init(self, operator: lx.AbstractLinearOperator, options: dict[str, Any]) -> Any:
        """The state of `lx.CG` (it checks that ``operator`` is tagged positive semi-definite)."""
        return lx.CG(rtol=self.rtol, atol=self.rtol, max_steps=self.max_steps).init(operator, options)

    def compute(
        self, state: Any, vector: Float[Array, "nodes 2"], options: dict[str, Any]
    ) -> tuple[Float[Array, "nodes 2"], lx.RESULTS, dict[str, Any]]:
        """Preconditioned CG for ``operator y = vector``."""
        preconditioner = lx.TaggedLinearOperator(
            lx.DiagonalLinearOperator(self.inverse_diagonal), lx.positive_semidefinite_tag
        )
        return self._cg(vector).compute(state, vector, {**options, "preconditioner": preconditioner})

    def transpose(self, state: Any, options: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """The transposed problem (the same solver: the preconditioner is diagonal)."""
        return lx.CG(rtol=self.rtol, atol=self.rtol).transpose(state, options)

    def conj(self, state: Any, options: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """The conjugated problem (real here: unchanged)."""
        return lx.CG(rtol=self.rtol, atol=self.rtol).conj(state, options)

    def assume_full_rank(self) -> bool:
        """CG needs a definite operator."""
        return True


def equilibrium_residual(u: Float[Array, "nodes 2"], net: SpringNet) -> Float[Array, "nodes 2"]:
    """The root-finding function: the out-of-balance force at displacement ``u``, and ``u`` itself on pinned entries.

    Its Jacobian with respect to ``u`` is ``free H free + (1 - free) I``: under `jarp.warp.Energy`, forward and reverse
    mode through ``E.grad`` run the Warp Hessian-product kernel, so `optx.Newton`'s ``jax.linearize`` and the
    implicit adjoint's transpose both apply the Hessian matrix-free. At the root the pinned displacements are zero.
    """
    return net.residual(net.positions(u)) + (1.0 - net.free) * u


def equilibrium(net: SpringNet, x_init: Float[Array, "nodes 2"]) -> tuple[Float[Array, "nodes 2"], Int[Array, ""]]:
    """The equilibrium positions ``x*`` of ``net`` found from ``x_init``, and the number of Newton steps taken.

    Differentiable with respect to the net by the implicit function theorem (`optx.ImplicitAdjoint`: one CG solve
    with the transposed Jacobian, nothing differentiated through the Newton iterations); ``x_init`` is only a
    starting point.

    The solver is `optx.Newton` (full steps, no line search) with `JacobiCG` as its linear solver: the Warp
    Hessian-vector product is CG's matrix, the Warp Hessian diagonal at ``x_init`` its preconditioner. Plain Newton
    converges here in about six steps from the rest shape and in one or two from the previous equilibrium during
    training, because the load keeps every spring in tension and so the Hessian positive definite; the hand-written
    solver this replaced also had a backtracking line search; plain Newton gives the same equilibria and fit to the
    printed digits, so it is not needed here. A solve that does not converge in ``options.max_newton`` steps raises (``throw=True``) instead of training on a wrong shape.
    """
    opts = net.options
    u_init = net.free * (x_init - net.rest_positions)
    # The preconditioner only changes the speed of CG, never the solution: it is computed once per solve, without
    # derivatives (the Jacobi kernel has no adjoint, and the implicit adjoint must not differentiate its solver).
    frozen = jax.lax.stop_gradient(net)
    inverse_diagonal = 1.0 / frozen.hess_diag(frozen.positions(jax.lax.stop_gradient(u_init)))
    atol = opts.tol * jnp.max(jnp.abs(frozen.load))
    newton = optx.Newton(
        rtol=opts.tol, atol=atol, linear_solver=JacobiCG(inverse_diagonal, opts.cg_tol, opts.cg_maxiter, atol)
    )
    adjoint = optx.ImplicitAdjoint(linear_solver=JacobiCG(inverse_diagonal, opts.adjoint_tol, opts.cg_maxiter))
    solution = optx.root_find(
        equilibrium_residual,
        newton,
        u_init,
        args=net,
        max_steps=opts.max_newton,
        adjoint=adjoint,
        tags=HESSIAN_TAGS,
    )
    return net.positions(solution.value), solution.stats["num_steps"]


def misfit(x: Float[Array, "nodes 2"], x_obs: Float[Array, "nodes 2"], net: SpringNet) -> Float[Array, ""]:
    """``|x - x_obs|^2`` over the free nodes, relative to the observed displacement ``|x_obs - x_rest|^2``."""
    scale = jnp.sum(net.free * (x_obs - net.rest_positions) ** 2)
    return jnp.sum(net.free * (x - x_obs) ** 2) / scale


def fit_loss(
    net: SpringNet, x_init: Float[Array, "nodes 2"], x_obs: Float[Array, "nodes 2"]
) -> tuple[Float[Array, ""], Float[Array, "nodes 2"]]:
    """The outer loss of ``net`` against the observed shape, and the equilibrium it was computed at."""
    x, _ = equilibrium(net, x_init)
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
# Training: optax Adam on log_stiffness with an exponentially decaying learning rate, the whole step under filter_jit
# ----------------------------------------------------------------------------------------------------------------------


def make_optimiser(lr: float, decay: float, steps: int) -> optax.GradientTransformation:
    """Adam whose learning rate decays exponentially from ``lr`` at the first step to ``decay * lr`` at the last.

    ``eps=1e-12`` instead of optax's 1e-8: late in the fit the gradients are ~1e-8, and a larger ``eps`` would stall.
    """
    schedule = optax.exponential_decay(lr, transition_steps=max(steps - 1, 1), decay_rate=decay)
    return optax.adam(schedule, eps=1e-12)


def trainable(net: SpringNet) -> SpringNet:
    """Filter spec selecting ``log_stiffness``, the only trained leaf."""
    spec = jax.tree_util.tree_map(lambda _: False, net)
    return eqx.tree_at(lambda n: n.log_stiffness, spec, replace=True)


@eqx.filter_jit
def train_step(
    params: SpringNet,
    static: SpringNet,
    optimiser: optax.GradientTransformation,
    opt_state: optax.OptState,
    x_init: Float[Array, "nodes 2"],
    x_obs: Float[Array, "nodes 2"],
) -> tuple[SpringNet, optax.OptState, Float[Array, ""], Float[Array, "nodes 2"]]:
    """One outer step: equilibrium solve, implicit gradient, optax update.

    Returns the new parameters and optimiser state, the loss before the update and the equilibrium it was computed
    at (the warm start of the next solve). The learning-rate schedule lives in ``opt_state`` (its step count), so
    every step runs the same compiled program.
    """

    def loss_fn(p: SpringNet) -> tuple[Float[Array, ""], Float[Array, "nodes 2"]]:
        return fit_loss(eqx.combine(p, static), x_init, x_obs)

    (loss, x), grads = eqx.filter_value_and_grad(loss_fn, has_aux=True)(params)
    updates, opt_state = optimiser.update(grads, opt_state, params)
    params = eqx.apply_updates(params, updates)
    return params, opt_state, loss, x


@eqx.filter_jit
def solve_equilibrium(net: SpringNet, x_init: Float[Array, "nodes 2"]) -> tuple[jax.Array, jax.Array]:
    """Jitted `equilibrium`: the equilibrium and the number of Newton steps."""
    return equilibrium(net, x_init)


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
    parser.add_argument("--steps", type=int, default=500, help="optimiser (Adam) steps")
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
    optimiser = make_optimiser(args.lr, args.decay, args.steps)
    opt_state = optimiser.init(params)
    x = net.rest_positions
    steps, log, show = progress(args.steps)
    every = max(args.steps // 10, 1)
    losses: list[float] = []
    for step in steps:
        params, opt_state, loss, x = train_step(params, static, optimiser, opt_state, x, x_obs)
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
