"""Every use of JAX's private internals (``jax._src``) in jarp.

jarp's primitive declares a side effect (JAX has no public API to declare a
primitive's effects) and types its results inside ``shard_map`` with the manual
mesh axes they vary over. Both need a few private names; they all live here, so
a JAX upgrade is a one-file change, and `tests/warp/compat/test_upstream_internals.py` checks
that each one still has the shape jarp relies on.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.core  # `import jax` loads it, but only this import declares it to type checkers
from jax._src import core as _core
from jax._src import effects as _effects
from jax._src import mesh as _mesh
from jax._src import util as _util

Effect = _effects.Effect


def register_effect(effect_type: type[Any]) -> None:
    """Let ``effect_type`` through lowering, control flow, custom derivatives and remat (as ``jax.ffi`` does)."""
    _effects.lowerable_effects.add_type(effect_type)
    _effects.control_flow_allowed_effects.add_type(effect_type)
    _effects.custom_derivatives_allowed_effects.add_type(effect_type)
    _effects.remat_allowed_effects.add_type(effect_type)


def varying_aval(shape: tuple[int, ...], dtype: object, varying: frozenset[Any]) -> jax.core.ShapedArray:
    """An abstract value that varies over the manual mesh axes ``varying`` (inside ``shard_map``)."""
    mat = _core.ManualAxisType(varying=varying, unreduced=frozenset(), reduced=frozenset())
    sharding = jax.sharding.NamedSharding(_mesh.get_abstract_mesh(), jax.sharding.PartitionSpec())
    return jax.core.ShapedArray(shape, dtype, sharding=sharding, manual_axis_type=mat)


def clear_with_jax(cache: object, name: str) -> None:
    """Have ``jax.clear_caches()`` call ``cache.cache_clear()`` too (JAX holds ``cache`` weakly: keep it alive)."""
    _util.register_cache(cache, name)


def weak_cache_key_type(cls: type[Any]) -> None:
    """Have JAX's equation caches (``multi_weakref_lru_cache``: abstract evaluation) hold ``cls`` params weakly.

    Otherwise JAX keeps the last 2048 primitive parameters it evaluated alive until
    ``jax.clear_caches()``; for jarp's ``Plan`` that would keep every kernel it ran alive.
    """
    _util.weakref_cache_key_types.add(cls)


# What JAX raises for forward mode through a ``jax.custom_vjp`` function (`check_internals` keeps it honest).
_CUSTOM_VJP_FORWARD_MODE = "can't apply forward-mode autodiff (jvp) to a custom_vjp function"


def is_custom_vjp_forward_mode_error(error: BaseException) -> bool:
    """Whether ``error`` is JAX's refusal of forward mode through a ``jax.custom_vjp`` function."""
    return isinstance(error, TypeError) and _CUSTOM_VJP_FORWARD_MODE in str(error)


def lowering_for_export(ctx: Any) -> bool:
    """Whether a lowering rule's ``ctx`` lowers for ``jax.export`` (a program that must mean the same in any process)."""
    return bool(ctx.module_context.lowering_parameters.for_export)


def sharding_devices(ctx: Any) -> int:
    """How many devices XLA partitions the program a lowering rule's ``ctx`` lowers (1: none; shard_map, pmap: 1).

    Only ``jax.jit``'s sharding context counts: inside ``shard_map`` (manual axes) or ``pmap`` each device runs
    the call as written.
    """
    from jax._src import sharding_impls

    axis_context = ctx.module_context.axis_context
    if type(axis_context) is not sharding_impls.ShardingContext:
        return 1
    return int(axis_context.num_devices)


def sdy_sharding_rule(ctx: Any, operands: list[list[str]], results: list[list[str]]) -> Any:
    """Shardy's sharding rule attribute for a custom call: each operand's and result's dims as factor names.

    Types are the call's (``ctx.avals_in``/``ctx.avals_out``, as the custom call has them).
    """
    from jax._src.custom_partitioning_sharding_rule import sdy_sharding_rule_to_mlir
    from jax.experimental.custom_partitioning import ArrayMapping, SdyShardingRule
    from jax.interpreters import mlir

    rule = SdyShardingRule(tuple(ArrayMapping(*m) for m in operands), tuple(ArrayMapping(*m) for m in results))
    types_in = [mlir.aval_to_ir_type(ctx.module_context, a) for a in ctx.avals_in]
    types_out = [mlir.aval_to_ir_type(ctx.module_context, a) for a in ctx.avals_out]
    return sdy_sharding_rule_to_mlir(rule, types_in, types_out)


def check_internals() -> None:
    """Raise `AssertionError` if a JAX internal jarp relies on has changed shape."""
    for name in (
        "lowerable_effects",
        "control_flow_allowed_effects",
        "custom_derivatives_allowed_effects",
        "remat_allowed_effects",
    ):
        assert hasattr(_effects, name), f"jax._src.effects lost {name}"
    mat = _core.ManualAxisType(varying=frozenset(), unreduced=frozenset(), reduced=frozenset())
    assert mat.varying == frozenset(), "jax._src.core.ManualAxisType changed shape"
    assert callable(_mesh.get_abstract_mesh), "jax._src.mesh.get_abstract_mesh is gone"
    assert callable(_util.register_cache), "jax._src.util.register_cache is gone"
    assert callable(_util.clear_all_caches), "jax._src.util.clear_all_caches is gone"
    assert isinstance(_util.weakref_cache_key_types, set), "jax._src.util.weakref_cache_key_types changed"
    from jax._src.interpreters import mlir

    assert "for_export" in {f.name for f in dataclasses.fields(mlir.LoweringParameters)}, (
        "mlir.LoweringParameters lost for_export (lowering_for_export)"
    )
    assert "lowering_parameters" in {f.name for f in dataclasses.fields(mlir.ModuleContext)}, (
        "mlir.ModuleContext lost lowering_parameters (lowering_for_export)"
    )

    from jax._src import custom_partitioning_sharding_rule, sharding_impls

    assert {f.name for f in dataclasses.fields(sharding_impls.ShardingContext)} >= {"num_devices"}, (
        "jax._src.sharding_impls.ShardingContext lost num_devices (sharding_devices)"
    )
    assert "axis_context" in {f.name for f in dataclasses.fields(mlir.ModuleContext)}, (
        "mlir.ModuleContext lost axis_context (sharding_devices)"
    )
    assert callable(custom_partitioning_sharding_rule.sdy_sharding_rule_to_mlir), (
        "jax._src.custom_partitioning_sharding_rule.sdy_sharding_rule_to_mlir is gone (sdy_sharding_rule)"
    )

    @jax.custom_vjp
    def f(x: object) -> Any:
        return x

    f.defvjp(lambda x: (x, None), lambda _, g: (g,))
    try:
        jax.jvp(f, (1.0,), (1.0,))
    except TypeError as e:
        if not is_custom_vjp_forward_mode_error(e):
            raise AssertionError(f"JAX's forward-mode refusal of a custom_vjp changed: {e}") from e
    else:
        raise AssertionError("JAX now applies forward mode to a custom_vjp function: jarp's message can go")
