"""Run pairs of ``tests/warp/support/distributed_worker.py`` (jax.distributed processes); count exits and hangs.

    python benchmarks/exit_hang/pair_hunt.py --pairs 40 --parallel 2 --tag dist

The workers run in this checkout and import its ``jarp``, through
``tests.warp.support.distributed_worker.start_workers`` (the launcher ``tests/warp/test_distributed.py`` uses). A pair
whose processes have not both exited within ``--timeout`` counts as hung; the full gdb backtraces of its live processes
go to ``<out>/hang_bt_<tag>_<pair>_<process>.txt``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT)]

from check_exit import SPY_MARK, native_stacks, spy_library  # noqa: E402

from tests.warp.support import distributed_worker  # noqa: E402


def run_pair(i: int, env: dict[str, str], timeout: float, out: Path, tag: str) -> tuple[str, str]:
    """Run one pair; returns (status, stderr of both)."""
    pipes = [(subprocess.PIPE, subprocess.PIPE)] * distributed_worker.N_PROCESSES
    procs = distributed_worker.start_workers(ROOT, env, pipes)
    deadline = time.monotonic() + timeout
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(0.05)
    status = "ok"
    for k, p in enumerate(procs):
        if p.poll() is None:
            status = "hung"
            stacks = native_stacks(p.pid)
            if stacks is not None:
                (out / f"hang_bt_{tag}_{i}_{k}.txt").write_text(stacks)
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
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=90.0)
    ap.add_argument("--tag", default="dist")
    ap.add_argument("--spy", action="store_true", help="LD_PRELOAD pthread_exit_spy.so")
    ap.add_argument("--launch", choices=("default", "python"), default="default")
    ap.add_argument("--out", type=Path, default=ROOT)
    args = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("JARP_LAUNCH", None)
    if args.launch == "python":
        env["JARP_LAUNCH"] = "python"
    if args.spy:
        env["LD_PRELOAD"] = str(spy_library())
    t0 = time.perf_counter()
    with ThreadPoolExecutor(args.parallel) as pool:
        results = list(pool.map(lambda i: run_pair(i, env, args.timeout, args.out, args.tag), range(args.pairs)))
    for i, (status, err) in enumerate(results):
        if status != "ok" or SPY_MARK in err:
            print(f"=== pair {i}: {status}\n{err}", flush=True)
    statuses = [s for s, _ in results]
    spied = [i for i, (_, e) in enumerate(results) if SPY_MARK in e]
    print(
        f"distributed pairs [{args.tag}] x {args.pairs} (launch={args.launch}, {args.parallel} pairs at a time, timeout "
        f"{args.timeout:.0f} s): {statuses.count('ok')} ok, {statuses.count('hung')} hung, "
        f"{len(statuses) - statuses.count('ok') - statuses.count('hung')} failed; pairs with a pthread_exit: "
        f"{len(spied)} {spied}; wall {time.perf_counter() - t0:.0f} s",
        flush=True,
    )
    return 0 if statuses.count("ok") == args.pairs else 1


if __name__ == "__main__":
    sys.exit(main())
