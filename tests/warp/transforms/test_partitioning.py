"""Batch partitioning: batched calls partitioned along their batch dims under ``jax.jit`` (no all-gather)."""

import dataclasses
import os
import sys

import jax
import jax.numpy as jnp
import pytest

from jarp.warp import jax_kernel
from jarp.warp._ffi._registry import registry
from jarp.warp._plan import _content
from tests.support import forked
from tests.support import kernels as k
from tests.support.paths import REPO

pytestmark = pytest.mark.launch_paths  # also run on the Python launch path (noxfile.py)


@pytest.mark.native_launches  # counts the calls that reach Python
@pytest.mark.parametrize("partitioner", ["gspmd", "shardy"])
def test_sharded_batches_run_where_they_live(partitioner: str) -> None:
    """Auto and explicit meshes: one and two batch dims, broadcast inputs, a callable, grad, an unbatched call; grad
    with an operand also sharded off the batch (explicit)."""
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    proc = forked.run(
        [sys.executable, "-m", "tests.support.partition_script", partitioner], env=env, cwd=REPO, timeout=600
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "partition ok" in proc.stdout
    assert proc.stdout.count(" ok") == 12, proc.stdout


def test_a_single_device_program_lowers_as_before() -> None:
    """No batch-partitioning attributes and no ``partitioned`` field: the description, and so the cache key, as before."""
    add = jax_kernel(k.add_kernel)
    w = jnp.arange(4.0, dtype=jnp.float32)
    text = jax.jit(jax.vmap(lambda r: add(r, w)[0])).lower(jnp.ones((3, 4), jnp.float32)).as_text()
    assert "jarp_warp_call" in text
    assert "num_batch_dims" not in text
    assert "sdy.sharding_rule" not in text
    assert "partitioned" not in text
    assert "tensor<3x4xf32>" in text
    assert "tensor<3x1x4xf32>" not in text


def _batched_plan():
    add = jax_kernel(k.add_kernel)
    w = jnp.arange(4.0, dtype=jnp.float32)
    lowered = jax.jit(jax.vmap(lambda r: add(r, w)[0])).lower(jnp.ones((3, 4), jnp.float32))
    plans = [p for p in registry.plans() if p.target is k.add_kernel and p.batch_shape == (3,)]
    assert plans, "the lowering registered the batched plan"
    return plans[0], lowered


def test_partitioned_plans_describe_and_rebuild() -> None:
    plan, _lowered = _batched_plan()
    part = dataclasses.replace(plan, partitioned=True)
    assert part.call_operand_shape(0) == (3, 1, 4)
    assert part.call_operand_shape(1) == (4,)
    assert part.call_result_shape(0) == (3, 1, 4)
    text = _content.content_text(part)
    assert '"partitioned":true' in text
    assert '"partitioned"' not in _content.content_text(plan)
    assert _content.rebuild(text) == part


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda d: d.update(partitioned=False), "must be true where present"),
        (lambda d: d.update(batch_shape=[], operand_batch=[[], []]), "needs batch dims"),
        (
            lambda d: d.update(batch_shape=[3, 2], operand_batch=[[True, False], [False, False]]),
            "every batch dim or none",
        ),
    ],
)
def test_partitioned_descriptions_are_checked(edit, match) -> None:
    import json

    plan, _lowered = _batched_plan()
    doc = json.loads(_content.content_text(dataclasses.replace(plan, partitioned=True)))
    edit(doc)
    with pytest.raises(_content.ContentError, match=match):
        _content.rebuild(json.dumps(doc))
