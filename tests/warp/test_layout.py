"""The package's layout is its call flow: stages import only downwards, nothing imports in a cycle.

The top level of ``jarp/warp/`` is the public face: each file there holds a family of public names, and the
package's ``__init__`` imports public names only from those files and from the geometry package's ``__init__``.
The machinery the module kinds share (`_module`) and the geometry package sit above the stages; no stage imports
them, and nothing outside ``jarp.warp`` imports a stage.

``jarp.warp`` is split into stages (see each subpackage's docstring): the upstream stage (`_upstream`, private
Warp/JAX/XLA names) imports nothing of jarp; the plan stage (`_plan`) imports only upstream; the FFI stage
(`_ffi`) imports the plan stage and upstream; the JAX stage (`_jax`) imports the FFI stage and below; the
public modules at the top import anything. Every import statement counts, also those inside functions. Warp's
private names (`warp._src`, ``_shape_``, ``_wp_scalar_type_``, ``.adj``) are read in `_upstream` only, so that a Warp
upgrade is a change there.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import jarp.warp

PACKAGE = Path(jarp.warp.__file__).parent
# Lower rank = lower stage; a module may import modules of its own rank or below.
STAGES = {"_upstream": 0, "_plan": 1, "_ffi": 2, "_jax": 3}
TOP = 4
# Packages above the stages, never imported by a stage: the machinery the two module kinds share (`_module`) and
# each feature that spans stages (`_geometry`, whose ``__init__`` is also the public face of its pytrees).
FEATURES = {"_geometry", "_module"}


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _rank(module: str) -> int:
    parts = module.split(".")
    assert parts[:2] == ["jarp", "warp"], module
    return STAGES.get(parts[2], TOP) if len(parts) > 2 else TOP


def _imports(path: Path) -> set[str]:
    """The jarp modules ``path`` imports (``from . import x`` counts as importing the module ``x`` if it is one)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("jarp"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.startswith("jarp"):
                target = node.module
            else:
                continue
            found.add(target)
            for alias in node.names:  # `from . import _dtypes` imports a module
                candidate = f"{target}.{alias.name}"
                rel = Path(*candidate.split(".")[1:])
                if (PACKAGE.parent / rel).with_suffix(".py").exists() or (
                    PACKAGE.parent / rel / "__init__.py"
                ).exists():
                    found.add(candidate)
    found.discard(name)
    return found


def _graph() -> dict[str, set[str]]:
    return {_module_name(p): _imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


GRAPH = _graph()


def test_the_stages_are_there() -> None:
    subpackages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert subpackages == set(STAGES) | FEATURES
    for stage in STAGES:
        doc = " ".join((ast.get_docstring(ast.parse((PACKAGE / stage / "__init__.py").read_text())) or "").split())
        assert "Receives:" in doc, f"{stage}: its docstring must say what the stage receives"
        assert "Never imports" in doc, f"{stage}: its docstring must say what the stage never imports"


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if _rank(m) < TOP))
def test_a_stage_imports_only_its_own_stage_and_lower_ones(module: str) -> None:
    upward = sorted(m for m in GRAPH[module] if m.startswith("jarp.warp") and _rank(m) > _rank(module))
    outside = sorted(m for m in GRAPH[module] if not m.startswith("jarp.warp"))
    assert not upward, f"{module} imports a higher stage: {upward}"
    assert not outside, f"{module} imports jarp outside jarp.warp: {outside}"


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if _rank(m) == 0))
def test_upstream_imports_nothing_of_jarp(module: str) -> None:
    # but modules of its own stage (the lock table, the Warp modules one concern uses of another)
    others = {m for m in GRAPH[module] if not m.startswith("jarp.warp._upstream")}
    assert not others, f"{module} imports {sorted(others)}"


def test_no_import_cycle() -> None:
    # Package __init__ modules import their children; an edge child -> package is a cycle only through them.
    graph = {m: {d for d in deps if d in GRAPH and not m.startswith(d + ".")} for m, deps in GRAPH.items()}
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                cycle = [*path[path.index(d) :], d]
                pytest.fail(f"import cycle: {' -> '.join(cycle)}")
            if d not in state:
                visit(d)
        path.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


# Warp's private names: its `warp._src` modules, the attributes of its types (``_shape_``, ``_wp_scalar_type_``...)
# and of its kernels (``.adj``). ctypes' own ``_fields_`` is public ctypes API.
_WARP_PRIVATE_ATTR = re.compile(r"^(_wp_\w+_|_shape_|_length_|adj)$")


