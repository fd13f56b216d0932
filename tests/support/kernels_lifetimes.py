"""Kernels made anew by a function, each under the same key: the newest replaces the others in Warp's module (the
lifetime tests of `tests/warp/ffi/`)."""

from __future__ import annotations

from typing import Any

import warp as wp


def make_scale_kernel(i: int) -> Any:
    """A kernel ``out = a * i``, new at each call, always under key ``scale_by``."""

    @wp.kernel
    def scale_by(a: wp.array(dtype=float), out: wp.array(dtype=float)):
        t = wp.tid()
        out[t] = a[t] * float(i)

    return scale_by
