"""Hostile input: reads and writes out of bounds, and dims too large.

What jarp mostly cannot catch: Warp kernels index raw memory and Warp does no bounds checks on the CPU unless
``wp.config.mode == "debug"``. Each such call (an out-of-range gather index, a launch larger than the input, inputs of
mismatched lengths, a launch whose rank differs from the kernel's ``wp.tid()``) runs in its own process (forked:
`tests.support.forked`), and the tests check only that the process ends in time without taking the test run down.
The calls jarp can refuse (an output smaller than the launch of a kernel that writes every thread's element, output
dims whose element count overflows int64, dims too large for XLA or Warp) must raise a ``ValueError`` naming the option. The modules, their NumPy references and
the checks are in ``tests/support/hostile.py``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import time
from dataclasses import dataclass

import jax.numpy as jnp
import pytest

from tests.support import forked
from tests.support.hostile import (
    CASES,
    ERRORS,
    _no_hang,  # noqa: F401 (autouse fixture)
    check_error,
)
from tests.support.paths import REPO, child_environment

pytestmark = pytest.mark.launch_paths  # also run on the Python launch path (noxfile.py)

SUBPROCESS_TIMEOUT = 240


# ======================================================================================================================
# What jarp cannot catch: out-of-bounds indexing inside kernels. Each scenario runs in its own interpreter.
# ======================================================================================================================

_PRELUDE = """
import sys
import jax, jax.numpy as jnp, numpy as np, warp as wp
wp.config.log_level = wp.LOG_WARNING  # no banner, no per-module load lines
{setup}
from jarp.warp import jax_callable, jax_kernel
from tests.support import kernels_hostile as kh
try:
    out = {call}
    print("RESULT", [np.asarray(o).tolist() for o in out], flush=True)
except Exception as e:
    print("RAISED", type(e).__name__, str(e), flush=True)
