"""Run a script many times and count clean exits, failures and hangs (a hang at interpreter exit shows up here).

Each run is a fresh ``python`` process with a timeout; runs go ``--parallel`` at a time. A run that exceeds the
timeout is killed and counted as hung; with ``--dump`` its Python stacks are printed first (``faulthandler``, via
``PYTHONFAULTHANDLER`` and ``SIGABRT``, which dumps the stacks of every Python thread) and, when ``gdb`` is
installed, the native stacks of every thread.

    python benchmarks/check_exit.py examples/multi_device.py --runs 100
    python benchmarks/check_exit.py examples/multi_device.py --runs 40 --launch python

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


@dataclass(frozen=True)
class Run:
    """The outcome of one run: ``status`` is ``"ok"``, ``"failed"`` or ``"hung"``."""

    index: int
    status: str
    returncode: int | None
    seconds: float
    stdout: str
    stderr: str


def run_once(index: int, cmd: list[str], env: dict[str, str], timeout: float, dump: bool) -> Run:
    """Run ``cmd`` once; kill it (after dumping its stacks when ``dump``) if it outlives ``timeout`` seconds."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        if dump:
            gdb = shutil.which("gdb")
            if gdb:  # native stacks of every thread (the hang seen before was in XLA joining its worker threads)
                bt = subprocess.run(
                    [gdb, "-p", str(proc.pid), "-batch", "-ex", "thread apply all bt"],
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
                print(f"run {index} hung; gdb backtrace:\n{bt.stdout[-20000:]}", flush=True)
            proc.send_signal(signal.SIGABRT)  # faulthandler prints every Python thread's stack, then the process dies
            try:
                out, err = proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
        else:
            proc.kill()
            out, err = proc.communicate()
        return Run(index, "hung", None, time.perf_counter() - t0, out, err)
    status = "ok" if proc.returncode == 0 else "failed"
    return Run(index, status, proc.returncode, time.perf_counter() - t0, out, err)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("script", type=Path, help="the Python script to run")
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds before a run counts as hung")
    parser.add_argument("--launch", choices=("default", "python"), default="default", help="JARP_LAUNCH for the runs")
    parser.add_argument("--devices", type=int, default=4, help="forced CPU devices (0: leave XLA_FLAGS alone)")
    parser.add_argument("--dump", action="store_true", help="dump the Python stacks of a hung run before killing it")
    args = parser.parse_args()

    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONFAULTHANDLER="1")
    if args.devices:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args.devices}"
    if args.launch == "python":
        env["JARP_LAUNCH"] = "python"
    else:
        env.pop("JARP_LAUNCH", None)
    cmd = [sys.executable, str(args.script)]

    runs: list[Run] = []
    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.parallel) as pool:
        futures = [pool.submit(run_once, i, cmd, env, args.timeout, args.dump) for i in range(args.runs)]
        for f in futures:
            r = f.result()
            runs.append(r)
            if r.status != "ok":
                print(f"run {r.index}: {r.status} (code {r.returncode}, {r.seconds:.1f} s)", flush=True)
                print("  stdout tail:", r.stdout[-500:].replace("\n", "\n    "), flush=True)
                print("  stderr tail:", r.stderr[-4000:].replace("\n", "\n    "), flush=True)
    counts = {s: sum(r.status == s for r in runs) for s in ("ok", "failed", "hung")}
    ok_times = [r.seconds for r in runs if r.status == "ok"]
    median = statistics.median(ok_times) if ok_times else float("nan")
    print(
        f"{args.script} x {args.runs} (launch={args.launch}, {args.parallel} at a time, timeout {args.timeout:.0f} s): "
        f"{counts['ok']} exited 0, {counts['failed']} failed, {counts['hung']} hung; "
        f"median run {median:.2f} s; wall {time.perf_counter() - t0:.0f} s"
    )
    return 0 if counts["ok"] == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
