"""Run a script many times and count clean exits, failures and hangs (a hang at interpreter exit shows up here).

Each run is a fresh ``python`` process with a timeout; runs go ``--parallel`` at a time. A run that exceeds the
timeout is killed and counted as hung; with ``--dump`` its Python stacks are printed first (``faulthandler``, via
``PYTHONFAULTHANDLER`` and ``SIGABRT``, which dumps the stacks of every Python thread) and, when ``gdb`` is
installed, the native stacks of every thread (with ``--save DIR``, whole, into ``DIR/hang_<tag>_<run>.txt``).
``--spy`` preloads ``pthread_exit_spy.so`` (built from ``tools/pthread_exit_spy.c`` with ``cc`` when missing), which
reports every thread that calls ``pthread_exit`` with its native backtrace: the way CPython ends a thread that takes
the GIL during finalization, the cause of the exit hang jarp's exit drain prevents (`NativeHandler.drain_at_exit`).
The script is a path, or a module run with ``-m``.

    python tools/check_exit.py examples/multi_device.py --runs 100
    python tools/check_exit.py tests.support.multi_device_script --runs 100 --launch python
    python tools/check_exit.py tests.support.unawaited_at_exit_script --runs 100 --spy --save /tmp/hangs

By default ``XLA_FLAGS=--xla_force_host_platform_device_count=4`` (as ``examples/multi_device.py`` sets it).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPY_SOURCE = Path(__file__).resolve().parent / "pthread_exit_spy.c"
SPY_MARK = "pthread_exit_spy:"  # the spy's line on stderr


@dataclass(frozen=True)
class Run:
    """The outcome of one run: ``status`` is ``"ok"``, ``"failed"`` or ``"hung"``."""

    index: int
    status: str
    returncode: int | None
    seconds: float
    stdout: str
    stderr: str


def run_once(
    index: int, cmd: list[str], env: dict[str, str], timeout: float, dump: bool, save: Path | None = None, tag: str = ""
) -> Run:
    """Run ``cmd`` once; kill it (after dumping its stacks when ``dump``) if it outlives ``timeout`` seconds.

    With ``save``, a hung run's whole gdb output (``info threads`` and every thread's backtrace) and its stdout
    and stderr go to ``save/hang_<tag>_<index>.txt`` instead of a 20 kB tail on stdout.
    """
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        if dump:
            stacks = native_stacks(proc.pid)
            if stacks is not None:
                if save is not None:
                    path = save / f"hang_{tag}_{index}.txt"
                    path.write_text(stacks)
                    print(f"run {index} hung; gdb backtrace in {path}", flush=True)
                else:
                    print(f"run {index} hung; gdb backtrace:\n{stacks[-20000:]}", flush=True)
            proc.send_signal(signal.SIGABRT)  # faulthandler prints every Python thread's stack, then the process dies
            try:
                out, err = proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
        else:
            proc.kill()
            out, err = proc.communicate()
        if save is not None:
            with (save / f"hang_{tag}_{index}.txt").open("a") as f:
                f.write(f"\n--- process stdout ---\n{out}\n--- process stderr ---\n{err}")
        return Run(index, "hung", None, time.perf_counter() - t0, out, err)
    status = "ok" if proc.returncode == 0 else "failed"
    return Run(index, status, proc.returncode, time.perf_counter() - t0, out, err)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("script", help="the Python script to run: a path, or a module name (run with -m)")
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds before a run counts as hung")
    parser.add_argument("--launch", choices=("default", "python"), default="default", help="JARP_LAUNCH for the runs")
    parser.add_argument("--devices", type=int, default=4, help="forced CPU devices (0: leave XLA_FLAGS alone)")
    parser.add_argument("--dump", action="store_true", help="dump the Python stacks of a hung run before killing it")
    parser.add_argument("--save", type=Path, help="write each hung run's whole gdb dump into this directory")
    parser.add_argument("--tag", default="run", help="a name for the saved dumps")
    parser.add_argument("--spy", action="store_true", help="report every pthread_exit (LD_PRELOAD shim)")
    parser.add_argument("--load", type=int, default=0, help="busy-loop processes to run alongside")
    args = parser.parse_args()
    if args.save is not None:
        args.save.mkdir(parents=True, exist_ok=True)
        args.dump = True

    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONFAULTHANDLER="1")
    if args.devices:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args.devices}"
    if args.launch == "python":
        env["JARP_LAUNCH"] = "python"
    else:
        env.pop("JARP_LAUNCH", None)
    # This checkout's jarp and tests (scripts import ``tests.support``), whatever jarp is installed.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    if args.spy:
        env["LD_PRELOAD"] = str(spy_library())
    is_path = args.script.endswith(".py") or os.sep in args.script
    cmd = [sys.executable, str(Path(args.script).resolve())] if is_path else [sys.executable, "-m", args.script]
    load = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]

    runs: list[Run] = []
    t0 = time.perf_counter()
    try:
        with ThreadPoolExecutor(args.parallel) as pool:
            futures = [
                pool.submit(run_once, i, cmd, env, args.timeout, args.dump, args.save, args.tag)
                for i in range(args.runs)
            ]
            for f in futures:
                r = f.result()
                runs.append(r)
                if r.status != "ok" or SPY_MARK in r.stderr:
                    print(f"run {r.index}: {r.status} (code {r.returncode}, {r.seconds:.1f} s)", flush=True)
                    print("  stdout tail:", r.stdout[-500:].replace("\n", "\n    "), flush=True)
                    print("  stderr tail:", r.stderr[-4000:].replace("\n", "\n    "), flush=True)
    finally:
        for q in load:
            q.kill()
            q.wait()
    counts = {s: sum(r.status == s for r in runs) for s in ("ok", "failed", "hung")}
    ok_times = [r.seconds for r in runs if r.status == "ok"]
    median = statistics.median(ok_times) if ok_times else float("nan")
    spied = [r.index for r in runs if SPY_MARK in r.stderr]
    print(
        f"{args.script} x {args.runs} (launch={args.launch}, {args.parallel} at a time, {args.load} busy loops, "
        f"timeout {args.timeout:.0f} s, load average at the end {os.getloadavg()[0]:.1f}): "
        f"{counts['ok']} exited 0, {counts['failed']} failed, {counts['hung']} hung "
        f"{[r.index for r in runs if r.status == 'hung']}; "
        + (f"runs with a pthread_exit: {len(spied)} {spied}; " if args.spy else "")
        + f"median run {median:.2f} s; wall {time.perf_counter() - t0:.0f} s"
    )
    return 0 if counts["ok"] == args.runs else 1


def native_stacks(pid: int) -> str | None:
    """gdb's ``info threads`` and every thread's backtrace of process ``pid`` (and gdb's stderr); None without gdb.

    The hang at exit this script was written for was a thread pool joining its workers: only native stacks show it.
    """
    gdb = shutil.which("gdb")
    if gdb is None:
        return None
    bt = subprocess.run(
        [gdb, "-p", str(pid), "-batch", "-ex", "info threads", "-ex", "thread apply all bt"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return bt.stdout + "\n--- gdb stderr ---\n" + bt.stderr


def spy_library() -> Path:
    """The pthread_exit spy shim, compiled next to its source with the system's ``cc`` when missing."""
    lib = SPY_SOURCE.with_suffix(".so")
    if not lib.exists():
        subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(SPY_SOURCE), "-ldl"], check=True)
    return lib


if __name__ == "__main__":
    sys.exit(main())
