"""Shared float32 Warp kernels and annotated Python functions for the ``jarp.warp`` tests.

Warp builds one native module per Python module (about a second or more each on the CPU), so every float32 kernel
used by the suite lives here, at module level, and is compiled once per process (and cached on disk afterwards).
Generic kernels (whose overloads change their module's hash and rebuild it) and float64 kernels live in
``kernels64.py`` so that adding an overload never rebuilds this larger module.

The first block ports the JAX examples of Warp's interop guide verbatim (apart from names made unique); the bodies
left as ``...`` in the guide (``funky_kernel``, ``vecmat_kernel``) are filled in with checkable arithmetic.
"""

import contextlib

import numpy as np
import warp as wp

# ----------------------------------------------------------------------------------------------------------------------
# Interop guide: "Using Warp kernels as JAX primitives" and "Input and Output Semantics"
# ----------------------------------------------------------------------------------------------------------------------


@wp.kernel
def triple_kernel(input: wp.array(dtype=float), output: wp.array(dtype=float)):
    tid = wp.tid()
    output[tid] = 3.0 * input[tid]


@wp.kernel
def add_int_kernel(a: wp.array(dtype=int), b: wp.array(dtype=int), output: wp.array(dtype=int)):
    tid = wp.tid()
    output[tid] = a[tid] + b[tid]


@wp.kernel
def sincos_kernel(
    angle: wp.array(dtype=float),
    # outputs
    sin_out: wp.array(dtype=float),
    cos_out: wp.array(dtype=float),
):
    tid = wp.tid()
    sin_out[tid] = wp.sin(angle[tid])
    cos_out[tid] = wp.cos(angle[tid])


@wp.kernel
def diagonal_kernel(output: wp.array(dtype=wp.mat33)):
    tid = wp.tid()
    output[tid] = wp.mat33(1.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 3.0)


@wp.kernel
def scale_kernel(a: wp.array(dtype=float), s: float, output: wp.array(dtype=float)):
    tid = wp.tid()
    output[tid] = a[tid] * s


# ----------------------------------------------------------------------------------------------------------------------
# Interop guide: "Kernel Launch and Output Dimensions"
# ----------------------------------------------------------------------------------------------------------------------


@wp.kernel
def matmul_kernel(
    a: wp.array2d(dtype=float),  # NxK input
    b: wp.array2d(dtype=float),  # KxM input
    c: wp.array2d(dtype=float),  # NxM output
):
    # launch dimensions should be (N, M)
    i, j = wp.tid()
    N = a.shape[0]
    K = a.shape[1]
    M = b.shape[1]
    if i < N and j < M:
        s = wp.float32(0)
        for k in range(K):
            s += a[i, k] * b[k, j]
        c[i, j] = s


@wp.kernel
def funky_kernel(
    a: wp.array(dtype=float),
    # outputs
    b: wp.array(dtype=float),
    c: wp.array(dtype=float),
):
    # The guide leaves the body out; this one writes b = a + 1 and c = 2 a wherever the launch, the input and the
    # output all reach, so the output shapes and the zero-filled tails are checkable.
    tid = wp.tid()
    if tid < a.shape[0]:
        if tid < b.shape[0]:
            b[tid] = a[tid] + 1.0
        if tid < c.shape[0]:
            c[tid] = 2.0 * a[tid]


@wp.kernel
def vecmat_kernel(
    a: wp.array(dtype=float),
    b: wp.array(dtype=wp.vec3),
    c: wp.array(dtype=wp.mat22),
    # outputs
    d: wp.array(dtype=float),
    e: wp.array(dtype=wp.vec3),
    f: wp.array(dtype=wp.mat22),
):
    # The guide leaves the body out: d = 2 a, e = a b, f = a c.
    tid = wp.tid()
    d[tid] = 2.0 * a[tid]
    e[tid] = b[tid] * a[tid]
    f[tid] = c[tid] * a[tid]


