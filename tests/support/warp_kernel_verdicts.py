"""jarp's static verdicts on Warp's own kernels, checked against what ``wp.launch`` does: writes, races, fills.

Built on `tests.support.warp_kernel_sweep` (its harvest, fabricated arguments, reference launches and worker
processes). For each kernel the harness can launch it records:

- writes: the arrays whose bytes ``wp.launch`` changes (on the fabricated arguments, and on two variants of them:
  all zeros, and mirrored values) against `_writes.written_inputs` over every array parameter. Written but not in
  jarp's verdict: unsound write. In the verdict but never seen written: an over-refusal candidate (it may be data
  dependent, or write bytes equal to those there).
- races: where jarp's plan may split its CPU launch (race-free, or privatised accumulations), jarp's result with 2
  CPU threads (the split thresholds lowered so that a launch of 8 tasks splits) against 1 thread, exact for a
  race-free plan, within tolerance for privatised floats; and, deterministic, jarp's ranged entry point run by
  ``wp.launch``'s arguments in two schedules a split may take (second half first; one task at a time, last first)
  against ``wp.launch``. A difference, or a crash of the split launch: unsound race.
- fills: where `overwritten_outputs` claims that every thread overwrites an output (so jarp skips its zero-fill),
  ``wp.launch`` with that array prefilled with zero bytes, then with two sentinel byte patterns: any difference
  (an element left unwritten, or a result read from it) is an unsound fill. Where the claimed arrays end the
  parameter list, jarp's call with them as pure outputs too, against ``wp.launch`` on zero-filled outputs.

Structs are not covered (the harness does not fabricate them). The over-refusal candidates of the whole sweep are
listed, each with its reason, in ``tests/support/verdict_over_refusals.txt`` (`load_over_refusals`,
`over_refusal_drift`). Run by ``tests/warp/compat/test_warp_kernel_verdicts.py`` (a subset; the whole, in shards,
marked ``slow``); by hand::

    python -m tests.support.warp_kernel_verdicts --limit 100 --json /tmp/verdicts.json
    python -m tests.support.warp_kernel_verdicts --chunk 0 4          # the first of 4 shards of the whole
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import dataclasses
import json
import os
import pathlib
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

from . import warp_kernel_sweep as sweep
from .paths import REPO

#: Seconds one forked ``wp.launch`` check may take.
FORK_TIMEOUT = 60.0
#: The byte patterns a claimed-overwritten output is prefilled with (besides zero).
SENTINELS = (0xFF, 0xA5)
#: The variants of the fabricated arguments the writes are observed on (besides the fabricated ones).
VARIANTS = ("zeros", "mirrored")

_OUTPUT: str | None = None  # the child's output file (the workers inherit it)
_RANGED = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t)


# ======================================================================================================================
# Forked wp.launch runs
# ======================================================================================================================


def _forked(fn: Callable[[], Any]) -> tuple[str, Any]:
    """``("ok", fn())`` run in a forked process, or ``("error" | "crash", why)`` (`sweep.forked`)."""
    kind, value = sweep.forked(fn, FORK_TIMEOUT)
    if kind == "hung":
        return "crash", f"hung for {FORK_TIMEOUT:.0f} s"
    return kind, value


def _with_values(made: sweep.Fabricated, values: dict[str, Any]) -> sweep.Fabricated:
    """``made`` with the contents of some arrays replaced (by name)."""
    args = tuple(
        dataclasses.replace(a, values=values[a.name]) if isinstance(a, sweep.ArrayArg) and a.name in values else a
        for a in made.args
    )
    return dataclasses.replace(made, args=args)


def _filled(arg: sweep.ArrayArg, byte: int) -> Any:
    """Contents of ``arg``'s shape and storage dtype, every byte ``byte``."""
    import numpy as np

    v = arg.values
    return np.full(v.nbytes, byte, np.uint8).view(v.dtype).reshape(v.shape)


def _mirrored(arg: sweep.ArrayArg) -> Any:
    """Other valid contents: floats negated and scaled, indices reversed, booleans flipped."""
    import numpy as np

    v = arg.values
    if arg.bfloat16:
        return v ^ np.uint16(0x8000)
    if arg.kind == "float":
        return (-1.5 * v).astype(v.dtype)
    if arg.kind == "int":
        return (sweep.DIM - 1 - v).astype(v.dtype)
    return ~v


