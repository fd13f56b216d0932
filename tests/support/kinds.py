"""The two module kinds, for tests written once and parametrised over both.

A `Kind` builds a `jarp.warp.JaxKernel` (from a kernel) or a `jarp.warp.JaxCallable` (from an annotated Python
function that launches that kernel) for a role such as ``"spring"`` or ``"scale"``: both targets of a role have the
same parameters, so a test calls either module the same way. Kernels that need explicit launch dims (the callable
twins launch over their first input) are not roles.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from jarp.warp import JaxCallable, JaxKernel, jax_callable, jax_kernel
from jarp.warp._module._base import AbstractWarpModule
from tests.support import kernels as k

ROLES = (
    "add",
    "gather",
    "grow",
    "reverse",
    "rowsum",
    "rowsum_count",
    "scale",
    "scale_sum_square",
    "scatter_add",
    "sincos",
    "spring",
    "triple",
    "vecmat",
)


@dataclasses.dataclass(frozen=True)
class Kind:
    """One module kind: its class, its factory and its target per role.

    Attributes:
        name: ``"kernel"`` or ``"callable"`` (the pytest id).
        cls: the module class.
        make: the factory (``jax_kernel`` or ``jax_callable``).
        targets: the kernel or function for each role.

    Example:
        >>> KERNEL("scale")(x, 2.0)  # jax_kernel(k.scale_kernel)(x, 2.0)
    """

    name: str
    cls: type[AbstractWarpModule]
    make: Callable[..., Any]
    targets: Mapping[str, Any]

    def __call__(self, role: str, **options: Any) -> AbstractWarpModule:
        """Build the module of this kind for ``role`` with ``options``."""
        return self.make(self.targets[role], **options)

    def __repr__(self) -> str:
        return self.name


def _kernel_target(role: str) -> Any:
    return getattr(k, role) if role == "scale_sum_square" else getattr(k, f"{role}_kernel")


KERNEL = Kind("kernel", JaxKernel, jax_kernel, {role: _kernel_target(role) for role in ROLES})
CALLABLE = Kind("callable", JaxCallable, jax_callable, {role: getattr(k, f"{role}_func") for role in ROLES})
KINDS = (KERNEL, CALLABLE)

# Parametrises a test over both kinds (argument ``kind``).
over_kinds = pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
