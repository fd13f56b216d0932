"""jarp's static verdicts on Warp's own kernels against what ``wp.launch`` does: writes, races, fills.

`tests.support.warp_kernel_verdicts` launches each kernel of the warp-lang wheel's tests, examples and libraries that
the sweep harness can fabricate arguments for, on the CPU, and checks jarp's three promises against it:

- writes: every array ``wp.launch`` changes (on the fabricated arguments, all zeros, mirrored values) is in
  `_writes.written_inputs` (a miss: an unsound write). An array in the verdict that no launch changed is an
  over-refusal candidate: sound, but it makes the caller declare the array in-out;
- races: a plan jarp may split over CPU threads (race-free, or privatised accumulations) gives on 2 threads what it
  gives on 1, and its ranged entry point run in two other schedules gives what ``wp.launch`` gives;
- fills: an output jarp does not zero-fill (every thread overwrites it) ends the same whatever it was prefilled with.

Tests:

- `test_subset_verdicts_are_sound` and `test_subset_exercises_every_verdict_kind`: a fixed few dozen kernels
  (`SUBSET`, each tagged with the verdict it must exercise: writes through ``wp.ref`` / ``wp.address_of`` /
  ``@wp.func_native`` references, race-free and privatised splits that the run sees split, a racing launch kept
  whole, skipped fills, over-refusal candidates); about 15 s with Warp's kernel cache warm;
- `test_subset_over_refusals_match_the_list`: the subset's over-refusal candidates are those
  ``tests/support/verdict_over_refusals.txt`` lists for its kernels;
- `test_whole_sweep` (marked ``slow``: deselected unless ``-m slow``; ``nox -s tests_full`` runs it last): every kernel
  (about 2,600 with overloads, 1,200 of them launched), in `CHUNKS` shards that pytest-xdist spreads over its
  workers (``--dist load``): no unsound verdict, and the over-refusal candidates exactly as listed. With Warp's
  kernel cache warm, a shard takes 3.5 to 8.5 minutes on a 2-core machine busy with other work (load 3 to 7), the
  four 13 minutes over 2 workers (14 minutes in one process); most of it is the kernel's forked ``wp.launch`` runs.

Each prints its counts and over-refusal candidates (``pytest -rA`` shows them) and writes its whole report as JSON
into its pytest tmp directory.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from tests.support import warp_kernel_verdicts as verdicts

#: The kernels of the fast subset, each with the verdicts it must exercise (`_exercises`):
#: ``write`` (``wp.launch`` writes an array, jarp's verdict names it), ``race-free`` and ``privatised`` (jarp's plan
#: splits its CPU launch, and the run saw it split), ``kept-whole`` (jarp's plan does not split a launch whose
#: threads race: called race-free, its ranged entry run in reverse would differ from ``wp.launch``), ``skipped-fill``
#: (jarp skips a pure output's zero-fill), ``over-refusal`` (a candidate of the checked-in list). Chosen from small Warp modules: the references of Warp's
#: ``test_ref`` (array elements, locals, struct fields and components given to ``wp.ref`` parameters, native
#: snippets and ``wp.address_of``), and the kernels whose fills a sweep once found unsound.
SUBSET: dict[str, tuple[str, ...]] = {
    "warp.tests.test_ref:kernel_add_to_array_element": ("write",),
    "warp.tests.test_ref:kernel_address_of_array_element": ("write",),
    "warp.tests.test_ref:kernel_address_of_local": ("write",),
    "warp.tests.test_ref:kernel_address_of_struct_field": ("write",),
    "warp.tests.test_ref:kernel_address_of_vector_component": ("write",),
    "warp.tests.test_ref:kernel_native_ref_param": ("write",),
    "warp.tests.test_ref:kernel_native_ref_adjoint_array": ("write",),
    "warp.tests.test_ref:kernel_native_ref_adjoint_array_2d_direct": ("write", "skipped-fill"),
    "warp.tests.test_ref:kernel_native_ref_adjoint_array_slice": ("write", "skipped-fill"),
    "warp.tests.test_ref:kernel_native_ref_adjoint_array_nested_slice": ("write", "skipped-fill"),
    "warp.tests.test_ref:kernel_native_ref_adjoint_struct_field": ("write", "skipped-fill"),
    "warp.tests.test_ref:kernel_ref_forwarding": ("write",),
    "warp.tests.test_ref:kernel_ref_mutates_negative_subscripts": ("write",),
    "warp.tests.test_ref:kernel_ref_parameter_struct_field_forwarding": ("write", "skipped-fill"),
    "warp.tests.test_ref:kernel_array_tuple_unpack_adjoint": ("write", "race-free", "skipped-fill"),
    "warp.tests.test_ref:kernel_ref_array_view_value": ("write", "skipped-fill", "over-refusal"),
    "warp.tests.test_copy:mul_1d": ("write", "race-free"),
    "warp.tests.test_copy:all_equal_kernel": ("write", "privatised"),
    "warp.tests.test_codegen_continue:continue_argmax": ("write", "race-free", "skipped-fill"),
    "warp.tests.test_codegen_continue:continue_nested": ("write", "privatised", "skipped-fill"),
    "warp._src.fem.utils:_find_invalid_index": ("write", "privatised"),
    "warp._src.fem.utils:_prepare_node_sort_kernel": ("write", "race-free"),
    "warp.tests.deterministic.test_deterministic_scatter:augassign_add_kernel": ("write", "privatised"),
    "warp.tests.test_fast_math:approx_inverse_backward_kernel_44": ("write", "privatised"),
    "warp.tests.deterministic.test_deterministic_counter:static_index_counter_kernel": ("write", "kept-whole"),
    "warp.tests.test_graph:write_tid_kernel": ("write", "race-free", "skipped-fill"),
    "warp.tests.test_graph:warmup_kernel": ("race-free", "over-refusal"),
    "warp.tests.test_lvalue:intermediate_kernel": ("write",),
    "warp.tests.cuda.test_kernel_attributes:generic_attribute_kernel[a1f4]": ("race-free", "over-refusal"),
    "warp.tests.cuda.test_conditional_captures:multiply_by_two_kernel_limited": ("write", "over-refusal"),
}

#: How many shards `test_whole_sweep` runs in (pytest-xdist spreads them over its workers with ``--dist load``).
CHUNKS = 4


def _exercises(rec: dict[str, Any]) -> set[str]:
    """The verdict kinds one kernel's detail record shows (the tags of `SUBSET`)."""
    race = rec.get("race") or {}
    split = race.get("split_items", 0) >= 2
    kinds = set()
    if rec.get("observed") and set(rec["observed"]) <= set(rec.get("jarp_writes", ())):
        kinds.add("write")
    if race.get("race_free") and split:
        kinds.add("race-free")
    if race.get("private") and split:
        kinds.add("privatised")
    if "race_free" in race and not race["race_free"] and not race.get("private"):
        kinds.add("kept-whole")
    if (rec.get("fill") or {}).get("skipped"):
        kinds.add("skipped-fill")
    if rec.get("over_refusal"):
        kinds.add("over-refusal")
    return kinds