def _launch(kernel: Any, made: sweep.Fabricated, ranged: int = 0, schedule: Sequence[tuple[int, int]] = ()) -> Any:
    """The arrays after one launch (``wp.launch``, or ``ranged`` run over ``schedule``), and those written outside."""
    import warp as wp

    padded = {a.name: sweep._Padded(a, "zero") for a in made.arrays}
    inputs = [padded[a.name].array if isinstance(a, sweep.ArrayArg) else a for a in made.args]
    if not ranged:
        wp.launch(kernel, dim=made.dims, inputs=inputs, device="cpu")
        wp.synchronize_device("cpu")
    else:
        cmd = wp.launch(kernel, dim=made.dims, inputs=inputs, device="cpu", record_cmd=True)
        params = cmd.params
        fields = [(arg.label, type(p)) for arg, p in zip(cmd.kernel.adj.args, params[1:], strict=True)]
        block = type("Args", (ctypes.Structure,), {"_fields_": fields})(*params[1:])
        entry = _RANGED(ranged)
        for begin, end in schedule:
            entry(ctypes.addressof(params[0]), ctypes.addressof(block), begin, end)
    return {n: p.data() for n, p in padded.items()}, sorted(n for n, p in padded.items() if not p.padding_intact())


def _changed(made: sweep.Fabricated, after: dict[str, Any]) -> list[str]:
    return [a.name for a in made.arrays if after[a.name].tobytes() != a.values.tobytes()]


# ======================================================================================================================
# Comparisons
# ======================================================================================================================


def _close(arg: sweep.ArrayArg, expected: Any, got: Any) -> str | None:
    """`sweep.compare` (tolerance for floats), for two arrays in any of the layouts it meets."""
    import numpy as np

    got = np.asarray(got)
    if arg.bfloat16 and got.dtype == np.uint16:
        import ml_dtypes

        got = got.view(ml_dtypes.bfloat16)
    return sweep.compare(arg, np.asarray(expected), got)


def _differs(arg: sweep.ArrayArg, expected: Any, got: Any, exact: bool) -> str | None:
    """None when equal (bit for bit with ``exact``, else within tolerance for floats), else the difference."""
    import numpy as np

    tolerant = _close(arg, expected, got)
    if not exact:
        return tolerant
    if np.ascontiguousarray(expected).tobytes() == np.ascontiguousarray(got).tobytes():
        return None
    return tolerant or f"{arg.name}: bytes differ, within float tolerance"


# ======================================================================================================================
# jarp's call
# ======================================================================================================================


def _jarp_call(
    kernel: Any, made: sweep.Fabricated, in_out: Sequence[str], pure: Sequence[str] = ()
) -> tuple[list[str], list[Any], Callable[[], list[Any]], list[Any]]:
    """jarp's module with ``in_out`` (widened as jarp asks) and the trailing ``pure`` outputs, called under jit.

    Returns:
        The in-out names, the outputs, a function that calls the same executable again, and jarp's plans.

    Raises:
        sweep.Refused: jarp raised a ``TypeError``/``ValueError`` of its own.
    """
    import jax
    import numpy as np

    from jarp.warp import jax_kernel
    from jarp.warp._ffi._registry import registry

    names = [a.name for a in made.arrays]
    in_out = [n for n in names if n in in_out and n not in pure] or ([] if pure else names[:1])
    module = None
    while module is None:
        try:
            module = jax_kernel(
                kernel, num_outputs=len(in_out) + len(pure), in_out_argnames=tuple(in_out), launch_dims=made.dims
            )
        except (TypeError, ValueError) as e:
            if not sweep._raised_by_jarp(e):
                raise
            more = sweep._WRITES_INPUTS.search(str(e))
            extra = {m.strip().strip("'\"") for m in more.group(1).split(",")} if more else set()
            widened = [n for n in names if (n in in_out or n in extra) and n not in pure]
            if widened == in_out:
                raise sweep.Refused(str(e)) from e
            in_out = widened
    given = [a for a in made.args if not (isinstance(a, sweep.ArrayArg) and a.name in pure)]
    arrays = [jax.numpy.asarray(a.jax_value()) for a in given if isinstance(a, sweep.ArrayArg)]

    def call(*operands: Any) -> Any:
        it = iter(operands)
        return module(*(next(it) if isinstance(a, sweep.ArrayArg) else a for a in given))

    jitted = jax.jit(call)

    def run() -> list[Any]:
        return [np.asarray(o) for o in jax.block_until_ready(jitted(*arrays))]

    before = max((h for h, _ in registry.items()), default=-1)
    try:
        outputs = run()
    except (TypeError, ValueError) as e:
        if sweep._raised_by_jarp(e):
            raise sweep.Refused(str(e)) from e
        raise
    plans = [p for h, p in registry.items() if h > before and not p.adjoint]
    return in_out, outputs, run, plans