# ----------------------------------------------------------------------------------------------------------------------
# Interop guide: "JAX VMAP Support"
# ----------------------------------------------------------------------------------------------------------------------


@wp.kernel
def add_kernel(a: wp.array(dtype=float), b: wp.array(dtype=float), output: wp.array(dtype=float)):
    tid = wp.tid()
    output[tid] = a[tid] + b[tid]


@wp.kernel
def rowsum_kernel(matrix: wp.array2d(dtype=float), sums: wp.array1d(dtype=float)):
    i, j = wp.tid()
    wp.atomic_add(sums, i, matrix[i, j])


@wp.kernel
def lookup_kernel(table: wp.array(dtype=float), indices: wp.array(dtype=int), output: wp.array(dtype=float)):
    i = wp.tid()
    output[i] = table[indices[i]]


# ----------------------------------------------------------------------------------------------------------------------
# Interop guide: "JAX Automatic Differentiation"
# ----------------------------------------------------------------------------------------------------------------------


@wp.kernel
def scale_sum_square(
    a: wp.array(dtype=float),
    b: wp.array(dtype=float),
    s: float,
    out: wp.array(dtype=float),
):
    tid = wp.tid()
    out[tid] = (a[tid] * s + b[tid]) ** 2.0


@wp.kernel
def multi_output(
    a: wp.array(dtype=float),
    b: wp.array(dtype=float),
    s: float,
    c: wp.array(dtype=float),
    d: wp.array(dtype=float),
):
    tid = wp.tid()
    c[tid] = a[tid] ** 2.0
    d[tid] = a[tid] * b[tid] * s


@wp.kernel
def scale_vec2(a: wp.array(dtype=wp.vec2), s: float, out: wp.array(dtype=wp.vec2)):
    tid = wp.tid()
    out[tid] = a[tid] * s


# ----------------------------------------------------------------------------------------------------------------------
# Interop guide: "Calling Annotated Python Functions" (scale_kernel above is shared with the scalar example)
# ----------------------------------------------------------------------------------------------------------------------


@wp.kernel
def scale_vec_kernel(a: wp.array(dtype=wp.vec2), s: float, output: wp.array(dtype=wp.vec2)):
    tid = wp.tid()
    output[tid] = a[tid] * s


def example_func(
    # inputs
    a: wp.array(dtype=float),
    b: wp.array(dtype=wp.vec2),
    s: float,
    # outputs
    c: wp.array(dtype=float),
    d: wp.array(dtype=wp.vec2),
):
    # launch multiple kernels
    wp.launch(scale_kernel, dim=a.shape, inputs=[a, s], outputs=[c])
    wp.launch(scale_vec_kernel, dim=b.shape, inputs=[b, s], outputs=[d])


# ----------------------------------------------------------------------------------------------------------------------
# Module contract: kernels that are NOT elementwise (folding the vmap batch into launch dim 0 is wrong for them)
# ----------------------------------------------------------------------------------------------------------------------


@wp.kernel
def gather_kernel(indices: wp.array(dtype=int), table: wp.array(dtype=float), out: wp.array(dtype=float)):
    # launch dims follow `indices`; gathers through indices into a (possibly per-batch) table
    i = wp.tid()
    out[i] = table[indices[i]]


