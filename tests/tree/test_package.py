"""`jarp.tree` exports the agreed names and depends on JAX, Equinox, jaxtyping and NumPy only."""

from __future__ import annotations

import ast
import pathlib
import sys

import jarp.tree

_PACKAGE = pathlib.Path(jarp.tree.__file__).parent
_ALLOWED_THIRD_PARTY = {"jax", "jaxlib", "equinox", "jaxtyping", "numpy"}

EXPECTED = {
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
}


def test_public_names() -> None:
    public = {name for name in dir(jarp.tree) if not name.startswith("_")}
    assert public == EXPECTED


def _imported_roots(path: pathlib.Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            roots.add(node.module.split(".")[0])
    return roots


def test_imports_only_allowed_dependencies() -> None:
    files = sorted(_PACKAGE.glob("*.py"))
    assert len(files) > 5
    for path in files:
        third_party = _imported_roots(path) - set(sys.stdlib_module_names) - {"__future__"}
        assert third_party <= _ALLOWED_THIRD_PARTY, (path.name, third_party)
        source = path.read_text()
        assert "import warp" not in source, path.name
        assert "jarp.warp" not in source, path.name
