"""Every code example in the `jarp.tree` docstrings and in docs/tree.md runs and its assertions hold."""

from __future__ import annotations

import inspect
import pathlib
import re
import sys
import textwrap
import types

import pytest

import jarp.tree

_FENCE = re.compile(r"```python\n(.*?)```", re.DOTALL)
_DOCS_PAGE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "tree.md"


def _public_objects() -> list[tuple[str, object]]:
    return [(name, getattr(jarp.tree, name)) for name in sorted(dir(jarp.tree)) if not name.startswith("_")]


def _examples(text: str) -> list[str]:
    return [textwrap.dedent(block) for block in _FENCE.findall(text)]


def _run(code: str, name: str) -> None:
    # Run as a real module: dataclasses (hence eqx.Module) look their module up in sys.modules.
    module = types.ModuleType(name)
    sys.modules[name] = module
    try:
        exec(compile(code, f"<{name}>", "exec"), module.__dict__)
    finally:
        del sys.modules[name]


def test_public_names_are_documented() -> None:
    missing = [name for name, obj in _public_objects() if inspect.getmodule(obj) and not inspect.getdoc(obj)]
    assert missing == []
    for name, obj in _public_objects():
        if callable(obj) and not isinstance(obj, type):
            doc = inspect.getdoc(obj) or ""
            assert "Example:" in doc, name
            assert "Returns:" in doc or "Yields:" in doc, name
            assert "Args:" in doc or not inspect.signature(obj).parameters, name


@pytest.mark.parametrize(
    ("name", "code"),
    [
        pytest.param(name, code, id=f"{name}-{i}")
        for name, obj in _public_objects()
        for i, code in enumerate(_examples(inspect.getdoc(obj) or ""))
    ],
)
def test_docstring_example(name: str, code: str) -> None:
    _run(code, f"jarp_tree_example_{name}")


_DOCS_EXAMPLES = _examples(_DOCS_PAGE.read_text())


def test_docs_page_has_examples() -> None:
    assert len(_DOCS_EXAMPLES) >= 5
    assert "| `kups.core.utils.jax` |" in _DOCS_PAGE.read_text()


@pytest.mark.parametrize("index", range(len(_DOCS_EXAMPLES)))
def test_docs_page_example(index: int) -> None:
    _run(_DOCS_EXAMPLES[index], f"jarp_tree_docs_example_{index}")
