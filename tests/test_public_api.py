"""`__all__` of `jarp`, `jarp.warp` and `jarp.tree` lists exactly their public names."""

from __future__ import annotations

import ast
import importlib
import inspect
import pathlib
import types

import pytest

PACKAGES = ["jarp", "jarp.warp", "jarp.tree"]


def _explicit_reexports(module: types.ModuleType) -> set[str]:
    """The names the package's `__init__.py` imports (`from x import y as y`, `from . import sub as sub`)."""
    tree = ast.parse(pathlib.Path(inspect.getfile(module)).read_text())
    return {
        alias.asname or alias.name for node in tree.body if isinstance(node, ast.ImportFrom) for alias in node.names
    }


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_the_explicit_reexports(name: str) -> None:
    module = importlib.import_module(name)
    assert len(module.__all__) == len(set(module.__all__)), "duplicates in __all__"
    assert set(module.__all__) == _explicit_reexports(module)


@pytest.mark.parametrize("name", PACKAGES)
def test_every_name_in_all_exists(name: str) -> None:
    module = importlib.import_module(name)
    missing = [n for n in module.__all__ if not hasattr(module, n)]
    assert not missing


@pytest.mark.parametrize("name", PACKAGES)
def test_every_public_attribute_is_in_all(name: str) -> None:
    module = importlib.import_module(name)
    public = {
        n for n, value in vars(module).items() if not n.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public - set(module.__all__) == set()


def test_star_import_gives_the_public_api() -> None:
    namespace: dict[str, object] = {}
    exec("from jarp.warp import *", namespace)
    assert {"jax_kernel", "jax_callable", "to_warp", "types", "JaxKernel"} <= set(namespace)
    assert not any(n.startswith("_") for n in namespace if n != "__builtins__")