"""

# What each did on the CPU of the machine these tests were written on (warp-lang 1.19, jax 0.10) is noted above it.
SCENARIOS = {
    # an index just past the end of the table: Warp reads whatever lies there (no bounds check on the CPU).
    # Seen: exit 0, out[1] = 0.0 or 4.6e-41 (garbage), out[0] and out[2] right.
    "gather past the end": ("", "jax_kernel(kh.pick_kernel)(jnp.array([0, 5, 1], jnp.int32), jnp.arange(4.0))"),
    # far out of range (a negative index: Warp indexes from the end like Python, then reads 400 MB before the table).
    # Seen: SIGSEGV.
    "gather far out of range, jax_callable": (
        "",
        "jax_callable(kh.pick_func)(jnp.array([0, -(10**8), 1], jnp.int32), jnp.arange(4.0))",
    ),
    # Warp's debug build checks bounds, but on the CPU a failed check aborts the process, it does not raise.
    # Seen: "Assertion failed: 'i >= -arr.shape[0] && i < arr.shape[0]'", then SIGILL.
    "gather past the end, wp.config.mode = 'debug'": (
        "wp.config.mode = 'debug'",
        "jax_kernel(kh.pick_kernel)(jnp.array([0, 5, 1], jnp.int32), jnp.arange(4.0))",
    ),
    # launch_dims beyond the input the kernel reads at its thread index. Seen: SIGSEGV.
    "launch larger than the input": ("", "jax_kernel(kh.affine_kernel)(jnp.ones(4), launch_dims=2**22)"),
    # arrays of mismatched lengths: the launch follows `p`, `w` is read past its end.
    # Seen: exit 0, out[:2] right, out[2:] garbage (a silently wrong answer; jarp cannot know how a kernel indexes).
    "mismatched input lengths": ("", "jax_kernel(kh.weigh_vec3_kernel)(jnp.ones((64, 3)), jnp.ones(2))"),
    # a 1-D launch of a kernel that unpacks `i, j = wp.tid()`: i runs past the output's rows (j stays 0).
    # Seen: a result, then "double free or corruption" / "corrupted size vs. prev_size" and SIGABRT at exit.
    "launch rank differs from wp.tid()": (
        "",
        "jax_kernel(kh.grid_kernel)(jnp.ones((2, 3)), launch_dims=(64,), output_dims=(2, 3))",
    ),
    # refused (test_output_dims_overflowing_int64_are_refused): a shape whose element count overflows int64. Plain JAX
    # aborts on it (jnp.zeros((2**31, 2**31))), but output_dims is jarp's option, checked by jarp. Seen without that
    # check: "terminate called after throwing an instance of 'absl::BadStatusOrAccess' ... overflow in static extent
    # product", SIGABRT.
    "output dims overflowing int64": (
        "",
        "jax_kernel(kh.grid_kernel)(jnp.ones((2, 2)), output_dims=(2**31, 2**31))",
    ),
    # refused (test_output_smaller_than_the_launch_of_an_overwriting_kernel_is_refused): jarp knows this kernel writes
    # out[i] on every thread, so an output smaller than the launch is a certain out-of-bounds write. Seen without that
    # check: a result, then SIGSEGV or SIGABRT (heap corruption).
    "output smaller than the launch": (
        "",
        "jax_kernel(kh.weigh_vec3_kernel)(jnp.ones((64, 3)), jnp.ones(64), output_dims=2)",
    ),
}


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str

    def report(self) -> str:
        return f"exit code {self.returncode}\nstdout:\n{self.stdout[-2000:]}\nstderr:\n{self.stderr[-3000:]}"


_running: dict[str, forked.Forked | subprocess.Popen[str]] = {}


@pytest.fixture(scope="module", autouse=True)
def _start_scenarios(request):
    """Start every scenario in its own interpreter when the module's first test runs (if any scenario test is
    selected), so that they run alongside one another and the in-process test; stop any still running at the end."""
    if any("scenarios" in getattr(item, "fixturenames", ()) for item in request.session.items):
        env = child_environment()
        env["JAX_ENABLE_X64"] = "0"
        env["JAX_PLATFORMS"] = "cpu"
        for name, (setup, expr) in SCENARIOS.items():
            _running[name] = forked.start(
                [sys.executable, "-c", _PRELUDE.format(setup=setup, call=expr)], cwd=REPO, env=env
            )
    yield
    for proc in _running.values():
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    _running.clear()


@pytest.fixture(scope="module")
def scenarios() -> dict[str, Outcome]:
    """The outcome of every scenario; each ends by itself or is killed at the timeout (a hang)."""
    outcomes = {}
    deadline = time.monotonic() + SUBPROCESS_TIMEOUT  # they run concurrently: one deadline for all
    for name, proc in _running.items():
        try:
            stdout, stderr = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            stdout += f"\nHUNG: killed after {SUBPROCESS_TIMEOUT} s"
        outcomes[name] = Outcome(proc.returncode, stdout, stderr)
    return outcomes


# the scenarios jarp refuses, each checked by its own test below; the others are undefined behaviour
REFUSED_SCENARIOS = ("output smaller than the launch", "output dims overflowing int64")


@pytest.mark.parametrize("name", [n for n in SCENARIOS if n not in REFUSED_SCENARIOS])
def test_out_of_bounds_indexing_ends_without_hanging_or_taking_the_run_down(scenarios, name):
    """Undefined behaviour inside the kernel (Warp's semantics): the process may print a result, raise, or die by a
    signal; it must end in time, and this test run goes on either way."""
    outcome = scenarios[name]
    assert "HUNG" not in outcome.stdout, outcome.report()
    assert outcome.returncode == 0 or outcome.returncode < 0 or outcome.returncode > 128, outcome.report()
    if outcome.returncode == 0 and "RESULT" in outcome.stdout and name.startswith("gather"):
        # the in-range entries are right whatever the out-of-range one read
        (result,) = ast.literal_eval(outcome.stdout.split("RESULT", 1)[1].strip())
        assert (result[0], result[2]) == (0.0, 1.0), outcome.report()


def test_output_smaller_than_the_launch_of_an_overwriting_kernel_is_refused(scenarios):
    outcome = scenarios["output smaller than the launch"]
    assert outcome.returncode == 0, outcome.report()
    assert "RAISED ValueError" in outcome.stdout, outcome.report()
    assert "output_dims" in outcome.stdout, outcome.report()


def test_output_dims_overflowing_int64_are_refused(scenarios):
    outcome = scenarios["output dims overflowing int64"]
    assert outcome.returncode == 0, outcome.report()
    assert "RAISED ValueError" in outcome.stdout, outcome.report()
    assert "output_dims" in outcome.stdout, outcome.report()


@pytest.mark.parametrize("option", [{"output_dims": 2**70}, {"launch_dims": 2**33, "output_dims": 4}])
def test_dims_too_large_for_xla_or_warp_are_refused_naming_the_option(option):
    with pytest.raises(ERRORS) as excinfo:
        CASES["affine"].kernel(jnp.ones(4), **option)
    check_error(excinfo, *option)