def _pool_items() -> int:
    from jarp.warp._ffi import _native

    native = _native.active()
    return native.pool_stats()[1] if native is not None else -1


def _force_splits() -> None:
    """Lower the split thresholds so that a launch of a few tasks splits (and gets a ranged entry point).

    Checking mode goes off (whatever ``JARP_CHECKING`` says): it runs every launch on one thread, on the Python path,
    so that no launch would split and the race checks would check nothing.
    """
    import jarp.warp as jw
    from jarp.warp._ffi import _threads

    jw.set_checking_mode(False)
    _threads.MIN_TASKS = 1
    _threads.MIN_RANGE = 1
    _threads.MIN_COST_NS = 0
    _threads.MIN_WORK = 0
    _threads.set_cpu_linger_us(0)
    _threads.set_cpu_threads(1)


# ======================================================================================================================
# One kernel
# ======================================================================================================================


def _writes_check(kernel: Any, made: sweep.Fabricated, written: list[str], rec: dict[str, Any]) -> list[str]:
    """(a): the writes seen on the fabricated arguments and their variants against jarp's verdict."""
    from jarp.warp._plan._analysis import _writes

    names = tuple(a.name for a in made.arrays)
    seen = {"fabricated": list(written)}
    for how in VARIANTS:
        values = {a.name: _filled(a, 0) if how == "zeros" else _mirrored(a) for a in made.arrays}
        variant = _with_values(made, values)
        status, value = _forked(lambda variant=variant: _launch(kernel, variant))
        if status == "ok" and not value[1]:
            seen[how] = _changed(variant, value[0])
        else:
            seen[how] = f"not run: {value if status != 'ok' else 'writes outside ' + str(value[1])}"
    observed = [n for n in names if any(isinstance(s, list) and n in s for s in seen.values())]
    rec["seen_written"] = seen
    rec["observed"] = observed
    try:
        verdict = list(_writes.written_inputs(kernel, names))
    except Exception as e:
        rec["writes_error"] = f"{type(e).__name__}: {sweep._first_line(e)}"
        return observed
    rec["jarp_writes"] = verdict
    rec["unsound_write"] = [n for n in observed if n not in verdict]
    rec["over_refusal"] = [n for n in verdict if n not in observed]
    return observed


def _fill_claims(kernel: Any, made: sweep.Fabricated) -> dict[str, int]:
    """The arrays jarp would not zero-fill as pure outputs of this launch (`_builder._zero_filled`'s test)."""
    from jarp.warp._plan._analysis import _overwrites, _races

    if not _races.warps_thread_index(kernel):
        return {}
    claims = _overwrites.overwritten_in_code(kernel, tuple(a.name for a in made.arrays))
    ndim = {a.name: len(a.shape) for a in made.arrays}
    return {n: r for n, r in claims.items() if r == len(made.dims) == ndim[n]}


def _fill_check(kernel: Any, made: sweep.Fabricated, claims: dict[str, int], rec: dict[str, Any]) -> dict[str, Any]:
    """(c) by ``wp.launch``: each claimed array prefilled with zero bytes, then each sentinel; any difference."""
    import numpy as np

    by_name = {a.name: a for a in made.arrays}
    results: dict[str, Any] = {}
    for name in claims:
        arg = by_name[name]

        out = {}
        for byte in (0, *SENTINELS):
            variant = _with_values(made, {name: _filled(arg, byte)})
            out[byte] = _forked(lambda variant=variant: _launch(kernel, variant))
        zero_status, zero = out[0]
        if zero_status != "ok":
            results[name] = f"zero-filled launch failed: {zero}"
            continue
        problems = []
        itemsize = arg.values.dtype.itemsize
        stuck = None
        for byte in SENTINELS:
            status, value = out[byte]
            if status != "ok":
                problems.append(f"prefilled 0x{byte:02X}: launch {status}: {value}")
                continue
            after, outside = value
            if outside:
                problems.append(f"prefilled 0x{byte:02X}: writes outside {outside}")
            raw = np.frombuffer(after[name].tobytes(), np.uint8).reshape(-1, itemsize)
            same = (raw == byte).all(axis=1)
            stuck = same if stuck is None else stuck & same
            for other in made.arrays:
                if after[other.name].tobytes() != zero[0][other.name].tobytes():
                    problems.append(f"prefilled 0x{byte:02X}: {other.name} differs from the zero-filled launch")
        if stuck is not None and stuck.any():
            problems.insert(0, f"{int(stuck.sum())} of {stuck.size} scalars of {name} left unwritten")
        results[name] = "; ".join(dict.fromkeys(problems)) or None
    rec["fill"] = {"claims": claims, "sentinel": results}
    return results


