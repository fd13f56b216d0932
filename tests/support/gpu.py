"""What the GPU tests share: whether a CUDA device is visible, the ``requires_gpu`` mark and the ``cuda_device``
fixture (tests marked ``gpu`` skip without a device, or fail with ``JARP_REQUIRE_GPU=1``)."""

from __future__ import annotations

import os
from typing import Any

import jax
import pytest
import warp as wp

REQUIRE_GPU = os.environ.get("JARP_REQUIRE_GPU", "") not in ("", "0")


def cuda_available() -> bool:
    """Whether Warp and JAX both see a CUDA device."""
    if not wp.is_cuda_available():
        return False
    try:
        return bool(jax.devices("cuda"))
    except RuntimeError:
        return False


requires_gpu = pytest.mark.skipif(
    not REQUIRE_GPU and not cuda_available(),
    reason="needs a CUDA GPU visible to both Warp and JAX (jax[cuda]); run `JARP_REQUIRE_GPU=1 pytest -m gpu` there",
)


@pytest.fixture
def cuda_device() -> Any:
    """JAX's first CUDA device; fails the test where there is none (``JARP_REQUIRE_GPU=1`` without a GPU)."""
    if not cuda_available():
        pytest.fail("JARP_REQUIRE_GPU is set, but Warp or JAX sees no CUDA device (is jax[cuda] installed?)")
    return jax.devices("cuda")[0]
