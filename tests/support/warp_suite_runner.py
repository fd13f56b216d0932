"""Run NVIDIA Warp's own JAX interop tests with Warp's entry points replaced by jarp's.

Warp ships its JAX interop tests in the wheel (``warp/tests/interop/test_jax.py``); they are the executable
specification of the semantics users port from Warp's bridge to jarp. This module

- locates that file in the installed wheel (never a machine path),
- replaces Warp's entry points by jarp's (`install_jarp_entry_points`): ``wp.jax_kernel`` by
  `jarp.warp.jax_kernel`, ``wp.jax_callable`` by `jarp.warp.jax_callable`, the same names in
  ``warp._src.jax.ffi`` (which the test file imports from), and ``register_ffi_callback`` by
  ``jarp.warp.register_ffi_callback`` once jarp has it,
- runs Warp's ``TestJax`` case with `unittest` in a child process on two CPU devices
  (``XLA_FLAGS=--xla_force_host_platform_device_count=2``), and writes one JSON line per test.

The child process also gets a ``sitecustomize`` on its ``PYTHONPATH`` that installs the same replacements, so the
grandchild processes some of Warp's tests start (``aux_test_jax_cpu_ffi.py``, a re-run of ``test_jax.py``) go
through jarp too.

Run by ``tests/warp/compat/test_warp_suite.py``; by hand::

    python -m tests.support.warp_suite_runner            # prints one line per test
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import traceback
import unittest
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .paths import REPO

#: The Warp module holding the JAX interop tests, inside the installed wheel.
WARP_TEST_MODULE = "warp.tests.interop.test_jax"
#: The unittest case Warp registers every JAX test on (``add_function_test(TestJax, ...)``).
WARP_TEST_CASE = "TestJax"
#: Environment variable that makes the generated ``sitecustomize`` install jarp's entry points.
PATCH_ENV = "JARP_WARP_SUITE_PATCH"
#: Environment variable holding the suite's ``WARP_CACHE_PATH`` (empty: Warp's default), restored in grandchildren.
CACHE_ENV = "JARP_WARP_SUITE_CACHE"
#: Environment variable naming the file every call of a replaced entry point appends a line to (in any process).
CALL_LOG_ENV = "JARP_WARP_SUITE_CALL_LOG"

#: The outcomes a test can have, as recorded by the child process (plus ``timeout`` and ``not_run``).
OUTCOMES = ("passed", "failed", "error", "skipped", "expected_failure", "unexpected_success", "timeout", "not_run")

_SITECUSTOMIZE = """\
import os
if os.environ.get({env!r}):
    import sys
    # Warp's subprocess test points its grandchildren at an empty kernel cache; give them the suite's own, so they
    # load what the suite built instead of compiling every module again (the checks do not depend on the cache)
    cache = os.environ.get({cache_env!r})
    if cache is not None:
        if cache:
            os.environ["WARP_CACHE_PATH"] = cache
        else:
            os.environ.pop("WARP_CACHE_PATH", None)
    sys.path.insert(0, {root!r})
    from tests.support.warp_suite_runner import install_jarp_entry_points
    install_jarp_entry_points()
