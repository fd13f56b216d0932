"""The probe kernels `_warp_codegen.check_internals` generates code for, to check Warp's record of array accesses.

Imported by the check only, so that importing jarp defines no Warp code for it. Warp device code: the checker reads
Warp's annotations and ``wp.tid()`` as their Python stand-ins.
"""

# pyright: reportInvalidTypeForm=false, reportArgumentType=false, reportAttributeAccessIssue=false

import warp as wp

ACCESS_FOLDED = False


@wp.func
def access_bump(x: wp.array(dtype=float), i: int):
    x[i] = 1.0


def access_store(a: wp.array(dtype=float), b: wp.array(dtype=float)) -> None:
    i = wp.tid()
    b[i] = a[i]


def access_atomic(a: wp.array(dtype=float), b: wp.array(dtype=float)) -> None:
    i = wp.tid()
    wp.atomic_add(a, 0, b[i])


def access_func(a: wp.array(dtype=float), b: wp.array(dtype=float)) -> None:
    i = wp.tid()
    access_bump(x=a, i=i)


@wp.func
def access_scaled(x: float):
    return 2.0 * x


@wp.func_grad(access_scaled)
def access_scaled_grad(x: float, adj_ret: float):
    wp.adjoint[x] += 2.0 * adj_ret


def access_custom(a: wp.array(dtype=float), b: wp.array(dtype=float)) -> None:
    i = wp.tid()
    b[i] = access_scaled(a[i])


def access_folded(a: wp.array(dtype=float), b: wp.array(dtype=float)) -> None:
    i = wp.tid()
    if ACCESS_FOLDED:
        a[i] = 2.0
    b[i] = a[i]
