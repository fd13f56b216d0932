"""Run a script many times, count clean exits and hangs, and save the full gdb backtraces of every hung run.

Like ``benchmarks/check_exit.py`` but keeps the whole ``thread apply all bt`` (and ``info threads``) of each hung
run in ``<out>/hang_bt_<tag>_<run>.txt``, can preload ``pthread_exit_spy.so`` (which reports every thread that calls
``pthread_exit``), and can add busy background load.

    python benchmarks/exit_hang/hunt.py benchmarks/exit_hang/md_jarp.py --runs 200 --parallel 4 --tag jarp --spy
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def run_once(i: int, cmd: list[str], env: dict[str, str], timeout: float, out: Path, tag: str) -> tuple[str, str]:
    """Run once; on timeout save gdb's backtraces of every thread, then kill. Returns (status, stderr)."""
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        so, se = proc.communicate(timeout=timeout)
        return ("ok" if proc.returncode == 0 else f"failed({proc.returncode})"), se
    except subprocess.TimeoutExpired:
        gdb = shutil.which("gdb")
        path = out / f"hang_bt_{tag}_{i}.txt"
        if gdb:
            bt = subprocess.run(
                [gdb, "-p", str(proc.pid), "-batch", "-ex", "info threads", "-ex", "thread apply all bt"],
                capture_output=True,
                text=True,
                timeout=300,
            )
            path.write_text(bt.stdout + "\n--- gdb stderr ---\n" + bt.stderr)
        proc.kill()
        so, se = proc.communicate()
        with path.open("a") as f:
            f.write("\n--- process stdout ---\n" + so + "\n--- process stderr ---\n" + se)
        return "hung", se


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("script", type=Path)
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--parallel", type=int, default=4)
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--tag", default="run")
    p.add_argument("--launch", choices=("default", "python"), default="default")
    p.add_argument("--spy", action="store_true", help="LD_PRELOAD pthread_exit_spy.so")
    p.add_argument("--load", type=int, default=0, help="busy-loop processes to run alongside")
    p.add_argument("--out", type=Path, default=ROOT)
    p.add_argument("--env", action="append", default=[], help="extra KEY=VALUE for the runs")
    args = p.parse_args()

    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=4")
    env.pop("JARP_LAUNCH", None)
    if args.launch == "python":
        env["JARP_LAUNCH"] = "python"
    if args.spy:
        env["LD_PRELOAD"] = str(HERE / "pthread_exit_spy.so")
    for kv in args.env:
        k, v = kv.split("=", 1)
        env[k] = v
    cmd = [sys.executable, str(args.script)]
    load = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    t0 = time.perf_counter()
    try:
        with ThreadPoolExecutor(args.parallel) as pool:
            results = list(
                pool.map(lambda i: run_once(i, cmd, env, args.timeout, args.out, args.tag), range(args.runs))
            )
    finally:
        for q in load:
            q.kill()
            q.wait()
    statuses = [s for s, _ in results]
    spied = [i for i, (_, se) in enumerate(results) if "pthread_exit_spy" in se]
    hung = [i for i, s in enumerate(statuses) if s == "hung"]
    failed = [(i, s) for i, s in enumerate(statuses) if s.startswith("failed")]
    for i, (s, se) in enumerate(results):
        if s != "ok" or "pthread_exit_spy" in se:
            print(f"--- run {i}: {s}; stderr tail:\n{se[-3000:]}", flush=True)
    print(
        f"{args.script.name} [{args.tag}] x {args.runs} (launch={args.launch}, {args.parallel} at a time, "
        f"load {args.load}, timeout {args.timeout:.0f} s): {statuses.count('ok')} ok, {len(failed)} failed, "
        f"{len(hung)} hung {hung}; runs with a pthread_exit: {len(spied)} {spied}; wall {time.perf_counter() - t0:.0f} s",
        flush=True,
    )
    return 0 if not hung and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
