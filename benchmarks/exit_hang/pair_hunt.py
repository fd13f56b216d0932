"""Run pairs of ``tests/warp/distributed_worker.py`` (two jax.distributed processes) and count clean exits and hangs.

    python benchmarks/exit_hang/pair_hunt.py --root . --pairs 40 --parallel 2 --tag dist

``--root`` is the checkout whose ``tests.warp.distributed_worker`` (and ``jarp``) the workers import (they run with
that directory as their working directory). A pair whose processes have not both exited within ``--timeout`` counts
as hung; the full gdb backtraces of its live processes go to ``<out>/hang_bt_<tag>_<pair>_<process>.txt``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_pair(i: int, root: Path, env: dict[str, str], timeout: float, out: Path, tag: str) -> tuple[str, str]:
    """Run one pair; returns (status, stderr of both)."""
    port = _free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.warp.distributed_worker", str(port), str(p)],
            cwd=root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for p in range(2)
    ]
    deadline = time.monotonic() + timeout
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(0.05)
    status = "ok"
    for k, p in enumerate(procs):
        if p.poll() is None:
            status = "hung"
            gdb = shutil.which("gdb")
            if gdb:
                bt = subprocess.run(
                    [gdb, "-p", str(p.pid), "-batch", "-ex", "info threads", "-ex", "thread apply all bt"],
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
                (out / f"hang_bt_{tag}_{i}_{k}.txt").write_text(bt.stdout)
            p.kill()
    errs = []
    for k, p in enumerate(procs):
        so, se = p.communicate()
        if status == "ok" and p.returncode != 0:
            status = f"failed({p.returncode})"
        if status == "ok" and "RESULT " not in so:
            status = "no result"
        errs.append(f"--- process {k} (code {p.returncode}) ---\n{se[-3000:]}")
    return status, "\n".join(errs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, required=True)
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=90.0)
    ap.add_argument("--tag", default="dist")
    ap.add_argument("--spy", action="store_true", help="LD_PRELOAD pthread_exit_spy.so")
    ap.add_argument("--launch", choices=("default", "python"), default="default")
    ap.add_argument("--out", type=Path, default=HERE.parent.parent)
    args = ap.parse_args()
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=2")
    env.pop("JARP_LAUNCH", None)
    env.pop("PYTHONPATH", None)
    if args.launch == "python":
        env["JARP_LAUNCH"] = "python"
    if args.spy:
        env["LD_PRELOAD"] = str(HERE / "pthread_exit_spy.so")
    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.parallel) as pool:
        results = list(
            pool.map(lambda i: run_pair(i, args.root, env, args.timeout, args.out, args.tag), range(args.pairs))
        )
    for i, (status, err) in enumerate(results):
        if status != "ok" or "pthread_exit_spy" in err:
            print(f"=== pair {i}: {status}\n{err}", flush=True)
    statuses = [s for s, _ in results]
    spied = [i for i, (_, e) in enumerate(results) if "pthread_exit_spy" in e]
    print(
        f"distributed pairs [{args.tag}] x {args.pairs} ({args.root}, launch={args.launch}, {args.parallel} pairs at a time, timeout "
        f"{args.timeout:.0f} s): {statuses.count('ok')} ok, {statuses.count('hung')} hung, "
        f"{len(statuses) - statuses.count('ok') - statuses.count('hung')} failed; pairs with a pthread_exit: "
        f"{len(spied)} {spied}; wall {time.perf_counter() - t0:.0f} s",
        flush=True,
    )
    return 0 if statuses.count("ok") == args.pairs else 1


if __name__ == "__main__":
    sys.exit(main())