def _warp_private_uses(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and _WARP_PRIVATE_ATTR.match(node.attr):
            found.append(f"line {node.lineno}: .{node.attr}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("warp._src"):
            found.append(f"line {node.lineno}: from {node.module}")
        elif isinstance(node, ast.Import):
            found.extend(f"line {node.lineno}: import {a.name}" for a in node.names if a.name.startswith("warp._src"))
    return found


@pytest.mark.parametrize(
    "path", [p for p in sorted(PACKAGE.rglob("*.py")) if "_upstream" not in p.parts], ids=lambda p: p.name
)
def test_warps_private_names_are_read_only_in_upstream(path: Path) -> None:
    assert _warp_private_uses(path) == [], (
        f"{path.relative_to(PACKAGE)}: read Warp's internals in an `_upstream._warp_*` module"
    )


def test_the_private_name_checker_sees_them(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from warp._src import codegen\nimport warp._src.types\nx = t._wp_scalar_type_, t._shape_, k.adj\n"
    )
    assert len(_warp_private_uses(probe)) == 5


def test_the_checker_sees_imports() -> None:
    # The tests above must be able to fail: the graph holds known downward imports of each stage.
    assert "jarp.warp._upstream._warp_types" in GRAPH["jarp.warp._plan._binding"]
    assert "jarp.warp._plan._values" in GRAPH["jarp.warp._ffi._executors"]
    assert "jarp.warp._ffi._target" in GRAPH["jarp.warp._jax._lowering"]
    assert _rank("jarp.warp._jax._lowering") > _rank("jarp.warp._ffi._target") > _rank("jarp.warp._plan._values")


def _private_names_imported(path: Path, name: str | None = None) -> list[str]:
    """The underscore names (not modules) ``path`` (the module ``name``) imports from another jarp module, except
    from `_upstream`."""
    name = _module_name(path) if name is None else name
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = package.split(".")
            target = ".".join(base[: len(base) - (node.level - 1)] + ([node.module] if node.module else []))
        elif (node.module or "").startswith("jarp"):
            target = node.module or ""
        else:
            continue
        if "._upstream" in target:
            continue
        for alias in node.names:
            rel = Path(*f"{target}.{alias.name}".split(".")[1:])
            is_module = (PACKAGE.parent / rel).with_suffix(".py").exists() or (PACKAGE.parent / rel).is_dir()
            if alias.name.startswith("_") and not is_module:
                found.append(f"line {node.lineno}: {alias.name} from {target}")
    return found


@pytest.mark.parametrize("path", sorted(PACKAGE.parent.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_no_underscore_name_is_imported_across_modules(path: Path) -> None:
    # A name another module needs is that module's interface: named without an underscore (modules themselves are
    # private by their own names); Warp's and JAX's internals are reached through `_upstream` only
    assert _private_names_imported(path) == []


def test_the_underscore_name_checker_sees_them(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("from ._values import _hidden, Plan\nfrom . import _values\nfrom .._upstream._x import _ok\n")
    found = _private_names_imported(probe, "jarp.warp._plan._probe")
    assert found == ["line 1: _hidden from jarp.warp._plan._values"]


TOP_FILES = sorted(p for p in PACKAGE.glob("*.py") if p.name != "__init__.py")


@pytest.mark.parametrize("path", TOP_FILES, ids=lambda p: p.name)
def test_each_top_level_file_is_a_public_family(path: Path) -> None:
    # a newcomer reading the listing of jarp/warp/ sees the public API: every file there gives public names
    module = __import__(f"jarp.warp.{path.stem}", fromlist=["_"])
    public = {n for n in jarp.warp.__all__ if getattr(jarp.warp, n) is getattr(module, n, None)}
    assert public or path.stem == "types", f"{path.name} holds no public name of jarp.warp: move it into a package"


def _init_sources() -> list[tuple[int, str]]:
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    return [(n.lineno, n.module or "") for n in tree.body if isinstance(n, ast.ImportFrom) and n.level == 1]


def test_the_package_imports_public_names_only_from_the_public_face() -> None:
    faces = {p.stem for p in TOP_FILES} | {"_geometry"}
    sources = _init_sources()
    assert sources, "the checker sees no import"
    wrong = [f"line {line}: from .{module}" for line, module in sources if module and module not in faces]
    assert wrong == [], "jarp/warp/__init__.py imports public names from the machinery: add a top-level file"


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if _rank(m) < TOP))
def test_no_stage_imports_the_module_or_geometry_packages(module: str) -> None:
    reached = sorted(m for m in GRAPH[module] if m.split(".")[2:3] and m.split(".")[2] in FEATURES)
    assert reached == [], f"{module} imports {reached}: hand it on in the binding or the plan, or through a hook"


def test_nothing_outside_jarp_warp_imports_a_stage() -> None:
    outside = {_module_name(p): _imports(p) for p in sorted(PACKAGE.parent.rglob("*.py")) if PACKAGE not in p.parents}
    outside.pop("jarp.warp", None)
    assert outside, "the checker sees no module outside jarp.warp"
    wrong = {m: sorted(d for d in deps if d.startswith("jarp.warp.") and _rank(d) < TOP) for m, deps in outside.items()}
    assert {m: d for m, d in wrong.items() if d} == {}


TESTS = PACKAGE.parent.parent / "tests"


def _test_module_imports(source: str, own: str) -> list[str]:
    """The test modules other than ``own`` that ``source`` imports."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        found += [
            f"line {node.lineno}: {n}"
            for n in names
            if n.startswith("tests.") and n.split(".")[-1].startswith("test_") and n != own
        ]
    return found


@pytest.mark.parametrize("path", sorted(TESTS.rglob("*.py")), ids=lambda p: str(p.relative_to(TESTS)))
def test_no_test_imports_another_tests_code(path: Path) -> None:
    # shared kernels, scripts and checks live in tests/support/, so each test file stands alone
    own = ".".join(path.relative_to(TESTS.parent).with_suffix("").parts)
    assert _test_module_imports(path.read_text(), own) == []


def test_the_test_import_checker_sees_them() -> None:
    source = "from tests.warp.modules import test_struct\nfrom tests.support import kernels\nimport jax.test_util\n"
    assert _test_module_imports(source, "tests.warp.x.test_y") == ["line 1: tests.warp.modules.test_struct"]
    assert _test_module_imports("from tests.warp.x.test_y import f\n", "tests.warp.x.test_y") == []


def _warp_code_defined(path: Path) -> list[str]:
    """Module-level functions of ``path`` decorated as Warp code (``@wp.func``, ``@wp.kernel``...)."""
    found = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef):
            for deco in node.decorator_list:
                target = deco.func if isinstance(deco, ast.Call) else deco
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "wp":
                    found.append(f"line {node.lineno}: {node.name}")
    return found


def test_importing_upstream_defines_no_warp_code() -> None:
    # the self-checks' probe kernels live in a module the checks import when they run
    defined = {
        p.name: _warp_code_defined(p)
        for p in sorted((PACKAGE / "_upstream").glob("*.py"))
        if p.name != "_warp_codegen_probes.py"
    }
    assert {name: found for name, found in defined.items() if found} == {}
    assert _warp_code_defined(PACKAGE / "_upstream" / "_warp_codegen_probes.py"), "the checker sees no Warp code"


# Bare ``typing.Any`` parameter annotations: kept for values that are truly arbitrary (a user's leaf of unknown kind,
# options forwarded verbatim, decoded JSON, Warp's own kernel annotations); everything else names its type (an
# array, a pytree, a Warp type, ``object`` for what is only passed along). The ceiling is the share reached.
ANY_PARAMETER_CEILING = 0.05


def _bare_any_parameters(path: Path) -> tuple[int, int]:
    """``(bare Any annotations, annotated parameters)`` of the functions in ``path``."""
    found = annotated = 0
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(p for p in (a.vararg, a.kwarg) if p is not None)]
            for param in params:
                if param.annotation is None:
                    continue
                annotated += 1
                found += isinstance(param.annotation, ast.Name) and param.annotation.id == "Any"
    return found, annotated


def _any_report(ceiling: float) -> str | None:
    """None if the share of bare ``Any`` parameter annotations in ``jarp/`` is at most ``ceiling``, else a message
    naming the files with the most of them."""
    counts = {p: _bare_any_parameters(p) for p in sorted(PACKAGE.parent.rglob("*.py"))}
    found = sum(f for f, _ in counts.values())
    annotated = sum(n for _, n in counts.values())
    if found <= ceiling * annotated:
        return None
    worst = sorted(((f, p) for p, (f, _) in counts.items() if f), key=lambda t: -t[0])[:8]
    listing = ", ".join(f"{p.relative_to(PACKAGE.parent.parent)} ({f})" for f, p in worst)
    return (
        f"{found} of {annotated} annotated parameters ({found / annotated:.1%}) are a bare typing.Any, above the "
        f"ceiling of {ceiling:.1%}; name their types (jaxtyping's Array or PyTree, a Warp type, object for a value "
        f"only passed along). Most in: {listing}"
    )


def test_few_parameters_are_annotated_with_a_bare_any() -> None:
    report = _any_report(ANY_PARAMETER_CEILING)
    assert report is None, report


def test_the_any_checker_sees_them(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("def f(a: Any, b: int, *c: Any, d, **e: object) -> Any: ...\n")
    assert _bare_any_parameters(probe) == (2, 4)
    counts = [_bare_any_parameters(p) for p in PACKAGE.parent.rglob("*.py")]
    found, annotated = sum(f for f, _ in counts), sum(n for _, n in counts)
    assert found > 0, "the checker sees no bare Any (jarp keeps some: Warp kernel annotations)"
    report = _any_report(found / annotated / 2)
    assert report is not None, "a ceiling below the share reached must fail"
    assert "jarp/" in report, "the failure names the files with the most"