"""


@dataclasses.dataclass(frozen=True)
class Outcome:
    """The outcome of one of Warp's tests run through jarp.

    Args:
        name: the unittest method name on ``TestJax`` (device suffix included, e.g. ``test_ffi_vmap_add_sequential_cpu``).
        outcome: one of `OUTCOMES`.
        detail: the traceback of a failure or error (sub-test failures included), or a skip reason.
        jarp_calls: how many times the test called jarp's ``jax_kernel``/``jax_callable``/``register_ffi_callback``,
            in the runner process or in processes it started.
        seconds: wall time of the test.

    Example:
        ```python
        Outcome("test_ffi_jax_kernel_add_cpu", "passed", "", 1, 0.4)
        ```
    """

    name: str
    outcome: str
    detail: str = ""
    jarp_calls: int = 0
    seconds: float = 0.0


def warp_test_file() -> pathlib.Path:
    """Locate Warp's ``test_jax.py`` in the installed wheel.

    Returns:
        The path of the file, found through the import system (``importlib.util.find_spec``).

    Example:
        ```python
        assert warp_test_file().name == "test_jax.py"
        ```
    """
    spec = importlib.util.find_spec(WARP_TEST_MODULE)
    if spec is None or spec.origin is None:
        warp_spec = importlib.util.find_spec("warp")
        where = warp_spec.submodule_search_locations if warp_spec is not None else "nowhere"
        raise FileNotFoundError(
            f"{WARP_TEST_MODULE} is not in the installed Warp (package at {where}); "
            "install a warp-lang wheel that ships its tests"
        )
    return pathlib.Path(spec.origin)


# --------------------------------------------------------------------------------------------------------------------
# replacing Warp's entry points (in the child and grandchild processes only)
# --------------------------------------------------------------------------------------------------------------------

_installed: list[str] = []


def _counted(func: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``func`` so that every call appends a line to the call log (shared by the child and its children)."""
    log = os.environ.get(CALL_LOG_ENV)

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if log:
            with open(log, "a", encoding="utf-8") as f:
                f.write(f"{os.getpid()} {func.__name__}\n")
        return func(*args, **kwargs)

    return wrapper


def _calls_so_far() -> int:
    log = os.environ.get(CALL_LOG_ENV)
    if not log or not os.path.exists(log):
        return 0
    with open(log, encoding="utf-8") as f:
        return sum(1 for _ in f)


def install_jarp_entry_points() -> list[str]:
    """Replace Warp's JAX entry points by jarp's, in this process.

    Patches ``warp.jax_kernel``, ``warp.jax_callable`` and the same names in ``warp._src.jax.ffi``; and
    ``register_ffi_callback`` there when `jarp.warp` has one (otherwise Warp's own stays, and the tests using it
    exercise Warp). Call it before Warp's test module is imported: it binds ``register_ffi_callback`` at import.

    Returns:
        The names replaced, as ``module.attribute``.

    Example:
        ```python
        install_jarp_entry_points()
        import warp as wp, jarp.warp
        (y,) = wp.jax_kernel(kernel)(x)  # a jarp.warp.JaxKernel
        ```
    """
    import warp
    import warp._src.jax.ffi as warp_ffi

    import jarp.warp

    if getattr(warp.jax_kernel, "_jarp_warp_suite", False):  # already installed (by the sitecustomize)
        return list(_installed)
    replaced = []
    names = ["jax_kernel", "jax_callable"]
    if hasattr(jarp.warp, "register_ffi_callback"):
        names.append("register_ffi_callback")
    for name in names:
        replacement = _counted(getattr(jarp.warp, name))
        replacement._jarp_warp_suite = True  # type: ignore[attr-defined]
        for module in (warp, warp_ffi):
            if hasattr(module, name):
                setattr(module, name, replacement)
                replaced.append(f"{module.__name__}.{name}")
    _installed[:] = replaced
    return replaced


# --------------------------------------------------------------------------------------------------------------------
# the child process: run Warp's TestJax with unittest, one JSON line per test
# --------------------------------------------------------------------------------------------------------------------


