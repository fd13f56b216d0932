"""Compiled programs that outlive their process: JAX's persistent cache, ``jax.export``, serialised executables.

Every test runs real processes: fresh interpreters (``tests/support/programs_script.py``) that import the kernel module
``prog_kernels`` (``tests/support/programs.py``) from a tmp directory, the way a user's package is imported. A test
changes that module's code between processes where it matters. Each child prints one JSON report and exits 0:
the errors a test expects are caught and reported in it, so a crash is a failure.

The launch path is the child's (``launch`` parametrises its ``JARP_LAUNCH``), so these tests are not marked
``launch_paths``: they cover both paths in every run.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support import forked
from tests.support.paths import REPO, SUPPORT
from tests.support.programs import X, expected, write_kernels

SCRIPT = SUPPORT / "programs_script.py"
LAUNCHES = ["native", "python"]
FUNCS = ["fwd", "grad", "struct", "struct_grad", "vmap", "callable"]
NEW_SCALE = 5.25  # square_kernel's changed code (another length than 2.0's, should a stale .pyc be around)


def run(mode: str, *args: Any, kernels: Path, launch: str = "native", no_import: bool = False) -> dict[str, Any]:
    """Run ``programs_script.py MODE ARGS`` with ``kernels`` (the directory of ``prog_kernels``) on its path."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), str(kernels)]),
        "JARP_LAUNCH": launch,
        "JAX_ENABLE_X64": "0",
        "JAX_PLATFORMS": "cpu",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    for name in ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"):
        env.pop(name, None)
    command = [sys.executable, str(SCRIPT), mode, *map(str, args), *(["--no-import"] if no_import else [])]
    proc = forked.run(command, env=env, timeout=600, cwd=kernels)
    tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
    assert proc.returncode == 0, f"{mode} child exited with {proc.returncode}:\n{tail}"
    lines = [line[4:] for line in proc.stdout.splitlines() if line.startswith(">>> ")]
    assert len(lines) == 1, f"{mode} child printed no report:\n{tail}"
    report = json.loads(lines[0])
    if launch == "python":
        assert report.pop("launch_path") == "python (JARP_LAUNCH=python)"
    else:
        assert report.pop("launch_path") != "python (JARP_LAUNCH=python)"
    return report


def check(value: Any, want: Any) -> None:
    if isinstance(want, tuple):
        assert len(value) == len(want)
        for v, w in zip(value, want, strict=True):
            check(v, w)
        return
    np.testing.assert_allclose(np.asarray(value, dtype=np.float32), want, rtol=1e-6)


def error(report: dict[str, Any], name: str) -> str:
    entry = report[name]
    assert isinstance(entry, dict), f"{name} did not fail: {entry!r}"
    assert "error" in entry, f"{name} did not fail: {entry!r}"
    return entry["error"]


def entries(cache: Path) -> set[str]:
    return {p.name for p in cache.iterdir()}


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding ``prog_kernels`` as first written (``square_kernel``: ``y = 2 x**2``)."""
    directory = tmp_path_factory.mktemp("kernels")
    write_kernels(directory)
    return directory


@pytest.fixture(scope="module")
def changed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another ``prog_kernels``: the same module, with ``square_kernel``'s code changed (``y = 5.25 x**2``)."""
    directory = tmp_path_factory.mktemp("changed")
    write_kernels(directory, scale=NEW_SCALE)
    return directory


