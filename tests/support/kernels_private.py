"""Accumulating kernels for the privatised split launches (`tests/warp/ffi/test_privatised.py`)."""

import warp as wp


@wp.kernel
def scatter(
    cells: wp.array(dtype=wp.vec4i),
    x: wp.array(dtype=float),
    total: wp.array(dtype=float),
    low: wp.array(dtype=float),
    high: wp.array(dtype=float),
    count: wp.array(dtype=int),
):
    """A FEM-like element kernel: each cell's value scattered onto its four vertices, four ways."""
    c = wp.tid()
    cell = cells[c]
    v = wp.sin(x[c]) + x[c]
    for k in range(4):
        wp.atomic_add(total, cell[k], v)
        wp.atomic_min(low, cell[k], v)
        wp.atomic_max(high, cell[k], v)
        count[cell[k]] += 1


@wp.kernel
def scatter_vec(cells: wp.array(dtype=wp.vec4i), x: wp.array(dtype=wp.vec3d), out: wp.array(dtype=wp.vec3d)):
    c = wp.tid()
    cell = cells[c]
    for k in range(4):
        out[cell[k]] -= x[c] * wp.float64(k + 1)


@wp.kernel
def accumulate_in_out(cells: wp.array(dtype=wp.vec4i), x: wp.array(dtype=float), acc: wp.array(dtype=float)):
    c = wp.tid()
    cell = cells[c]
    for k in range(4):
        wp.atomic_add(acc, cell[k], x[c])


@wp.kernel
def long_threads(x: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
    """Few threads, each long (a loop Warp does not unroll): worth splitting by its measured cost."""
    i = wp.tid()
    v = x[i]
    for _ in range(n):
        v = wp.sin(v) * 0.9 + 0.1
    wp.atomic_add(out, i % 16, v)


@wp.kernel
def exchange(idx: wp.array(dtype=int), x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_exch(out, idx[i], x[i])


@wp.kernel
def compare_and_swap(idx: wp.array(dtype=int), out: wp.array(dtype=int)):
    i = wp.tid()
    wp.atomic_cas(out, idx[i], 0, i)


@wp.kernel
def old_value_used(
    idx: wp.array(dtype=int), x: wp.array(dtype=float), out: wp.array(dtype=float), y: wp.array(dtype=float)
):
    i = wp.tid()
    y[i] = wp.atomic_add(out, idx[i], x[i])


@wp.kernel
def accumulated_and_read(idx: wp.array(dtype=int), x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(out, idx[i], x[i] + out[0])


@wp.func
def add_into(out: wp.array(dtype=float), j: int, v: float):
    wp.atomic_add(out, j, v)


@wp.kernel
def accumulated_in_a_function(idx: wp.array(dtype=int), x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    add_into(out, idx[i], x[i])


@wp.kernel
def mixed_combinations(idx: wp.array(dtype=int), x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(out, idx[i], x[i])
    wp.atomic_max(out, idx[i], x[i])


@wp.kernel
def half_sums(idx: wp.array(dtype=int), x: wp.array(dtype=wp.float16), out: wp.array(dtype=wp.float16)):
    i = wp.tid()
    wp.atomic_add(out, idx[i], x[i])


@wp.func
def add_what_is_there(out: wp.array(dtype=float), j: int, v: float):
    wp.atomic_add(out, j, v + out[0])


@wp.kernel
def read_in_a_function(idx: wp.array(dtype=int), x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    add_what_is_there(out, idx[i], x[i])


@wp.func
def keep_max(out: wp.array(dtype=float), j: int, v: float):
    wp.atomic_max(out, j, v)


@wp.kernel
def two_combinations_through_functions(idx: wp.array(dtype=int), x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    add_into(out, idx[i], x[i])
    keep_max(out, idx[i], x[i])


@wp.kernel
def long_threads_own(x: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
    """As `long_threads`, each thread writing its own element (race-free: split by its measured cost)."""
    i = wp.tid()
    v = x[i]
    for _ in range(n):
        v = wp.sin(v) * 0.9 + 0.1
    out[i] = v


# -- reverse passes (Warp's adjoints of accumulating kernels) --


@wp.struct
class Springs:
    edges: wp.array(dtype=wp.vec2i)
    rest: wp.array(dtype=wp.float64)


@wp.kernel
def spring_energy(
    edges: wp.array(dtype=wp.vec2i),
    x: wp.array(dtype=wp.vec3d),
    rest: wp.array(dtype=wp.float64),
    k: wp.float64,
    energy: wp.array(dtype=wp.float64),
):
    """A mass-spring energy summed into one element: its adjoint scatters into both ends of each spring."""
    e = wp.tid()
    a = edges[e]
    d = wp.length(x[a[1]] - x[a[0]]) - rest[e]
    wp.atomic_add(energy, 0, wp.float64(0.5) * k * d * d)


@wp.kernel
def spring_energy_struct(
    springs: Springs, x: wp.array(dtype=wp.vec3d), k: wp.float64, energy: wp.array(dtype=wp.float64)
):
    """`spring_energy` with the mesh in a struct (as FEM libraries pass it)."""
    e = wp.tid()
    a = springs.edges[e]
    d = wp.length(x[a[1]] - x[a[0]]) - springs.rest[e]
    wp.atomic_add(energy, 0, wp.float64(0.5) * k * d * d)


@wp.kernel
def own_and_neighbour(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    """Race-free forward (each thread stores its own element) whose adjoint accumulates into a neighbour's."""
    i = wp.tid()
    j = (i + 1) % x.shape[0]
    out[i] = x[i] * x[j]


@wp.kernel
def stored_then_read(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = x[i]
    out[i] = out[i] * 2.0


@wp.func
def doubled(v: float):
    return 2.0 * v


@wp.func_grad(doubled)
def doubled_grad(v: float, adj_ret: float):
    wp.adjoint[v] += 2.0 * adj_ret


@wp.kernel
def custom_gradient(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = doubled(x[i])