def _fill_jarp(kernel: Any, made: sweep.Fabricated, claims: dict[str, int], written: list[str], rec: dict) -> None:
    """(c) through jarp: the trailing claimed arrays as pure outputs, against ``wp.launch`` on zero-filled ones."""
    trailing: list[str] = []  # the arrays that may be pure outputs: every parameter after them is an array
    for a in reversed(made.args):
        if not isinstance(a, sweep.ArrayArg):
            break
        trailing.insert(0, a.name)
    first = next((i for i, n in enumerate(trailing) if n in claims), len(trailing))
    pure = trailing[first:]
    fill = rec["fill"]
    fill["trailing"] = trailing
    fill["pure"] = pure
    if not pure:
        return
    by_name = {a.name: a for a in made.arrays}
    zeroed = _with_values(made, {n: _filled(by_name[n], 0) for n in pure})
    status, value = _forked(lambda: _launch(kernel, zeroed))
    if status != "ok" or value[1]:
        fill["jarp"] = f"zero-filled reference failed: {value}"
        return
    expected = value[0]
    try:
        in_out, outputs, _, plans = _jarp_call(kernel, made, [n for n in written if n not in pure], pure)
    except sweep.Refused as e:
        fill["jarp"] = f"refused: {sweep._first_line(e)}"
        return
    except Exception as e:
        fill["jarp"] = f"error: {type(e).__name__}: {sweep._first_line(e)}"
        return
    skipped = []
    for plan in plans:
        outs = plan.params
        for p in outs:
            if p.spec.name in pure and p.primal.source == "result" and p.primal.index not in plan.zero_results:
                skipped.append(p.spec.name)
    problems = [_close(by_name[n], expected[n], out) for n, out in zip([*in_out, *pure], outputs, strict=True)]
    fill["skipped"] = sorted(set(skipped))
    fill["jarp"] = "; ".join(p for p in problems if p) or None