class _RecordingResult(unittest.TestResult):
    """A unittest result that appends one JSON line per finished test to a file (so a timeout loses nothing)."""

    def __init__(self, out: Any) -> None:
        super().__init__()
        self._out = out
        self._detail: list[str] = []
        self._outcome = "passed"
        self._start = 0.0
        self._calls = 0

    def startTest(self, test: unittest.TestCase) -> None:
        super().startTest(test)
        self._detail, self._outcome, self._start, self._calls = [], "passed", time.monotonic(), _calls_so_far()
        self._out.write(json.dumps({"start": test._testMethodName}) + "\n")
        self._out.flush()

    def stopTest(self, test: unittest.TestCase) -> None:
        super().stopTest(test)
        record = Outcome(
            test._testMethodName,
            self._outcome,
            "\n".join(self._detail),
            _calls_so_far() - self._calls,
            round(time.monotonic() - self._start, 3),
        )
        self._out.write(json.dumps(dataclasses.asdict(record)) + "\n")
        self._out.flush()

    def _set(self, outcome: str, detail: str) -> None:
        if self._outcome in ("passed", "skipped") or outcome == "error":
            self._outcome = outcome
        self._detail.append(detail)

    def addError(self, test: unittest.TestCase, err: Any) -> None:
        super().addError(test, err)
        self._set("error", self._exc_info_to_string(err, test))

    def addFailure(self, test: unittest.TestCase, err: Any) -> None:
        super().addFailure(test, err)
        self._set("failed", self._exc_info_to_string(err, test))

    def addSubTest(self, test: unittest.TestCase, subtest: unittest.TestCase, err: Any) -> None:
        super().addSubTest(test, subtest, err)
        if err is not None:
            failed = issubclass(err[0], test.failureException)
            self._set("failed" if failed else "error", f"{subtest}:\n{self._exc_info_to_string(err, test)}")

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:
        super().addSkip(test, reason)
        self._set("skipped", reason)

    def addExpectedFailure(self, test: unittest.TestCase, err: Any) -> None:
        super().addExpectedFailure(test, err)
        self._set("expected_failure", self._exc_info_to_string(err, test))

    def addUnexpectedSuccess(self, test: unittest.TestCase) -> None:
        super().addUnexpectedSuccess(test)
        self._set("unexpected_success", "")


def _child_main(output: str, names: Sequence[str]) -> None:
    """Run the selected tests of Warp's ``TestJax`` (all when ``names`` is empty), recording into ``output``."""
    with open(output, "a", encoding="utf-8") as out:
        try:
            replaced = install_jarp_entry_points()
            spec = importlib.util.find_spec(WARP_TEST_MODULE)
            module = importlib.util.module_from_spec(spec)
            sys.modules[WARP_TEST_MODULE] = module
            spec.loader.exec_module(module)
            case = getattr(module, WARP_TEST_CASE)
            available = unittest.TestLoader().getTestCaseNames(case)
            out.write(json.dumps({"replaced": replaced, "collected": list(available)}) + "\n")
            out.flush()
            selected = [n for n in available if not names or n in names]
            suite = unittest.TestSuite(case(n) for n in selected)
            suite.run(_RecordingResult(out))
        except BaseException:
            out.write(json.dumps({"crash": traceback.format_exc()}) + "\n")
        out.write(json.dumps({"done": True}) + "\n")
        out.flush()


# --------------------------------------------------------------------------------------------------------------------
# the parent side: launch the child, parse its records
# --------------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SuiteRun:
    """The result of one run of Warp's suite through jarp.

    Args:
        outcomes: one `Outcome` per collected test, by name.
        collected: the test names Warp registered in the child (on this machine's devices).
        replaced: the Warp attributes that were replaced by jarp's.
        log: the child's stdout and stderr (tail), for diagnostics.
        seconds: wall time of the child.
        exit: how the child ended: ``"exit code <n>"``, or ``"timed out"`` (killed, even if every test had
            finished: a hang at interpreter exit shows up here).

    Example:
        ```python
        run = run_suite()
        assert run.outcomes["test_ffi_jax_kernel_add_cpu"].outcome == "passed"
        ```
    """

    outcomes: dict[str, Outcome]
    collected: tuple[str, ...]
    replaced: tuple[str, ...]
    log: str
    seconds: float
    exit: str = "exit code 0"


def child_environment(sitecustomize_dir: str) -> dict[str, str]:
    """The environment of the child: CPU only, two host devices, jarp from this repository first.

    Args:
        sitecustomize_dir: the directory holding the generated ``sitecustomize.py``.

    Returns:
        A copy of ``os.environ`` with the settings applied.

    Example:
        ```python
        env = child_environment(tmp)
        assert env["XLA_FLAGS"] == "--xla_force_host_platform_device_count=2"
        ```
    """
    env = os.environ.copy()
    env.update(
        {
            "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
            "JAX_PLATFORMS": "cpu",
            "CUDA_VISIBLE_DEVICES": "",
            PATCH_ENV: "1",
            CACHE_ENV: env.get("WARP_CACHE_PATH", ""),
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), sitecustomize_dir, env.get("PYTHONPATH", "")) if p),
        }
    )
    env.pop("JAX_ENABLE_X64", None)  # Warp's test module turns x64 on itself
    return env