@wp.kernel
def reverse_kernel(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    # reads a.shape[0]
    i = wp.tid()
    n = a.shape[0]
    out[i] = a[n - 1 - i]


@wp.kernel
def scatter_add_kernel(indices: wp.array(dtype=int), weights: wp.array(dtype=float), out: wp.array(dtype=float)):
    # atomic reduction into a fixed-size output (a weighted histogram); relies on `out` starting at zero
    i = wp.tid()
    wp.atomic_add(out, indices[i], weights[i])


@wp.kernel
def rowsum_count_kernel(
    matrix: wp.array2d(dtype=float), sums: wp.array1d(dtype=float), counts: wp.array1d(dtype=float)
):
    # `sums` is meant as an in-out argument (row sums added to its incoming values); `counts` is a pure output that
    # counts the columns by atomic accumulation, so it is only right if it starts zero-filled
    i, j = wp.tid()
    wp.atomic_add(sums, i, matrix[i, j])
    wp.atomic_add(counts, i, 1.0)


@wp.kernel
def grow_kernel(x: wp.array(dtype=float), s: wp.array(dtype=float)):
    # `s` is in-out and read before it is written: the derivative with respect to `x` is the incoming `s`, so the
    # adjoint must replay from the value before the launch (d/dx sum(s + s x) = s, d/ds = 1 + x)
    i = wp.tid()
    wp.atomic_add(s, i, s[i] * x[i])


@wp.kernel
def spring_kernel(
    positions: wp.array(dtype=wp.vec3),
    weights: wp.array(dtype=float),
    stiffness: float,
    # outputs
    energies: wp.array(dtype=float),
    forces: wp.array(dtype=wp.vec3),
):
    # distinctive argument names, so that error messages can be checked for them; vec3 in and out; smooth for grads
    i = wp.tid()
    p = positions[i]
    w = weights[i]
    energies[i] = 0.5 * stiffness * w * wp.dot(p, p)
    forces[i] = -stiffness * w * p


# ----------------------------------------------------------------------------------------------------------------------
# Annotated Python functions for jax_callable (they launch the kernels above)
# ----------------------------------------------------------------------------------------------------------------------


def scale_func(a: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
    wp.launch(scale_kernel, dim=a.shape, inputs=[a, s], outputs=[out])


def scatter_add_func(indices: wp.array(dtype=int), weights: wp.array(dtype=float), out: wp.array(dtype=float)):
    # accumulates into `out` without clearing it first: correct only because outputs start zero-filled
    wp.launch(scatter_add_kernel, dim=indices.shape, inputs=[indices, weights], outputs=[out])


def vecmat_func(
    a: wp.array(dtype=float),
    b: wp.array(dtype=wp.vec3),
    c: wp.array(dtype=wp.mat22),
    d: wp.array(dtype=float),
    e: wp.array(dtype=wp.vec3),
    f: wp.array(dtype=wp.mat22),
):
    wp.launch(vecmat_kernel, dim=a.shape, inputs=[a, b, c], outputs=[d, e, f])


def rowsum_func(matrix: wp.array2d(dtype=float), sums: wp.array1d(dtype=float)):
    # `sums` is in-out: the row sums are added to its incoming values
    wp.launch(rowsum_kernel, dim=matrix.shape, inputs=[matrix, sums])


def grow_func(x: wp.array(dtype=float), s: wp.array(dtype=float)):
    wp.launch(grow_kernel, dim=x.shape, inputs=[x, s])


def reverse_func(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    wp.launch(reverse_kernel, dim=a.shape, inputs=[a], outputs=[out])


def sincos_func(angle: wp.array(dtype=float), sin_out: wp.array(dtype=float), cos_out: wp.array(dtype=float)):
    wp.launch(sincos_kernel, dim=angle.shape, inputs=[angle], outputs=[sin_out, cos_out])


def rowsum_count_func(matrix: wp.array2d(dtype=float), sums: wp.array1d(dtype=float), counts: wp.array1d(dtype=float)):
    wp.launch(rowsum_count_kernel, dim=matrix.shape, inputs=[matrix, sums], outputs=[counts])


def spring_func(
    positions: wp.array(dtype=wp.vec3),
    weights: wp.array(dtype=float),
    stiffness: float,
    energies: wp.array(dtype=float),
    forces: wp.array(dtype=wp.vec3),
):
    wp.launch(spring_kernel, dim=positions.shape, inputs=[positions, weights, stiffness], outputs=[energies, forces])


# Same-signature twins of kernels above, so that tests parametrised over the module kind (kinds.py, next to this file)
# call a JaxKernel and a JaxCallable the same way.


def triple_func(input: wp.array(dtype=float), output: wp.array(dtype=float)):
    wp.launch(triple_kernel, dim=input.shape, inputs=[input], outputs=[output])


def add_func(a: wp.array(dtype=float), b: wp.array(dtype=float), output: wp.array(dtype=float)):
    wp.launch(add_kernel, dim=a.shape, inputs=[a, b], outputs=[output])


def gather_func(indices: wp.array(dtype=int), table: wp.array(dtype=float), out: wp.array(dtype=float)):
    wp.launch(gather_kernel, dim=indices.shape, inputs=[indices, table], outputs=[out])


def scale_sum_square_func(a: wp.array(dtype=float), b: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
    wp.launch(scale_sum_square, dim=a.shape, inputs=[a, b, s], outputs=[out])


# ----------------------------------------------------------------------------------------------------------------------
# Shared test data and helpers (no kernels below)
# ----------------------------------------------------------------------------------------------------------------------

STIFFNESS = 2.0
N_SPRING = 6
ERRORS = (TypeError, ValueError)

BINS = np.array([0, 2, 2, 1, 0, 4, 4, 4], np.int32)
BIN_WEIGHTS = np.arange(1, 9, dtype=np.float32)
N_BINS = 6


def spring_data(n: int = N_SPRING, seed: int = 0, dtype=np.float32) -> tuple[np.ndarray, np.ndarray]:
    """Positions (n, 3) and positive weights (n,) for spring_kernel / spring_func."""
    rng = np.random.default_rng(seed)
    positions = rng.normal(size=(n, 3)).astype(dtype)
    weights = (0.5 + rng.random(n)).astype(dtype)
    return positions, weights


def spring_expected(positions, weights, stiffness=STIFFNESS):
    """NumPy reference of spring_kernel: (energies, forces)."""
    energies = 0.5 * stiffness * weights * np.sum(positions * positions, axis=-1)
    forces = -stiffness * weights[..., None] * positions
    return energies, forces


def vecmat_data(n: int = 4) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Inputs ``a`` (n,), ``b`` (n, 3) and ``c`` (n, 2, 2) for vecmat_kernel / vecmat_func (d = 2 a, e = a b, f = a c)."""
    a = 1.0 + 0.5 * np.arange(n, dtype=np.float32)
    b = np.arange(3 * n, dtype=np.float32).reshape((n, 3))
    c = np.arange(4 * n, dtype=np.float32).reshape((n, 2, 2)) - 7.0
    return a, b, c


@contextlib.contextmanager
def count_lowerings():
    """Count JAX lowerings to an XLA module (one per newly compiled executable) inside the block."""
    from jax._src import util as jax_util

    events = []
    previous = jax_util.test_event_listener

    def listener(name, *args):
        if name == "lower_jaxpr_to_module":
            events.append(name)
        if previous is not None:
            previous(name, *args)

    jax_util.test_event_listener = listener
    try:
        yield lambda: len(events)
    finally:
        jax_util.test_event_listener = previous


@wp.kernel
def scatter_plus_kernel(indices: wp.array(dtype=int), weights: wp.array(dtype=float), out: wp.array(dtype=float)):
    # the same scatter as scatter_add_kernel, spelled ``+=`` (Warp compiles it to the same atomic); ``indices`` is
    # read in the store's index, never written
    i = wp.tid()
    out[indices[i]] += weights[i]


@wp.kernel
def repeated_tid_diagonal(out: wp.array2d(dtype=float)):
    # One name for both thread indices: in a 2-d launch each thread writes a diagonal element, and no thread writes
    # the rest of ``out``, which must therefore start zero-filled.
    i, i = wp.tid()
    out[i, i] = 1.0


@wp.kernel
def grid_fill(out: wp.array2d(dtype=float)):
    # overwrites out[i, j] on every thread: the fill is skipped for a launch over exactly out's 2-d shape, only
    i, j = wp.tid()
    out[i, j] = 1.0
