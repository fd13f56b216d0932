"""Plan descriptions (`jarp.warp._plan._content`): canonical text that another process rebuilds into the equal plan.

The round trip runs over real plans, harvested from the plan registry after lowering a broad set of calls for the
CPU: forward and adjoint, both vmap methods, in-out arguments, static scalars of every kind (``-0.0``, NaN,
``inf``), runtime scalars and struct fields, struct parameters, generic overloads, tile kernels with a block dim,
bounds-checked builds and ``jax_callable`` functions. `rebuild` reads untrusted text: every failure is a
`ContentError` with a reason and a message naming the field, the kernel or the module to import.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import math
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jarp.warp import jax_callable, jax_kernel
from jarp.warp._ffi._registry import registry
from jarp.warp._plan import _runtime_scalars
from jarp.warp._plan._content import ABI_VERSION, ContentError, content_text, not_portable, rebuild
from jarp.warp._plan._values import Binding, Plan, Runs
from tests.support import kernels as k
from tests.support import kernels64 as k64
from tests.support import kernels_content as kd
from tests.support import kernels_struct as kst
from tests.support import kernels_struct_runtime as ksr
from tests.support.paths import REPO, SUPPORT

SCRIPT = SUPPORT / "content_script.py"

# Lowered programs whose plans the tests read: they keep their plans registered while the module runs.
_KEEP: list[Any] = []


def _lower(f: Callable[..., Any], *args: Any) -> list[Plan]:
    """Lower ``f`` for the CPU (registering its plans) and return the plans that lowering registered."""
    before = {h for h, _ in registry.items()}
    _KEEP.append(jax.jit(f).trace(*args).lower())
    return [p for h, p in registry.items() if h not in before]


def _a(n: int = 8, dtype: Any = jnp.float32) -> jax.Array:
    return jnp.arange(n, dtype=dtype)


def _calls() -> Iterator[tuple[str, Callable[..., Any], tuple[Any, ...]]]:
    scale = jax_kernel(k.scale_kernel, enable_backward=True)
    for s in (2.0, -0.0, 0.0, math.nan, math.inf, -math.inf, 5e-324):
        yield f"static s={s!r}", functools.partial(lambda a, s: scale(a, s), s=s), (_a(),)
    yield "runtime scalar", lambda a, s: scale(a, s), (_a(), jnp.float32(3))
    yield (
        "adjoint of a runtime scalar",
        jax.value_and_grad(lambda a, s: scale(a, s)[0].sum(), argnums=(0, 1)),
        (_a(), jnp.float32(3)),
    )
    for method in ("sequential", "broadcast_all"):
        m = jax_kernel(k.scale_kernel, vmap_method=method, enable_backward=True)
        yield f"vmap {method}", jax.vmap(lambda a, m=m: m(a, 2.0)), (jnp.ones((3, 8), jnp.float32),)
        yield (
            f"vmap {method} of a runtime scalar",
            jax.vmap(lambda a, s, m=m: m(a, s)),
            (
                jnp.ones((3, 8), jnp.float32),
                jnp.arange(3, dtype=jnp.float32),
            ),
        )
        yield (
            f"grad of vmap {method}",
            jax.grad(lambda a, m=m: jax.vmap(lambda r: m(r, 2.0)[0])(a).sum()),
            (jnp.ones((3, 8), jnp.float32),),
        )
    grow = jax_kernel(k.grow_kernel, in_out_argnames=("s",), num_outputs=1, enable_backward=True)
    yield "in-out forward", lambda x, s: grow(x, s), (_a(), _a())
    yield "in-out adjoint", jax.grad(lambda x, s: grow(x, s)[0].sum(), argnums=(0, 1)), (_a(), _a())
    yield "in-out under vmap", jax.vmap(lambda x, s: grow(x, s)), (jnp.ones((2, 8)), jnp.ones((2, 8)))
    flags = jax_kernel(kd.flags_kernel)
    yield "bool, int and uint64 statics", lambda a: flags(a, -0.0, -(2**31), 2**64 - 1, True), (_a(),)
    yield "numpy statics", lambda a: flags(a, np.float32(0.5), np.int32(7), np.uint64(3), np.bool_(False)), (_a(),)
    add = jax_kernel(k64.generic_add_kernel, arg_types_factory=k64.generic_add_arg_types_list, enable_backward=True)
    yield "generic overload (float32)", lambda a: add(a, a), (_a(),)
    yield "generic overload (int32)", lambda a: add(a, a), (_a(dtype=jnp.int32),)
    yield "generic overload adjoint", jax.grad(lambda a: add(a, a)[0].sum()), (_a(),)
    gscale = jax_kernel(k64.generic_scale_kernel, arg_types_factory=k64.generic_scale_arg_types)
    yield "generic overload with a runtime scalar", lambda a, s: gscale(a, s), (_a(), jnp.float32(2))
    struct = jax_kernel(kst.scale_kernel, enable_backward=True)
    yield "struct", lambda x, w: struct({"k": -0.0, "w": w}, x), (_a(), _a())
    yield "struct adjoint", jax.grad(lambda x, w: struct({"k": 2.0, "w": w}, x)[0].sum(), argnums=(0, 1)), (_a(), _a())
    nested = jax_kernel(kst.nested_kernel)
    yield "nested struct", lambda x: nested({"s": 1.5, "inner": {"w": x, "c": math.nan}, "b": x}, x), (_a(),)
    frame = jax_kernel(kst.affine_kernel, launch_dims=4)
    yield (
        "struct vector and matrix values",
        lambda p: frame({"rot": np.eye(3), "offset": (1.0, -0.0, math.inf), "p": p}),
        (jnp.ones((4, 3), jnp.float32),),
    )
    spring = jax_kernel(ksr.spring_energy, output_dims=1, enable_backward=True)
    material = {"rest": 1.0, "g": (0.0, 0.0, 1.0)}
    yield "runtime struct field", lambda x, kk: spring(x, {"k": kk, **material}), (_a(), jnp.float32(2))
    yield (
        "runtime struct field adjoint",
        jax.grad(lambda x, kk: spring(x, {"k": kk, **material})[0].sum(), argnums=(0, 1)),
        (_a(), jnp.float32(2)),
    )
    tile = jax_kernel(kd.row_sum_tile, launch_dims=(4, 16), output_dims=4, block_dim=16)
    yield "tile kernel with a block dim", lambda a: tile(a), (jnp.ones((4, kd.TILE), jnp.float32),)
    yield "block dim on a plain kernel", lambda a: jax_kernel(k.scale_kernel, block_dim=64)(a, 2.0), (_a(),)
    checked = jax_kernel(k.gather_kernel, bounds_check=True, enable_backward=True)
    yield "bounds checked", lambda i, t: checked(i, t), (jnp.arange(4), _a())
    yield "bounds checked adjoint", jax.grad(lambda t: checked(jnp.arange(4), t)[0].sum()), (_a(),)
    yield (
        "bounds checked runtime variant",
        lambda a, s: jax_kernel(k.scale_kernel, bounds_check=True)(a, s),
        (
            _a(),
            jnp.float32(2),
        ),
    )
    twice = jax_callable(kd.scale_twice, enable_backward=True)
    yield "callable", lambda a: twice(a, 2.0), (_a(),)
    yield "callable adjoint", jax.grad(lambda a: twice(a, -0.0)[0].sum()), (_a(),)
    yield "callable under vmap", jax.vmap(lambda a: twice(a, 2.0)), (jnp.ones((2, 8), jnp.float32),)
    yield "callable without input copies", lambda a: jax_callable(k.scale_func, protect_inputs=False)(a, 1.0), (_a(),)


@pytest.fixture(scope="module")
def harvested() -> list[Plan]:
    """Every plan registered once the calls are lowered (equal plans share one registry entry)."""
    for _, f, args in _calls():
        _lower(f, *args)
    return [plan for _, plan in registry.items()]


def _static(value: Any) -> Callable[[Plan], bool]:
    return lambda p: p.params[1].primal == Binding("static", value=value)


# Plans the tests below edit, by what they are (another test of the process may have registered an equal one first).
_PICKS: dict[str, Callable[[Plan], bool]] = {
    "static s=2.0": lambda p: p.target is k.scale_kernel and p.block_dim is None and _static(2.0)(p),
    "static s=-0.0": lambda p: p.target is k.scale_kernel and _static(-0.0)(p),
    "static s=0.0": lambda p: p.target is k.scale_kernel and _static(0.0)(p),
    "static s=nan": lambda p: p.target is k.scale_kernel and _static(math.nan)(p),
    "bool, int and uint64 statics": lambda p: p.target is kd.flags_kernel and _static(-0.0)(p),
    "generic overload (float32)": lambda p: (
        getattr(p.target, "key", None) == "generic_add_kernel" and p.operands[0].dtype == np.float32
    ),  # targets of other plans of the process include callables (functions have no key)
    "runtime scalar": lambda p: _runtime_scalars.origin(p.target) == (k.scale_kernel, ("s",), False),
    "callable": lambda p: p.target is kd.scale_twice,
    "struct": lambda p: p.target is kst.scale_kernel,
    "struct vector and matrix values": lambda p: p.target is kst.affine_kernel,
    "in-out adjoint": lambda p: p.target is k.grow_kernel and p.adjoint,
    "runtime struct field": lambda p: _runtime_scalars.origin(p.target)[1] == ("mat.k",),
    "vmap sequential": lambda p: bool(p.batch_shape),
    "bounds checked runtime variant": lambda p: _runtime_scalars.origin(p.target) == (k.scale_kernel, ("s",), True),
}


def _pick(plans: list[Plan], label: str, adjoint: bool = False) -> Plan:
    """The first harvested plan ``label`` picks (a forward one unless ``adjoint``)."""
    return next(p for p in plans if p.adjoint == adjoint and _PICKS[label](p))


def _round_trip(plan: Plan) -> str:
    assert not_portable(plan) is None, plan.name
    text = content_text(plan)
    again = rebuild(text)
    assert again == plan, f"{plan.name}: {text}"
    assert again.target is plan.target
    assert content_text(again) == text
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))  # canonical
    return text


def test_every_harvested_plan_round_trips_or_says_why_not(harvested: list[Plan]) -> None:
    # The plans of the calls above, and those other tests of the same process registered.
    describable = 0
    for plan in harvested:
        reason = not_portable(plan)
        if reason is None:
            _round_trip(plan)
            describable += 1
        else:
            assert isinstance(reason, str)
            assert reason
    assert describable >= 30


def _target_json(plan: Plan) -> dict[str, Any]:
    return json.loads(content_text(plan))["target"]


def test_the_harvest_covers_every_kind_of_plan(harvested: list[Plan]) -> None:
    plans = [p for p in harvested if not_portable(p) is None]
    kernels = [p for p in plans if p.runs is Runs.KERNEL]
    targets = [_target_json(p) for p in kernels]
    assert any(p.adjoint for p in kernels)
    assert any(p.adjoint for p in plans if p.runs is Runs.CALLABLE)
    assert any(p.batch_shape for p in plans)  # sequential vmap
    assert any(p.launch_dims == (24,) for p in kernels)  # broadcast_all folds the batch into the launch
    assert any(p.aliases and not p.adjoint and p.runs is Runs.KERNEL for p in plans)  # in-out
    assert any(p.protected for p in plans)
    assert any(p.scalar_operands for p in plans)
    assert any(t["runtime"] == ["s"] for t in targets)
    assert any(t["runtime"] == ["mat.k"] for t in targets)
    assert any(t["checked"] and t["runtime"] for t in targets)
    assert any(p.bounds_checked for p in kernels)
    assert {tuple(t["overload"]) for t in targets if t["overload"]} >= {
        ("array(ndim=1, dtype=float32)",) * 3,
        ("array(ndim=1, dtype=int32)",) * 3,
    }
    assert any(p.block_dim == 16 for p in kernels)
    assert any(t["module"].startswith("row_sum_tile_") for t in targets)
    assert any(p.spec.is_struct for p in plans for p in p.params)
    statics = [p.primal.value for plan in plans for p in plan.params if p.primal.source == "static"]
    floats = [v for v in statics if isinstance(v, float)]
    assert any(math.isnan(v) for v in floats)
    assert any(v == 0.0 and math.copysign(1.0, v) < 0 for v in floats)
    assert any(math.isinf(v) for v in floats)
    assert {True, -(2**31), 2**64 - 1} <= {v for v in statics if not isinstance(v, float)}


def test_static_values_are_exact_in_the_text(harvested: list[Plan]) -> None:
    plan = _pick(harvested, "static s=-0.0")
    assert json.loads(content_text(plan))["params"][1]["primal"]["value"] == {"float": "-0x0.0p+0"}
    plan = _pick(harvested, "static s=nan")
    assert json.loads(content_text(plan))["params"][1]["primal"]["value"] == {"float": "nan"}
    plan = _pick(harvested, "bool, int and uint64 statics")
    values = [p["primal"]["value"] for p in json.loads(content_text(plan))["params"][1:5]]
    assert values == [{"float": "-0x0.0p+0"}, -(2**31), 2**64 - 1, True]
    assert content_text(plan) != content_text(_pick(harvested, "static s=0.0"))


def test_a_description_holds_nothing_process_local(harvested: list[Plan]) -> None:
    for plan in harvested:
        if not_portable(plan) is None:
            text = content_text(plan)
            assert " at 0x" not in text, text
            assert str(id(plan.target)) not in text


# -- what cannot be described -------------------------------------------------------------------------------------


def test_a_lambda_or_a_closure_callable_is_not_describable() -> None:
    def closure(a: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
        wp.launch(k.scale_kernel, dim=a.shape, inputs=[a, s], outputs=[out])

    (lam,) = _lower(lambda a: jax_callable(kd.scale_lambda)(a, 2.0), _a())
    (nested,) = _lower(lambda a: jax_callable(closure)(a, 2.0), _a())
    reason = not_portable(lam)
    assert reason is not None
    assert "'<lambda>'" in reason
    assert "is a lambda or is defined inside another function" in reason
    reason = not_portable(nested)
    assert reason is not None
    assert "closure" in reason
    assert "top level of a module" in reason
    with pytest.raises(ContentError, match="cannot be found by name") as info:
        rebuild(content_text(lam))
    assert info.value.reason == "invalid"


def test_a_kernel_redefined_under_its_key_is_not_describable() -> None:
    first, second = kd.make_offset_kernel(1.0), kd.make_offset_kernel(2.0)
    (old,) = _lower(lambda a: jax_kernel(first)(a), _a())
    (new,) = _lower(lambda a: jax_kernel(second)(a), _a())
    assert "redefined since under the same key" in (not_portable(old) or "")
    _round_trip(new)


# -- every reason, with its message --------------------------------------------------------------------------------


def _edited(plan: Plan, edit: Callable[[dict[str, Any]], None]) -> str:
    doc = json.loads(content_text(plan))
    edit(doc)
    return json.dumps(doc)


def _raises(text: str, reason: str, match: str) -> ContentError:
    with pytest.raises(ContentError, match=match) as info:
        rebuild(text)
    assert info.value.reason == reason
    assert isinstance(info.value, ValueError)
    return info.value


def test_another_abi_is_refused_naming_both_versions(harvested: list[Plan]) -> None:
    plan = _pick(harvested, "static s=2.0")
    text = _edited(plan, lambda d: d.update(abi=ABI_VERSION + 1))
    _raises(text, "abi", rf"described for jarp call ABI {ABI_VERSION + 1}, and this jarp reads ABI {ABI_VERSION}")
    _raises('{"abi": 0}', "abi", "call ABI 0")


def test_a_kernel_this_process_never_defined_is_not_found(harvested: list[Plan]) -> None:
    plan = _pick(harvested, "static s=2.0")

    def elsewhere(d: dict[str, Any]) -> None:
        d["target"].update(module="my_project.kernels", python_module="my_project.kernels")

    _raises(
        _edited(plan, elsewhere),
        "not_found",
        r"Warp kernel 'scale_kernel' \(Warp module 'my_project.kernels'\), which this process has not defined; "
        r"import the Python module that defines it, 'my_project.kernels', before loading the program",
    )
    plan = _pick(harvested, "generic overload (float32)")
    text = _edited(plan, lambda d: d["target"].update(overload=["array(ndim=1, dtype=float16)"] * 3))
    _raises(text, "not_found", r"overload \(array\(ndim=1, dtype=float16\), .*\) of generic Warp kernel")


def test_a_function_this_process_never_defined_is_not_found(harvested: list[Plan]) -> None:
    plan = _pick(harvested, "callable")
    text = _edited(plan, lambda d: d["target"].update(module="my_project.ops"))
    _raises(text, "not_found", r"function 'scale_twice' of Python module 'my_project.ops'.*import 'my_project.ops'")


def test_changed_code_is_refused_naming_the_kernel(harvested: list[Plan]) -> None:
    plan = _pick(harvested, "runtime scalar")
    text = _edited(plan, lambda d: d["target"].update(hash="0" * 64))
    _raises(
        text,
        "changed",
        r"Warp kernel 'scale_kernel' \(Python module 'tests.support.kernels'\) has other code .* never runs "
        "other code than what was compiled",
    )
    plan = _pick(harvested, "callable")
    text = _edited(plan, lambda d: d["target"].update(hash="f" * 64))
    _raises(text, "changed", r"jax_callable function 'scale_twice' .* has other code")


@pytest.mark.parametrize(
    ("label", "edit", "match"),
    [
        ("static s=2.0", lambda d: d.update(launch_dims=[-1]), r"'launch_dims\[0\]' must be in \[0, "),
        ("static s=2.0", lambda d: d.update(launch_dims=[9]), r"indexes (a|output) with wp.tid\(\) .* runs 9 threads"),
        ("static s=2.0", lambda d: d["operands"][0].update(shape=[4]), r"indexes a with wp.tid\(\)"),
        ("static s=2.0", lambda d: d["operands"][0].update(dtype="complex64"), r"'operands\[0\].dtype' must be one of"),
        ("static s=2.0", lambda d: d["operands"][0].update(dtype="float64"), r"has dtype float64, but a 1-d wp.array"),
        ("static s=2.0", lambda d: d["operands"][0].update(shape=[8, 3]), r"has shape \(8, 3\), but a 1-d wp.array"),
        ("static s=2.0", lambda d: d["operands"][0].update(shape=[2**62, 8]), r"'operands\[0\]' .* more than 2\*\*63"),
        ("static s=2.0", lambda d: d["params"][0]["primal"].update(index=1), r"'params\[0\].primal.index' 1 is not"),
        ("static s=2.0", lambda d: d["params"][1]["primal"].update(value=True), r"'params\[1\].primal.value' must be"),
        ("static s=2.0", lambda d: d["params"][1]["primal"].update(value=2), r"must be a float32 value, got 2"),
        ("static s=2.0", lambda d: d["params"][1]["primal"].update(value={"float": "x"}), r"float in hex"),
        ("static s=2.0", lambda d: d["params"][0].update(name="b"), r"'params\[0\].name' is 'b', but the target"),
        ("static s=2.0", lambda d: d["params"].pop(), r"'params' has 2 parameters, but the target has 3"),
        ("static s=2.0", lambda d: d.update(zero_results=[1]), r"'zero_results\[0\]' must be in \[0, 0\]"),
        ("static s=2.0", lambda d: d.update(aliases=[[0, 3]]), r"'aliases\[0\]\[1\]' must be in \[0, 0\]"),
        ("static s=2.0", lambda d: d.update(block_dim=4096), r"'block_dim' must be in \[1, 1024\]"),
        ("static s=2.0", lambda d: d.update(bounds_checked=True), r"'bounds_checked' is True, but the kernel"),
        ("static s=2.0", lambda d: d.update(extra=1), r"unknown \['extra'\]"),
        ("static s=2.0", lambda d: d.update(runs="graph"), r"'runs' must be 'kernel' or 'callable'"),
        ("static s=2.0", lambda d: d.update(operand_batch=[]), r"one entry per operand \(1\), got 0"),
        ("static s=2.0", lambda d: d["target"].update(hash="XYZ"), r"'target.hash' must be 64 lowercase hex"),
        ("static s=2.0", lambda d: d["target"].update(runtime=["output"]), r"names 'output', which is not a scalar"),
        ("static s=2.0", lambda d: d["target"].update(runtime=["nope"]), r"names 'nope', which is not a parameter"),
        ("static s=2.0", lambda d: d["target"].update(overload=["float32"]), r"'target.overload' .* is not generic"),
        ("struct", lambda d: d["params"][0]["primal"].update(fields=[]), r"must bind its 1 array field"),
        ("struct", lambda d: d["params"][0]["primal"].update(fields=[5]), r"'params\[0\].primal.fields.index' 5"),
        ("struct", lambda d: d["params"][0]["primal"].update(value={"tuple": []}), r"must hold its 1 value field"),
        ("bool, int and uint64 statics", lambda d: d["params"][2]["primal"].update(value=2**31), r"int32 value"),
        ("bool, int and uint64 statics", lambda d: d["params"][4]["primal"].update(value=1), r"bool value, got 1"),
        ("bool, int and uint64 statics", lambda d: d["params"][2]["primal"].update(value=2**70), r"64-bit integer"),
        (
            "struct vector and matrix values",
            lambda d: d["params"][0]["primal"].update(value={"tuple": [{"tuple": []}, {"tuple": []}]}),
            r"'params\[0\].primal.value \(f.rot\)' must be a tuple of 3",
        ),
        ("callable", lambda d: d.update(launch_dims=[4]), r"'launch_dims' of a callable plan must be \[\]"),
        ("callable", lambda d: d.update(protected=[0]), r"'protected' \[0\] names results that alias no operand"),
    ],
)
def test_a_crafted_description_is_invalid_naming_the_field(
    harvested: list[Plan], label: str, edit: Callable[[dict[str, Any]], None], match: str
) -> None:
    plan = _pick(harvested, label)
    error = _raises(_edited(plan, edit), "invalid", match)
    assert str(error).startswith("invalid jarp plan description: ")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (b"{}", "is text, got bytes"),
        ("", "is not JSON"),
        ("[1, 2]", "a JSON list, not an object"),
        ('{"abi": 1, "abi": 1}', "is not JSON"),
        ('{"abi": NaN}', "is not JSON"),
        ('{"abi": true}', "'abi' must be an int, got True"),
        ('{"abi": 1}', "must have the keys"),
        ("[" * 100000 + "]" * 100000, "is not JSON|more than"),
        (" " * (2**20 + 1), "more than the 1048576"),
    ],
)
def test_garbled_text_is_invalid(text: Any, match: str) -> None:
    _raises(text, "invalid", match)


# -- fuzzing --------------------------------------------------------------------------------------------------------

_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


def _paths(doc: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from _paths(value, (*path, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from _paths(value, (*path, i))


def _replace(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    doc = copy.deepcopy(doc)
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return doc


def _check_rebuild(text: Any) -> None:
    error: ContentError | None = None
    try:
        plan = rebuild(text)
    except ContentError as e:
        error = e
    if error is None:
        assert isinstance(plan, Plan)
    else:
        assert error.reason in ("invalid", "abi", "not_found", "changed")
        assert str(error)


@pytest.fixture(scope="module")
def valid_descriptions(harvested: list[Plan]) -> list[dict[str, Any]]:
    labels = ("static s=2.0", "struct", "struct vector and matrix values", "runtime struct field", "callable")
    picked = [_pick(harvested, label) for label in labels] + [_pick(harvested, "in-out adjoint", adjoint=True)]
    return [json.loads(content_text(p)) for p in picked]


_FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@_FUZZ
@given(data=st.data())
def test_a_mutated_description_raises_only_description_errors(
    valid_descriptions: list[dict[str, Any]], data: st.DataObject
) -> None:
    doc = data.draw(st.sampled_from(valid_descriptions))
    path = data.draw(st.sampled_from(list(_paths(doc))))
    value = data.draw(_JSON)
    _check_rebuild(json.dumps(_replace(doc, path, value)))


@_FUZZ
@given(data=st.data())
def test_a_description_with_a_field_dropped_or_a_list_item_repeated_raises_only_description_errors(
    valid_descriptions: list[dict[str, Any]], data: st.DataObject
) -> None:
    doc = copy.deepcopy(data.draw(st.sampled_from(valid_descriptions)))
    path = data.draw(st.sampled_from([p for p in _paths(doc) if p]))
    node = doc
    for key in path[:-1]:
        node = node[key]
    if isinstance(node, list) and data.draw(st.booleans()):
        node.append(copy.deepcopy(node[path[-1]]))
    else:
        del node[path[-1]]
    _check_rebuild(json.dumps(doc))


@_FUZZ
@given(doc=_JSON)
def test_arbitrary_json_raises_only_description_errors(doc: Any) -> None:
    _check_rebuild(json.dumps(doc))
    if isinstance(doc, dict):
        _check_rebuild(json.dumps({**doc, "abi": ABI_VERSION}))


@_FUZZ
@given(text=st.text(max_size=200))
def test_arbitrary_text_raises_only_description_errors(text: str) -> None:
    _check_rebuild(text)


# -- across processes ------------------------------------------------------------------------------------------------

_MODULE = textwrap.dedent(
    """
    import warp as wp

    @wp.func
    def bump(x: float) -> float:
        return x + {bump}

    @wp.kernel
    def unrelated_kernel(a: wp.array(dtype=float)):
        a[wp.tid()] = {unrelated}

    @wp.kernel
    def shift_kernel(a: wp.array(dtype=float), s: float, t: float, out: wp.array(dtype=float)):
        i = wp.tid()
        out[i] = bump(a[i]) * s + t
    """
)


def _script(mode: str, directory: Path, stdin: str = "", *flags: str) -> str:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), mode, str(directory), *flags],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**__import__("os").environ, "PYTHONPATH": str(REPO), "PYTHONHASHSEED": "random"},
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return "".join(line[4:] + "\n" for line in result.stdout.splitlines() if line.startswith(">>> "))


def _module_dir(tmp_path: Path, name: str, bump: str = "1.0", unrelated: str = "0.0") -> Path:
    directory = tmp_path / name
    directory.mkdir()
    (directory / "describe_mod.py").write_text(_MODULE.format(bump=bump, unrelated=unrelated))
    return directory


def test_two_processes_describe_the_same_function_identically_and_rebuild_each_others_plans(tmp_path: Path) -> None:
    same = _module_dir(tmp_path, "a")
    first = _script("describe", same)
    second = _script("describe", _module_dir(tmp_path, "b", unrelated="5.0"))  # another kernel of the module changed
    assert first == second
    texts = first.splitlines()
    targets = [json.loads(t)["target"] for t in texts]
    assert len(texts) >= 2
    assert any(json.loads(t)["adjoint"] for t in texts)
    assert {t["key"] for t in targets} == {"shift_kernel"}
    assert {tuple(t["runtime"]) for t in targets} == {("s",)}
    # A third process with the same code rebuilds them; one whose wp.func changed, or that never imported the module,
    # refuses them.
    assert _script("rebuild", same, first).split() == ["ok"] * len(texts)
    changed = _script("rebuild", _module_dir(tmp_path, "c", bump="2.0"), first).splitlines()
    assert all(
        line.startswith("changed: Warp kernel 'shift_kernel' (Python module 'describe_mod') has other code")
        for line in changed
    ), changed
    missing = _script("rebuild", same, first, "--no-import").splitlines()
    assert all(
        line.startswith("not_found: ") and "import the Python module that defines it, 'describe_mod'" in line
        for line in missing
    ), missing


def test_the_derived_kernels_are_found_again_through_their_recipe(harvested: list[Plan]) -> None:
    plan = _pick(harvested, "bounds checked runtime variant")
    base, names, checked = _runtime_scalars.origin(plan.target)
    assert (base, names, checked) == (k.scale_kernel, ("s",), True)
    assert plan.target is _runtime_scalars.bounds_checked(_runtime_scalars.variant(k.scale_kernel, ("s",)))
    assert _runtime_scalars.origin(k.scale_kernel) == (k.scale_kernel, (), False)


# -- float64 -------------------------------------------------------------------------------------------------------


@pytest.mark.x64
def test_float64_plans_round_trip() -> None:
    x = jnp.arange(8, dtype=jnp.float64)
    add = jax_kernel(k64.generic_add_kernel, arg_types_factory=k64.generic_add_arg_types_list, enable_backward=True)
    scale = jax_kernel(k64.generic_scale_kernel, arg_types_factory=k64.generic_scale_arg_types, enable_backward=True)
    struct = jax_kernel(kst.scale64_kernel, enable_backward=True)
    plans = [
        *_lower(lambda a: add(a, a), x),
        *_lower(jax.grad(lambda a: add(a, a)[0].sum()), x),
        *_lower(lambda a: scale(a, -0.0), x),
        *_lower(lambda a: scale(a, math.nan), x),
        *_lower(jax.grad(lambda a, s: scale(a, s)[0].sum(), argnums=(0, 1)), x, jnp.float64(2)),
        *_lower(jax.vmap(lambda a: struct({"k": 5e-324, "w": a}, a)), jnp.ones((2, 8))),
        *_lower(lambda a: jax_callable(kst.scale64_func)({"k": -0.0, "w": a}, a), x),
    ]
    assert any(p.adjoint for p in plans)
    assert any(p.batch_shape for p in plans)
    texts = [_round_trip(p) for p in plans]
    assert any('"overload":["array(ndim=1, dtype=float64)"' in t for t in texts)
    assert any('{"float":"0x0.0000000000001p-1022"}' in t for t in texts)
    assert all('"dtype":"float64"' in t for t in texts)


def test_numpy_static_values_keep_their_dtype(harvested: list[Plan]) -> None:
    plan = _pick(harvested, "static s=2.0")
    params = list(plan.params)
    params[1] = dataclasses.replace(params[1], primal=Binding("static", value=np.float32(2.0)))
    edited = dataclasses.replace(plan, params=tuple(params))
    text = content_text(edited)
    assert json.loads(text)["params"][1]["primal"]["value"] == {
        "numpy": "float32",
        "value": {"float": "0x1.0000000000000p+1"},
    }
    again = rebuild(text)
    assert again == edited
    assert type(again.params[1].primal.value) is np.float32
    _raises(text.replace('"numpy":"float32"', '"numpy":"complex64"'), "invalid", r"\.numpy' must be one of")
    _raises(text.replace('"0x1.0000000000000p+1"', '"0x1.0000000000001p+1"'), "invalid", r"is not a float32 value")


def test_a_local_description_reads_back_as_the_handle_it_names_and_is_checked_like_any() -> None:
    from jarp.warp._plan._content import LocalName, local_text, read_text

    text = local_text("abc123", 7, "jax_callable(f)", "a closure")
    assert read_text(text) == LocalName("abc123", 7, "jax_callable(f)", "a closure")
    doc = json.loads(text)
    for edit, field in (
        (lambda d: d["local"].update(handle=-1), "local.handle"),
        (lambda d: d["local"].update(handle="7"), "local.handle"),
        (lambda d: d["local"].pop("why"), "local"),
        (lambda d: d.update(extra=1), "the local description"),
    ):
        bad = json.loads(json.dumps(doc))
        edit(bad)
        with pytest.raises(ContentError, match=field) as info:
            read_text(json.dumps(bad))
        assert info.value.reason == "invalid"