def run_suite(names: Iterable[str] = (), timeout: float = 240.0) -> SuiteRun:
    """Run Warp's JAX interop tests through jarp in a child process.

    Args:
        names: the ``TestJax`` method names to run; all when empty.
        timeout: seconds before the child is killed; the test then running is recorded as ``timeout`` and the ones
            after it as ``not_run``.

    Returns:
        A `SuiteRun`.

    Example:
        ```python
        run = run_suite(["test_ffi_jax_kernel_add_cpu"], timeout=60)
        ```
    """
    names = list(names)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="jarp-warp-suite-") as tmp:
        (pathlib.Path(tmp) / "sitecustomize.py").write_text(
            _SITECUSTOMIZE.format(env=PATCH_ENV, cache_env=CACHE_ENV, root=str(REPO))
        )
        output = pathlib.Path(tmp) / "results.jsonl"
        output.touch()
        env = child_environment(tmp)
        env[CALL_LOG_ENV] = str(pathlib.Path(tmp) / "calls.log")
        command = [sys.executable, "-m", "tests.support.warp_suite_runner", "--child", str(output), *names]
        # the child is not a process group leader of its own grandchildren's fate: kill the whole group on timeout
        proc = subprocess.Popen(
            command,
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        timed_out = False
        try:
            log, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, 9)
            log, _ = proc.communicate()
        lines = [json.loads(line) for line in output.read_text().splitlines() if line.strip()]
    run = _parse(lines, names, log or "", timed_out, time.monotonic() - start)
    return dataclasses.replace(run, exit="timed out" if timed_out else f"exit code {proc.returncode}")


def _parse(lines: list[dict[str, Any]], names: list[str], log: str, timed_out: bool, seconds: float) -> SuiteRun:
    outcomes: dict[str, Outcome] = {}
    collected: list[str] = []
    replaced: list[str] = []
    running: str | None = None
    crash = ""
    for line in lines:
        if "collected" in line:
            collected, replaced = line["collected"], line["replaced"]
        elif "start" in line:
            running = line["start"]
        elif "crash" in line:
            crash = line["crash"]
        elif "outcome" in line:
            outcomes[line["name"]] = Outcome(**line)
            running = None
    why = "the child process timed out" if timed_out else "the child process died"
    if running is not None:
        outcomes[running] = Outcome(running, "timeout" if timed_out else "error", f"{why} in this test\n{log[-4000:]}")
    for name in collected or names:
        if name not in outcomes and (not names or name in names):
            outcomes[name] = Outcome(name, "not_run", f"{why} before this test ran\n{crash}")
    return SuiteRun(outcomes, tuple(collected), tuple(replaced), (crash + "\n" + log)[-20000:], seconds)


def _main(argv: Sequence[str]) -> None:
    if argv[:1] == ["--child"]:
        _child_main(argv[1], argv[2:])
        return
    run = run_suite(argv)
    for name in sorted(run.outcomes):
        o = run.outcomes[name]
        first = o.detail.strip().splitlines()[-1:] if o.outcome not in ("passed",) else []
        print(f"{o.outcome:18s} {o.seconds:7.2f}s calls={o.jarp_calls:<3d} {name}  {' '.join(first)[:160]}")
    print(f"{len(run.outcomes)} tests in {run.seconds:.0f} s; replaced: {', '.join(run.replaced)}")


if __name__ == "__main__":
    # run as the importable module, so that the sitecustomize's patches and the child share one module state
    from tests.support import warp_suite_runner

    warp_suite_runner._main(sys.argv[1:])