def _report(report: dict[str, Any], path: pathlib.Path, drift: list[str]) -> str:
    """The run's summary and drift, printed (``-rA`` shows it); the whole report written as JSON to ``path``."""
    payload = {
        "counts": verdicts.counts(report),
        "unsound": verdicts.unsound(report),
        "over_refusals": {f"{k} {n}": d for (k, n), d in verdicts.over_refusals(report).items()},
        "over_refusal_drift": drift,
        **report,
    }
    path.write_text(json.dumps(payload, indent=1, default=str))
    text = "\n".join([verdicts.summarise(report), *drift, f"report: {path}"])
    print(text)
    return text


@pytest.fixture(scope="module")
def subset(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], pathlib.Path]:
    report = verdicts.run(sorted(SUBSET))
    return report, tmp_path_factory.mktemp("verdicts") / "subset.json"


def test_subset_verdicts_are_sound(subset: tuple[dict[str, Any], pathlib.Path]) -> None:
    report, path = subset
    text = _report(report, path, [])
    assert not report["failure"], f"the run failed: {report['failure']}\n{report['log_tail']}"
    unsound = verdicts.unsound(report)
    assert not unsound, "unsound verdicts (jarp's verdict, then what wp.launch did):\n" + "\n".join(unsound)
    unchecked = {
        k: report["verdicts"].get(k, {}).get("detail", "not run") for k in SUBSET if k not in report["kernels"]
    }
    assert not unchecked, f"subset kernels not checked: {unchecked}\n{text}"


def test_subset_exercises_every_verdict_kind(subset: tuple[dict[str, Any], pathlib.Path]) -> None:
    report, _ = subset
    missing = {
        kid: sorted(set(kinds) - _exercises(report["kernels"].get(kid, {})))
        for kid, kinds in SUBSET.items()
        if set(kinds) - _exercises(report["kernels"].get(kid, {}))
    }
    assert not missing, (
        f"subset kernels that no longer exercise their verdicts (pick others, or update SUBSET): {missing}"
    )
    assert {k for kinds in SUBSET.values() for k in kinds} == {
        "write",
        "race-free",
        "privatised",
        "kept-whole",
        "skipped-fill",
        "over-refusal",
    }


def test_subset_over_refusals_match_the_list(subset: tuple[dict[str, Any], pathlib.Path]) -> None:
    report, path = subset
    drift = verdicts.over_refusal_drift(report, verdicts.load_over_refusals())
    _report(report, path, drift)
    assert not drift, "\n".join(drift)


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_whole_sweep(chunk: int, tmp_path: pathlib.Path) -> None:
    report = verdicts.run(chunk=(chunk, CHUNKS))
    # every shard knows the whole harvest: the first one reports listed kernels that Warp no longer has
    drift = verdicts.over_refusal_drift(report, verdicts.load_over_refusals(), stale=chunk == 0)
    text = _report(report, tmp_path / f"verdicts-{chunk}-of-{CHUNKS}.json", drift)
    assert not report["failure"], f"the run failed: {report['failure']}\n{report['log_tail']}"
    assert report["harvested"] > 2000, text
    assert report["selected"] > 500, text
    assert len(report["verdicts"]) == report["selected"], text
    unsound = verdicts.unsound(report)
    assert not unsound, "unsound verdicts (jarp's verdict, then what wp.launch did):\n" + "\n".join(unsound)
    assert not drift, "\n".join(drift)
