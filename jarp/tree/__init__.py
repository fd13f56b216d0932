"""Pytree and transformation helpers for Equinox models built around Warp kernels.

`jarp.tree` collects the small utilities that code mixing Equinox Modules, JAX transformations
and opaque kernels keeps reaching for: stacking and slicing pytrees of Modules, aligned maps,
typed wrappers of JAX transformations, sequential batching with derivatives, guards against
tracing and differentiation, switchable Module validation, compensated summation, PRNG key
streams and fast integer membership. It mirrors the names of `kups.core.utils.jax`, with
Equinox (`eqx.Module`, `eqx.field(static=True)`) taking the place of kups' pytree dataclasses.
It depends on JAX, Equinox, jaxtyping and NumPy only.
"""

from ._leafwise import ScatterArgs as ScatterArgs
from ._leafwise import tree_scatter_set as tree_scatter_set
from ._leafwise import tree_where_broadcast_last as tree_where_broadcast_last
from ._leafwise import tree_zeros_like as tree_zeros_like
from ._map import SupportsTreeMatch as SupportsTreeMatch
from ._map import tree_map as tree_map
from ._non_differentiable import non_differentiable as non_differentiable
from ._numerics import isin as isin
from ._numerics import kahan_summation as kahan_summation
from ._post_init import no_post_init as no_post_init
from ._post_init import skip_post_init_if_disabled as skip_post_init_if_disabled
from ._random import key_chain as key_chain
from ._sequential_vmap import sequential_vmap_with_vjp as sequential_vmap_with_vjp
from ._stack import tree_concat as tree_concat
from ._stack import tree_stack as tree_stack
from ._structure import tree_structure as tree_structure
from ._tracing import NotJaxCompatibleError as NotJaxCompatibleError
from ._tracing import is_traced as is_traced
from ._tracing import no_jax_tracing as no_jax_tracing
from ._transforms import jit as jit
from ._transforms import linearize as linearize
from ._transforms import shard_map as shard_map
from ._transforms import vectorize as vectorize

__all__ = [
    "NotJaxCompatibleError",
    "ScatterArgs",
    "SupportsTreeMatch",
    "is_traced",
    "isin",
    "jit",
    "kahan_summation",
    "key_chain",
    "linearize",
    "no_jax_tracing",
    "no_post_init",
    "non_differentiable",
    "sequential_vmap_with_vjp",
    "shard_map",
    "skip_post_init_if_disabled",
    "tree_concat",
    "tree_map",
    "tree_scatter_set",
    "tree_stack",
    "tree_structure",
    "tree_where_broadcast_last",
    "tree_zeros_like",
    "vectorize",
]
