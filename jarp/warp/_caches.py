"""`clear_caches`: empty every cache jarp keeps, as ``equinox.clear_caches`` does for Equinox's."""

from __future__ import annotations

from ._plan import _cache_table


def clear_caches() -> None:
    """Empty every cache jarp keeps (analyses of kernels, kernel variants, eager executables, unused plans).

    Later calls recompute what they need: the next call of a module traces and judges its kernel again. Compiled
    programs keep working (a plan a live program uses is not released). ``jax.clear_caches()`` clears them too.

    Example:
        ```python
        jarp.warp.clear_caches()
        ```
    """
    _cache_table.clear()
