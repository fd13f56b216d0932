"""Kernels that only read their input ``x`` through constructs jarp once counted as writes, for
``tests/warp/plan/test_read_only_uses.py``: each is accepted with ``x`` an input, and gives what ``wp.launch`` gives.

Python's ``len`` and ``print`` (Warp calls its builtins of those names), ``type(s)(...)`` (a constructor of the struct's
type), an array's truth test (``if x:``), a read-only ``@wp.func`` overload that calls another overload of its name
(as ``warp.sparse``'s ``bsr_row_index`` does), a ``@wp.func`` passed as an argument (``wp.Function``), and the dense
linear-algebra builtins (each writes one array: ``C``, ``L``, ``x``).
"""

import warp as wp

# Each dense builtin reads and writes whole small matrices from one thread.
DENSE_N = 3


@wp.kernel
def len_reads_x(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i] + float(len(x))


@wp.kernel
def truth_test_reads_x(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    if x:
        y[i] = x[i] + 1.0


@wp.struct
class Pair:
    a: float
    b: float


@wp.kernel
def type_constructs_a_copy(s: Pair, x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    t = type(s)(s.a * 2.0, s.b)
    y[i] = t.a + t.b + x[i]


@wp.func
def start_of(offsets: wp.array(dtype=int), i: int) -> int:
    return offsets[i]


@wp.func
def start_of(offsets: wp.array(dtype=int), i: int, counts: wp.array(dtype=int)) -> int:  # noqa: F811 (an overload)
    start = start_of(offsets, i)
    if counts:
        start = start + counts[i]
    return start


@wp.kernel
def overload_calls_overload(offsets: wp.array(dtype=int), counts: wp.array(dtype=int), y: wp.array(dtype=int)):
    i = wp.tid()
    y[i] = start_of(offsets, i, counts)


@wp.func
def read_at(arr: wp.array(dtype=float), i: int) -> float:
    return arr[i]


@wp.func
def apply_to(g: wp.Function, arr: wp.array(dtype=float), i: int) -> float:
    return g(arr, i)


@wp.kernel
def function_argument_reads_x(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    # the resolver cannot follow a function passed as an argument; Warp's generated code calls `read_at`
    i = wp.tid()
    y[i] = apply_to(read_at, x, i) * 3.0


@wp.kernel
def dense_gemm_writes_c(a: wp.array(dtype=float), b: wp.array(dtype=float), c: wp.array(dtype=float)):
    wp.dense_gemm(DENSE_N, DENSE_N, DENSE_N, 0, 1, a, b, c)


@wp.kernel
def dense_chol_writes_l(a: wp.array(dtype=float), l: wp.array(dtype=float)):  # noqa: E741 (Warp's name)
    wp.dense_chol(DENSE_N, a, 0.5, l)


@wp.kernel
def dense_subs_writes_x(l: wp.array(dtype=float), b: wp.array(dtype=float), x: wp.array(dtype=float)):  # noqa: E741
    wp.dense_subs(DENSE_N, l, b, x)


@wp.kernel
def dense_solve_writes_x(
    a: wp.array(dtype=float),
    l: wp.array(dtype=float),  # noqa: E741
    b: wp.array(dtype=float),
    x: wp.array(dtype=float),
):
    wp.dense_solve(n=DENSE_N, A=a, L=l, b=b, x=x)  # by keyword: the output is still found