def _race_check(
    kernel: Any,
    made: sweep.Fabricated,
    expected: dict[str, Any],
    in_out: list[str],
    outputs: list[Any],
    rerun: Callable[[], list[Any]],
    plan: Any,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    """(b): jarp split on 2 threads against 1 thread; the ranged entry in two schedules against ``wp.launch``."""
    import jarp.warp as jw

    by_name = {a.name: a for a in made.arrays}
    private = {
        p.spec.name
        for p in plan.params
        if p.primal.source == "result" and any(i == p.primal.index for i, _ in plan.private)
    }
    race = {"race_free": plan.race_free, "private": sorted(private), "concurrent": not plan.shares_cpu_state}
    if not (plan.race_free or plan.private):
        return race
    progress("split")
    jw.set_cpu_threads(2)
    items = _pool_items()
    try:
        split = rerun()
    finally:
        jw.set_cpu_threads(1)
    race["split_items"] = _pool_items() - items
    diffs = [
        _differs(by_name[n], one, two, exact=n not in private or by_name[n].kind != "float")
        for n, one, two in zip(in_out, outputs, split, strict=True)
    ]
    race["split_diff"] = "; ".join(d for d in diffs if d) or None
    progress("reorder")
    from jarp.warp._ffi._native import _ranged
    from jarp.warp._upstream import _warp_launches

    try:
        import warp as wp

        address = _ranged.ranged_cpu_entry(kernel, _warp_launches.load_entry_points(kernel, wp.get_device("cpu")))
    except Exception as e:
        race["reorder"] = f"no ranged entry: {type(e).__name__}: {sweep._first_line(e)}"
        return race
    if not address:
        race["reorder"] = "no ranged entry"
        return race
    import math

    n = math.prod(made.dims)
    schedules = {"halves": [(n // 2, n), (0, n // 2)], "reversed": [(k, k + 1) for k in reversed(range(n))]}
    reorder = {}
    for label, schedule in schedules.items():
        status, value = _forked(lambda schedule=schedule: _launch(kernel, made, address, schedule))
        if status != "ok":
            reorder[label] = f"launch {status}: {value}"
            continue
        after, outside = value
        diffs = [
            _differs(a, expected[a.name], after[a.name], exact=not (a.name in private and a.kind == "float"))
            for a in made.arrays
        ]
        if outside:
            diffs.append(f"writes outside {outside}")
        reorder[label] = "; ".join(d for d in diffs if d) or None
    race["reorder"] = reorder
    return race


def examine(entry: sweep.Entry, progress: Callable[[str], None] | None = None) -> sweep.Verdict:
    """Check jarp's verdicts on one kernel; the details go to the output as a ``detail`` line. Never raises."""
    start = time.monotonic()
    stage = "harvest"

    def enter(name: str) -> None:
        nonlocal stage
        stage = name
        if progress is not None:
            progress(name)

    def verdict(status: str, detail: str = "") -> sweep.Verdict:
        return sweep.Verdict(entry.id, status, detail, stage, round(time.monotonic() - start, 3))

    if entry.kernel is None:
        return verdict("skipped", entry.skip)
    kernel = entry.kernel
    enter("fabricate")
    try:
        made = sweep.fabricate(kernel)
    except Exception as e:
        return verdict("skipped", f"cannot fabricate: {type(e).__name__}: {sweep._first_line(e)}")
    enter("warp")
    try:
        expected = sweep.reference(kernel, made)
    except sweep.Skip as e:
        return verdict("skipped", str(e))
    written = _changed(made, expected)
    rec: dict[str, Any] = {"id": entry.id, "dims": list(made.dims), "arrays": [a.name for a in made.arrays]}
    try:
        enter("analysis")
        observed = _writes_check(kernel, made, written, rec)
        claims = _fill_claims(kernel, made)
        enter("jarp")
        try:
            in_out, outputs, rerun, plans = _jarp_call(kernel, made, sorted(set(observed) | set(written)))
        except sweep.Refused as e:
            rec["jarp"] = f"refused: {sweep._first_line(e)}"
        else:
            rec["jarp"] = "ok"
            rec["in_out"] = in_out
            by_name = {a.name: a for a in made.arrays}
            problems = [_close(by_name[n], expected[n], o) for n, o in zip(in_out, outputs, strict=True)]
            rec["mismatch"] = "; ".join(p for p in problems if p) or None
            if plans:
                rec["race"] = _race_check(kernel, made, expected, in_out, outputs, rerun, plans[0], enter)
        if claims:
            enter("fill")
            _fill_check(kernel, made, claims, rec)
            enter("jarp-fill")
            _fill_jarp(kernel, made, claims, written, rec)
    except Exception as e:
        rec["error"] = f"{type(e).__name__}: {sweep._first_line(e)} [{sweep._where(e)}] in {stage}"
    if any(findings(rec).values()):
        rec["source"] = kernel.adj.source
    rec["seconds"] = round(time.monotonic() - start, 3)
    with open(_OUTPUT or os.devnull, "a", encoding="utf-8") as out:
        out.write(json.dumps({"detail": rec}, default=str) + "\n")
    return verdict("checked")


# ======================================================================================================================
# Findings
# ======================================================================================================================

#: The categories of `unsound`, in report order: jarp's verdicts contradicted by ``wp.launch``, then the checks that
#: could not conclude (a crash past Warp's reference launches, jarp's result differing from Warp's, an exception).
UNSOUND = ("unsound_write", "unsound_race", "unsound_fill", "crash", "mismatch", "error", "writes_error")
#: The reasons an over-refusal candidate may have, each the start of its reason in `OVER_REFUSALS_FILE`.
OVER_REFUSAL_REASONS = ("data-dependent write", "writes equal bytes", "known analysis limit")
#: The over-refusal candidates of the whole sweep, each with its reason (read by `load_over_refusals`).
OVER_REFUSALS_FILE = REPO / "tests" / "support" / "verdict_over_refusals.txt"


def findings(rec: dict[str, Any]) -> dict[str, list[str]]:
    """One kernel's unsound cases and over-refusal candidates, each with jarp's verdict and what ``wp.launch`` did."""
    out: dict[str, list[str]] = {"unsound_write": [], "unsound_race": [], "unsound_fill": [], "over_refusal": []}
    accepted = rec.get("jarp") == "ok"
    seen = rec.get("seen_written") or {}
    launches = "; ".join(f"{how}: {names}" for how, names in seen.items())
    for n in rec.get("unsound_write", []):
        out["unsound_write"].append(
            f"{n}: jarp's verdict writes {rec.get('jarp_writes')}"
            + ("" if accepted else " (jarp refuses the call)")
            + f", wp.launch wrote {n} ({launches})"
        )
    for n in rec.get("over_refusal", []):
        out["over_refusal"].append(
            f"{n}: jarp's verdict writes {rec.get('jarp_writes')}, wp.launch never wrote it ({launches})"
        )
    race = rec.get("race") or {}
    plan = "race-free plan" if race.get("race_free") else f"plan privatising {race.get('private')}"
    if race.get("split_diff"):
        out["unsound_race"].append(f"{plan}: jarp split over 2 threads differs from 1 thread: {race['split_diff']}")
    reorder = race.get("reorder")
    if isinstance(reorder, dict):
        out["unsound_race"].extend(
            f"{plan}: jarp's ranged entry run {k} differs from wp.launch: {v}" for k, v in reorder.items() if v
        )
    fill = rec.get("fill") or {}
    pure = fill.get("pure", [])
    for n, problem in (fill.get("sentinel") or {}).items():
        if problem:
            where = "may be a pure output" if n in fill.get("trailing", []) else "never a pure output: not trailing"
            out["unsound_fill"].append(
                f"{n} ({where}): jarp claims every thread overwrites it (skips its zero-fill); "
                f"wp.launch on it prefilled: {problem}"
            )
    if fill.get("jarp") and not str(fill["jarp"]).startswith(("refused", "zero-filled")):
        out["unsound_fill"].append(
            f"jarp's pure outputs {pure} (zero-fill skipped for {fill.get('skipped')}) differ from wp.launch on "
            f"zero-filled ones: {fill['jarp']}"
        )
    return out


def _categorised(report: dict[str, Any]) -> dict[str, list[tuple[str, str]]]:
    """(kernel id, detail) by category: those of `findings`, and those of `UNSOUND` past them."""
    details = report["kernels"]
    cats: dict[str, list[tuple[str, str]]] = collections.defaultdict(list)
    for kid, rec in sorted(details.items()):
        for cat, items in findings(rec).items():
            cats[cat].extend((kid, item) for item in items)
    for kid, v in sorted(report["verdicts"].items()):
        died = v["detail"].startswith(("the worker", "the child", "the sweep's child")) and v["stage"] not in (
            "harvest",
            "fabricate",
            "warp",
        )
        if died:
            cats["unsound_race" if v["stage"] == "split" else "crash"].append((kid, f"{v['stage']}: {v['detail']}"))
    for kid, rec in sorted(details.items()):
        for key in ("mismatch", "error", "writes_error"):
            if rec.get(key):
                cats[key].append((kid, rec[key]))
    return cats


def unsound(report: dict[str, Any]) -> list[str]:
    """Every unsound verdict (and every check that could not conclude), one line each: category, kernel, detail."""
    cats = _categorised(report)
    return [f"{cat.upper()} {kid}: {item}" for cat in UNSOUND for kid, item in cats.get(cat, [])]


def over_refusals(report: dict[str, Any]) -> dict[tuple[str, str], str]:
    """The over-refusal candidates: (kernel id, parameter) -> jarp's verdict and what ``wp.launch`` did."""
    return {
        (kid, n): f"jarp's verdict writes {rec.get('jarp_writes')}, wp.launch never wrote {n}"
        for kid, rec in sorted(report["kernels"].items())
        for n in rec.get("over_refusal", [])
    }


def counts(report: dict[str, Any]) -> dict[str, int]:
    """A run's kernels by outcome, and its over-refusal candidates.

    Returns:
        How many kernels were selected, checked, equal (jarp took the call and matched ``wp.launch``), refused by
        jarp, skipped by the harness, unsound (any category of `UNSOUND`); how many over-refusal candidates
        (kernel, parameter) there are.
    """
    details = report["kernels"]
    verdicts = report["verdicts"]
    return {
        "selected": report["selected"],
        "checked": len(details),
        "equal": sum(r.get("jarp") == "ok" and not r.get("mismatch") for r in details.values()),
        "refused": sum(str(r.get("jarp", "")).startswith("refused") for r in details.values()),
        "skipped": sum(v["status"] == "skipped" for v in verdicts.values()),
        "unsound": len({line.split(" ", 2)[1] for line in unsound(report)}),
        "over_refusal": len(over_refusals(report)),
    }


def load_over_refusals(path: pathlib.Path = OVER_REFUSALS_FILE) -> dict[tuple[str, str], str]:
    """The checked-in over-refusal candidates: (kernel id, parameter) -> reason.

    One a line: ``<kernel id> <parameter> <reason>``, the reason starting with one of `OVER_REFUSAL_REASONS`;
    blank lines and lines starting with ``#`` are passed over.

    Raises:
        ValueError: naming the line that has no reason, a reason of another kind, or repeats an entry.
    """
    listed: dict[tuple[str, str], str] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        kid, param, reason = ([*line.split(None, 2), "", ""])[:3]
        where = f"{path.name}:{number}"
        if not reason.startswith(OVER_REFUSAL_REASONS):
            raise ValueError(
                f"{where}: {line!r} has no reason, or one of another kind: write '<kernel id> <parameter> <reason>', "
                f"the reason starting with one of {OVER_REFUSAL_REASONS}"
            )
        if (kid, param) in listed:
            raise ValueError(f"{where}: {kid} {param} is listed twice: keep one line")
        listed[(kid, param)] = reason
    return listed


def over_refusal_drift(report: dict[str, Any], listed: dict[tuple[str, str], str], *, stale: bool = True) -> list[str]:
    """How the run's over-refusal candidates differ from ``listed``, one line each (empty when they agree).

    Only the kernels the run selected are compared: a new candidate (not listed), a listed one that is no longer
    (fixed, or its kernel is no longer checked). With ``stale``, and when the run knows every harvested id, also a
    listed kernel that Warp's wheel no longer has (one shard of a sweep reports those; the others pass ``False``).
    """
    found = over_refusals(report)
    selected = set(report.get("selected_ids") or report["verdicts"])
    harvested = set(report.get("harvested_ids") or ()) if stale else set()
    lines = [
        f"NEW over-refusal {kid} {n}: {detail}; if it is one, list it in {OVER_REFUSALS_FILE.name} with its reason "
        f"({' / '.join(OVER_REFUSAL_REASONS)})"
        for (kid, n), detail in found.items()
        if (kid, n) not in listed
    ]
    for (kid, n), reason in sorted(listed.items()):
        if kid in selected and (kid, n) not in found:
            rec = report["kernels"].get(kid)
            if rec is not None and "jarp_writes" in rec:
                lines.append(
                    f"FIXED over-refusal {kid} {n} (listed: {reason}): jarp's verdict now writes {rec['jarp_writes']}, "
                    f"wp.launch wrote {rec.get('observed')}: remove its line from {OVER_REFUSALS_FILE.name}"
                )
            else:
                v = report["verdicts"].get(kid, {})
                lines.append(
                    f"UNCHECKED listed over-refusal {kid} {n}: the kernel ended {v.get('status', 'not run')} "
                    f"({v.get('detail', '')}), so its writes were not observed"
                )
        elif harvested and kid not in harvested:
            lines.append(f"STALE over-refusal {kid} {n}: Warp's wheel has no such kernel: remove its line")
    return lines


def summarise(report: dict[str, Any]) -> str:
    """Counts, then every unsound case, then the over-refusal candidates."""
    details = report["kernels"]
    verdicts = report["verdicts"]
    statuses = collections.Counter(v["status"] for v in verdicts.values())
    cats = _categorised(report)
    races = [r.get("race") or {} for r in details.values()]
    fills = [r.get("fill") or {} for r in details.values()]
    lines = [
        f"selected {report['selected']}, launched {len(details)}, "
        + ", ".join(f"{k} {n}" for k, n in sorted(statuses.items()))
        + f", {report['restarts']} restarts, {report['seconds']:.0f} s",
        ", ".join(f"{k} {n}" for k, n in counts(report).items()),
        f"jarp accepted {sum(r.get('jarp') == 'ok' for r in details.values())}, "
        f"jarp mismatches {sum(bool(r.get('mismatch')) for r in details.values())}, "
        f"analysis errors {sum('error' in r or 'writes_error' in r for r in details.values())}",
        f"split plans: race-free {sum(bool(r.get('race_free')) for r in races)}, "
        f"privatised {sum(bool(r.get('private')) for r in races)}, "
        f"split observed {sum(r.get('split_items', 0) >= 2 for r in races)}; "
        f"fill claims {sum(bool(f.get('claims')) for f in fills)}, "
        f"trailing {sum(bool(f.get('pure')) for f in fills)}, jarp skipped {sum(bool(f.get('skipped')) for f in fills)}",
        ", ".join(f"{cat} {len({k for k, _ in cats.get(cat, [])})}" for cat in (*findings({}), "crash")),
    ]
    lines.extend(unsound(report))
    lines.extend(f"OVER_REFUSAL {kid}: {item}" for kid, item in cats.get("over_refusal", []))
    return "\n".join(lines)


# ======================================================================================================================
# Processes
# ======================================================================================================================


def _child(config: str, output: str) -> None:
    """The child: the harness's child loop with `examine` as its check, the split thresholds lowered."""
    global _OUTPUT
    _OUTPUT = output
    _force_splits()
    sweep.check = examine
    sweep._child_main(config, output)


def run(
    ids: Sequence[str] | None = None,
    limit: int | None = None,
    kernel_timeout: float = 600.0,
    max_restarts: int = 20,
    chunk: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """Run `examine` over the harvest in child processes; a child that dies is restarted after the kernel it was on.

    Args:
        ids: the kernel ids to check (default: all harvested); only their modules are imported.
        limit: check at most this many kernels, evenly spread over the selection (`sweep.spread`).
        kernel_timeout: seconds one kernel may go without progress before its worker is killed as hung.
        max_restarts: how many crashes or hangs of the child the run survives.
        chunk: ``(index, count)``: check only the ``index``-th of ``count`` contiguous parts of the selection
            (`sweep.chunk`), a shard of the whole.

    Returns:
        The report: ``selected``, ``harvested``, ``harvested_ids`` and ``selected_ids`` (the harvest's kernel ids,
        when ``ids`` is None so that every module was imported, and the ids this run checks), ``restarts``, ``seconds``, ``failure`` (why the child failed outside a kernel, or
        empty), ``verdicts`` (one `sweep.Verdict` as a dict per kernel), ``kernels`` (`examine`'s detail records, by
        id) and ``log_tail``.
    """
    started = time.monotonic()
    verdicts: dict[str, dict[str, Any]] = {}
    details: dict[str, dict[str, Any]] = {}
    totals: dict[str, Any] = {}
    restarts, log_tail, failure = 0, "", ""
    modules = sorted({i.split(":", 1)[0] for i in ids}) if ids else None
    with tempfile.TemporaryDirectory(prefix="jarp-verdicts-") as tmp:
        while True:
            config = pathlib.Path(tmp) / "config.json"
            config.write_text(
                json.dumps(
                    {
                        "ids": list(ids) if ids else None,
                        "modules": modules,
                        "limit": limit,
                        "chunk": list(chunk) if chunk else None,
                        "kernel_timeout": kernel_timeout,
                        "exclude": sorted(verdicts),
                    }
                )
            )
            output = pathlib.Path(tmp) / f"results{restarts}.jsonl"
            output.touch()
            log = pathlib.Path(tmp) / f"log{restarts}.txt"
            # the child replaces a worker that crashes or hangs itself; this covers the child dying or hanging
            progress, ended = sweep.run_child(
                "tests.support.warp_kernel_verdicts", config, output, log, kernel_timeout + 120.0, None, started
            )
            for record in progress.records:
                if "verdict" in record:
                    verdicts[record["verdict"]["id"]] = record["verdict"]
                elif "detail" in record:
                    details[record["detail"]["id"]] = record["detail"]
            totals = totals or progress.totals
            restarts += progress.crashes
            failure = progress.failure
            log_tail = (log_tail + log.read_text(errors="replace"))[-8000:]
            if progress.finished or failure or progress.current is None:
                failure = failure or ("" if progress.finished else f"the child {ended} outside a kernel")
                break
            verdicts[progress.current] = dataclasses.asdict(
                sweep.Verdict(progress.current, "crash", f"the child {ended}", progress.stage)
            )
            restarts += 1
            if restarts > max_restarts:
                failure = f"the child crashed {restarts} times"
                break
    return {
        "selected": totals.get("selected", 0),
        "harvested": totals.get("entries", 0),
        "harvested_ids": totals.get("ids", []) if ids is None else [],  # the whole harvest only
        "selected_ids": totals.get("selected_ids", []),
        "restarts": restarts,
        "seconds": round(time.monotonic() - started, 1),
        "failure": failure,
        "verdicts": verdicts,
        "kernels": details,
        "log_tail": log_tail,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: a run whose summary is printed, the whole report written with ``--json``.

    Exits with 1 when a verdict is unsound (or a check could not conclude), else 0.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=2, metavar=("CONFIG", "OUTPUT"), help=argparse.SUPPRESS)
    parser.add_argument("--limit", type=int, default=None, help="at most this many kernels, evenly spread")
    parser.add_argument(
        "--chunk", nargs=2, type=int, metavar=("INDEX", "COUNT"), help="only the INDEX-th of COUNT parts"
    )
    parser.add_argument("--json", metavar="PATH", help="write the whole report to PATH as JSON")
    parser.add_argument("ids", nargs="*", help="kernel ids to run (default: all)")
    args = parser.parse_args(argv)
    if args.child:
        _child(*args.child)
        return 0
    report = run(args.ids or None, limit=args.limit, chunk=tuple(args.chunk) if args.chunk else None)
    text = summarise(report)
    drift = over_refusal_drift(report, load_over_refusals())
    print(text, *drift, sep="\n")
    if args.json:
        report["summary"] = text
        report["counts"] = counts(report)
        report["over_refusal_drift"] = drift
        report["findings"] = {k: f for k, r in report["kernels"].items() if any((f := findings(r)).values())}
        pathlib.Path(args.json).write_text(json.dumps(report, indent=1, default=str))
    return 1 if unsound(report) or report["failure"] else 0


if __name__ == "__main__":
    sys.exit(main())