@pytest.fixture(scope="module")
def exported(kernels: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``jax.export``s of fwd, struct, vmap (``vjp_order=1``) and callable, made in a process of their own."""
    directory = tmp_path_factory.mktemp("exported")
    report = run("export", directory, kernels=kernels)
    for name in ("fwd", "struct", "vmap", "callable"):
        check(report[name], expected(name))
    return directory


# -- the persistent compilation cache ------------------------------------------------------------------------------


@pytest.mark.parametrize("launch", LAUNCHES)
def test_a_second_process_hits_the_persistent_cache_and_a_third_adds_no_entry(
    kernels: Path, tmp_path: Path, launch: str
) -> None:
    cache = tmp_path / "cache"
    first = run("cache", cache, *FUNCS, kernels=kernels, launch=launch)
    written = entries(cache)
    assert written, "the first process wrote no cache entry"
    second = run("cache", cache, *FUNCS, kernels=kernels, launch=launch)
    after_second = entries(cache)
    third = run("cache", cache, *FUNCS, kernels=kernels, launch=launch)
    for name in FUNCS:
        assert (first[name]["hits"], first[name]["misses"]) == (0, 1), name
        assert (second[name]["hits"], second[name]["misses"]) == (1, 0), f"{name} missed the cache: {second[name]}"
        assert (third[name]["hits"], third[name]["misses"]) == (1, 0), name
        check(first[name]["value"], expected(name))
        assert second[name]["value"] == first[name]["value"] == third[name]["value"], name
    assert after_second == written, f"the second process wrote entries: {sorted(after_second - written)}"
    assert entries(cache) == written, f"the third process wrote entries: {sorted(entries(cache) - written)}"


def test_a_kernel_whose_code_changed_is_never_served_from_the_cache(
    kernels: Path, changed: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    names = ["fwd", "grad", "struct", "callable"]
    first = run("cache", cache, *names, kernels=kernels)
    # the same functions in a process whose square_kernel has other code (on the other launch path)
    second = run("cache", cache, *names, kernels=changed, launch="python")
    for name in ("fwd", "grad"):
        assert (first[name]["hits"], first[name]["misses"]) == (0, 1), name
        assert (second[name]["hits"], second[name]["misses"]) == (0, 1), f"{name} was served from the cache"
        check(first[name]["value"], expected(name))
        check(second[name]["value"], expected(name, scale=NEW_SCALE))
    # a change to another kernel of the same module leaves struct_kernel's program valid
    assert (second["struct"]["hits"], second["struct"]["misses"]) == (1, 0)
    check(second["struct"]["value"], expected("struct"))
    # a jax_callable is keyed by its own code, not the kernels it launches: its program is served, and runs the
    # kernel as it is now (docs/programs.md says so)
    assert (second["callable"]["hits"], second["callable"]["misses"]) == (1, 0)
    check(second["callable"]["value"], expected("callable", scale=NEW_SCALE))


# -- jax.export -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("launch", LAUNCHES)
def test_an_export_round_trips_in_a_fresh_process(kernels: Path, exported: Path, launch: str) -> None:
    report = run("load", exported, kernels=kernels, launch=launch)
    check(report["fwd"], expected("fwd"))
    check(report["fwd_jit"], expected("fwd"))
    check(report["fwd_grad"], expected("grad"))  # vjp_order=1: Warp's adjoint in the loaded program
    check(report["struct"], expected("struct"))
    check(report["struct_grad"], expected("struct_grad"))
    check(report["vmap"], expected("vmap"))
    check(report["callable"], expected("callable"))


@pytest.mark.parametrize("launch", LAUNCHES)
def test_loading_without_the_kernels_module_names_the_kernel_and_its_module(
    kernels: Path, exported: Path, launch: str
) -> None:
    report = run("load", exported, kernels=kernels, launch=launch, no_import=True)
    for name, kernel in (("fwd", "square_kernel"), ("struct", "struct_kernel"), ("vmap", "square_kernel")):
        message = error(report, name)
        assert "NOT_FOUND" in message, message
        assert f"Warp kernel {kernel!r}" in message, message
        assert "import the Python module that defines it, 'prog_kernels', before loading the program" in message
    message = error(report, "callable")
    assert "NOT_FOUND" in message
    assert "jax_callable function 'square_func' of Python module 'prog_kernels'" in message, message


@pytest.mark.parametrize("launch", LAUNCHES)
def test_loading_with_changed_kernel_code_names_the_kernel(changed: Path, exported: Path, launch: str) -> None:
    report = run("load", exported, kernels=changed, launch=launch)
    for name in ("fwd", "vmap"):
        message = error(report, name)
        assert "FAILED_PRECONDITION" in message, message
        assert "Warp kernel 'square_kernel' (Python module 'prog_kernels') has other code" in message, message
    check(report["struct"], expected("struct"))  # its kernel did not change
    check(report["callable"], expected("callable", scale=NEW_SCALE))  # keyed by the function's code only


# -- serialised executables ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def serialized(kernels: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("serialized") / "fwd.pkl"
    check(run("serialize", path, kernels=kernels)["fwd"], expected("fwd"))
    return path


@pytest.mark.parametrize("launch", LAUNCHES)
def test_a_serialized_executable_runs_in_another_process(kernels: Path, serialized: Path, launch: str) -> None:
    check(run("deserialize", serialized, kernels=kernels, launch=launch)["fwd"], expected("fwd"))


def test_a_serialized_executable_loaded_without_the_kernels_module_names_the_kernel(
    kernels: Path, serialized: Path
) -> None:
    message = error(run("deserialize", serialized, kernels=kernels, no_import=True), "fwd")
    assert "NOT_FOUND" in message, message
    assert "Warp kernel 'square_kernel'" in message, message
    assert "import the Python module that defines it, 'prog_kernels'" in message, message


# -- untrusted attributes ------------------------------------------------------------------------------------------

CRAFTED = {  # case of programs_script.crafted -> what its error says
    "garbage": ("INVALID_ARGUMENT", "jarp_warp_call: invalid jarp plan description: the plan description is not JSON"),
    "not_object": ("INVALID_ARGUMENT", "jarp_warp_call_no_graph: invalid jarp plan description: the plan description is a JSON list"),
    "operand_shape": ("INVALID_ARGUMENT", "operand 0 of kernel 'jax_kernel(square_kernel)' is float32[8], the plan expects float32[16]"),
    "launch_dims": ("INVALID_ARGUMENT", "the described launch is refused: jax_kernel(square_kernel): the kernel indexes y"),
    "dim_range": ("INVALID_ARGUMENT", "field 'launch_dims[0]' must be in [0, 9223372036854775807], got -1"),
    "unknown_kernel": ("NOT_FOUND", "the program launches Warp kernel 'nope' (Warp module 'prog_kernels')"),
    "unknown_module": ("NOT_FOUND", "Warp kernel 'square_kernel' (Warp module 'evil_module'), which this process has not defined"),
    "wrong_python_module": ("INVALID_ARGUMENT", "field 'target.python_module' is 'os', but kernel 'square_kernel' is defined in 'prog_kernels'"),
    "wrong_hash": ("FAILED_PRECONDITION", "Warp kernel 'square_kernel' (Python module 'prog_kernels') has other code"),
    "abi_attr": ("FAILED_PRECONDITION", "compiled with jarp's call ABI version 2, and this jarp (jarp.warp call ABI 1) cannot run it"),
    "abi_desc": ("FAILED_PRECONDITION", "described for jarp call ABI 2, and this jarp reads ABI 1"),
    "abi_string": ("INVALID_ARGUMENT", "attribute 'abi' must be an int64 scalar, got string '1'"),
    "desc_int": ("INVALID_ARGUMENT", "attribute 'desc' must be a string, got int64"),
    "missing_desc": ("INVALID_ARGUMENT", "attribute 'desc' is missing (got abi: int64)"),
    "no_attrs": ("INVALID_ARGUMENT", "jarp_warp_call_no_graph: expects exactly the attributes abi (int64) and desc (string)"),
    "extra_attr": ("INVALID_ARGUMENT", "attribute 'plan' is not one of them"),
    "operand_count": ("INVALID_ARGUMENT", "expects 1 operand and 1 result, the call passes 2 operands and 1 result"),
}  # fmt: skip


@pytest.mark.parametrize("launch", LAUNCHES)
def test_garbled_and_crafted_attributes_are_errors_naming_the_problem(kernels: Path, launch: str) -> None:
    report = run("crafted", kernels=kernels, launch=launch)
    check(report.pop("valid"), expected("fwd"))  # a hand-written call with jarp's own attributes runs
    check(report.pop("after"), expected("fwd"))  # and so does jarp's own call after every refusal
    assert report.pop("imported") == [], "a description made jarp import a module"
    assert set(report) == set(CRAFTED)
    for name, (code, text) in CRAFTED.items():
        message = error(report, name)
        assert message.startswith(f"JaxRuntimeError: {code}: "), f"{name}: {message}"
        assert text in message, f"{name}: {message}"


# -- lambdas and closures --------------------------------------------------------------------------------------------


def test_a_lambda_or_closure_callable_is_refused_by_export_naming_it(kernels: Path) -> None:
    report = run("lambda", kernels=kernels)
    for name, qualname in (("lambda", "refuse_lambda.<locals>.<lambda>"), ("closure", "<locals>.closure_func")):
        check(report[name]["value"], X)  # it copies its input, in the process that made it
        message = report[name]["error"]
        assert message is not None, f"jax.export exported a {name}"
        assert message.startswith("ValueError: jax.export: jax_callable("), message
        assert "cannot be exported" in message, message
        assert qualname in message, message
        assert "is a lambda or is defined inside another function" in message, message


def test_a_closure_callable_is_never_served_from_another_process_s_cache_entry(kernels: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = run("cache", cache, "closure", kernels=kernels)
    second = run("cache", cache, "closure", kernels=kernels, launch="python")
    assert (first["closure"]["hits"], second["closure"]["hits"]) == (0, 0)  # its description is process-local
    assert second["closure"]["value"] == first["closure"]["value"]


# -- leases ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("launch", LAUNCHES)
def test_the_plans_of_a_loaded_program_are_released_when_it_is_deleted(
    kernels: Path, exported: Path, launch: str
) -> None:
    report = run("leases", exported, kernels=kernels, launch=launch)
    check(report["value"], expected("fwd"))
    assert (report["before"], report["held"], report["after"]) == (0, 1, 0)
