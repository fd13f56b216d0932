"""Write the content text of the plans of one traced function, or rebuild a text, in a fresh process.

Run by ``tests/warp/plan/test_content.py``.

``python content_script.py describe DIR``: imports ``describe_mod`` from ``DIR``, lowers a function calling its
kernel and prints the description of each plan it registered (one per line, sorted, after ``>>> ``).
``python content_script.py rebuild DIR [--no-import]``: reads descriptions from stdin and prints, per line (after ``>>> ``), ``ok``
or the reason of the `ContentError` and its message.
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp

from jarp.warp import jax_kernel
from jarp.warp._ffi._registry import registry
from jarp.warp._plan import _content


def main() -> None:
    mode, directory = sys.argv[1], sys.argv[2]
    sys.path.insert(0, directory)
    if "--no-import" not in sys.argv:
        import describe_mod

        m = jax_kernel(describe_mod.shift_kernel, enable_backward=True)
        lowered = (
            jax.jit(jax.value_and_grad(lambda a, s: m(a, s, 0.5)[0].sum(), argnums=(0, 1)))
            .trace(jnp.arange(4.0, dtype=jnp.float32), jnp.float32(2.0))
            .lower()
        )
        assert lowered is not None
    if mode == "describe":
        for text in sorted(_content.content_text(plan) for _, plan in registry.items()):
            print(f">>> {text}")
        return
    for line in sys.stdin.read().splitlines():
        try:
            _content.rebuild(line)
            print(">>> ok")
        except _content.ContentError as e:
            print(f">>> {e.reason}: {e}")


if __name__ == "__main__":
    main()
