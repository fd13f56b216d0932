"""Project automation: `python3 -m pip install nox && python3 -m nox -s <session>`.

Sessions:
    tests    the test suite: a float32 process, a `JAX_ENABLE_X64=1` process running the `x64` tests, then the
             bridge tests (marked `launch_paths`) again on the Python launch path (`JARP_LAUNCH=python`)
    lint     ruff check and ruff format --check
    docs     mkdocs build --strict (the site lands in ./site)
    example  examples/fit_stiffness.py, the flagship example (extra arguments after `--` go to the script)
    hyperelastic  examples/hyperelastic.py, the 3-D FEM example (extra arguments after `--` go to the script)

Virtual environments live in .nox/ and are reused between runs; each run still asks pip to install the session's
requirements, which is quick when nothing changed. `nox -s tests -- -k vmap` forwards arguments to both pytest runs.
"""

from __future__ import annotations

import os

import nox

nox.needs_version = ">=2024.3.2"
nox.options.default_venv_backend = "venv"  # uv is not guaranteed to be installed
nox.options.reuse_venv = "yes"
nox.options.error_on_missing_interpreters = True
nox.options.sessions = ["lint", "tests", "docs"]

PYTHON = "3.11"
RUFF = "ruff>=0.17,<0.18"  # also pinned in pyproject's `dev` extra
# Hypothesis's fixed-seed profile (tests/conftest.py): the same examples on every run, so that CI (which runs this
# session through .ci/run) is repeatable. JARP_HYPOTHESIS_PROFILE=default brings back the random search.
HYPOTHESIS = {"JARP_HYPOTHESIS_PROFILE": os.environ.get("JARP_HYPOTHESIS_PROFILE") or "ci"}
# Keep a developer's own JAX precision setting out of the float32 runs.
FLOAT32 = {"JAX_ENABLE_X64": "0"}
# pytest-xdist: one worker process per CPU, each test file on one worker (a file's tests share its Warp module
# builds and its fixtures). Most of the suite's time is single-threaded (Warp builds, subprocesses), so two cores
# take about 0.57 of the serial time. `nox -s tests -- -n 0` runs serially.
WORKERS = ["-n", "auto", "--dist", "loadfile"]


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Run the test suite in a float32 process, the `x64` tests in a float64 process, then the bridge tests on the Python path.

    Kernels launch through jarp's native FFI handler by default; the `launch_paths` tests run once more with
    `JARP_LAUNCH=python`, the path jarp falls back to where the handler cannot be built.

    Hypothesis runs derandomised (the `ci` profile of tests/conftest.py) unless `JARP_HYPOTHESIS_PROFILE` says
    otherwise. Each run spreads the test files over one pytest-xdist worker per CPU (`-- -n 0`: serially).

    pytest exits with 5 when it collected no test; nox treats that as a failure, so an empty run never passes.
    """
    session.install("-e", ".[test]")
    session.run("pytest", *WORKERS, *session.posargs, env={**FLOAT32, **HYPOTHESIS})
    session.run("pytest", *WORKERS, "-m", "x64", *session.posargs, env={"JAX_ENABLE_X64": "1", **HYPOTHESIS})
    session.run(
        "pytest",
        *WORKERS,
        "-m",
        "launch_paths",
        *session.posargs,
        env={**FLOAT32, **HYPOTHESIS, "JARP_LAUNCH": "python"},
    )


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """Lint and check formatting with ruff (read-only; fix with `ruff check --fix . && ruff format .`)."""
    session.install(RUFF)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


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
