"""Warp's own kernels through jarp: every kernel the warp-lang wheel defines equals ``wp.launch``, or is refused.

`tests.support.warp_kernel_sweep` harvests the module-level kernels of Warp's tests, examples and sparse/FEM
libraries, fabricates arguments from their annotations, launches each with ``wp.launch`` on the CPU and through
`jarp.warp.jax_kernel` under ``jax.jit``, and compares (in a child process, so that a crash is a finding and not the
end of the run). A kernel ends equal, refused (a ``TypeError``/``ValueError`` of jarp's own), skipped (the harness
cannot fabricate its arguments, or Warp's own launch misbehaves on them), or as a failure: mismatch, error, crash.

- `test_sweep_subset`: a fixed few dozen kernels, each with the outcome it must have (`SUBSET`): about 10 s with
  Warp's kernel cache warm, under a minute cold (it builds 15 small Warp modules);
- the harness's own checks: a crash or a hang in jarp's call is recorded and the sweep goes on, and a difference
  from Warp's result is a mismatch;
- `test_whole_sweep`: every kernel (about 2,600 with overloads; about 4 minutes on 2 cores with Warp's kernel
  cache warm, half an hour or more cold, when it builds some 250 Warp modules), only with ``JARP_SWEEP=1``: no
  kernel may end in a failure.
"""

from __future__ import annotations

import os

import pytest

from tests.support.warp_kernel_sweep import FAULT_ENV, SweepReport, run_sweep

#: The kernels of the subset and the outcome each must have. A kernel that jarp comes to support turns a ``refused``
#: into ``equal``: update the table. Chosen from small Warp modules (each builds in seconds) to cover generic
#: overloads, the scalar types (float16, bfloat16, float64, bool, ints), vectors, matrices, quaternions and
#: transforms, 2-d launches, integer gathers, atomics, kernels writing several arrays or none, and jarp's refusals.
SUBSET: dict[str, str] = {
    "warp.tests.test_generics:generic_array_kernel_v1[a1f4_a1f4_a1f4]": "equal",
    "warp.tests.test_generics:generic_array_kernel_v2[a1i4_a1i4_a1i4]": "equal",
    "warp.tests.test_generics:generic_array_kernel_v3[a1v3f4_a1v3f4_a1v3f4]": "equal",
    "warp.tests.test_generics:generic_accumulator_kernel[a1f8_b]": "equal",
    "warp.tests.test_generics:generic_fill_v2[a1v3f4_v3f4]": "equal",
    "warp.tests.test_generics:generic_transform_array[a1v5f4_a1m55f4_a1v5f4]": "equal",
    "warp.tests.test_generics:test_generic_type_construction_kernel[a1m22f8]": "equal",
    "warp.tests.test_generics:generic_fill": "skipped",
    "warp.tests.test_generics:generic_transform[v3f4_m33f4_v3f4]": "refused",
    "warp.tests.test_generics:test_generic_adder": "refused",
    "warp.tests.test_constant_precision:test_mat22d_precision_kernel": "equal",
    "warp.tests.test_constant_precision:test_quatd_precision_kernel": "equal",
    "warp.tests.test_constant_precision:test_transformd_precision_kernel": "equal",
    "warp.tests.test_constant_precision:test_vec3h_mixed_literal_variable_kernel": "equal",
    "warp.tests.test_constant_precision:test_constant_reuse_after_constructor_kernel": "equal",
    "warp.tests.test_quat_assign_copy:quat_assign_attribute": "equal",
    "warp.tests.test_spatial_assign_copy:transform_assign_subscript": "equal",
    "warp.tests.test_bf16:bf16_arithmetic_kernel": "equal",
    "warp.tests.test_bf16:bf16_vec3_kernel": "equal",
    "warp.tests.test_fp16:mul_half": "equal",
    "warp.tests.test_bool:bool_mat_assign_kernel": "equal",
    "warp.tests.test_copy:mul_2d": "equal",
    "warp.tests.test_copy:mul_4d": "equal",
    "warp._src.fem.utils:_masked_indices_kernel": "equal",
    "warp._src.fem.utils:_scatter_node_counts": "equal",
    "warp.tests.test_atomic_bitwise:test_atomic_bitwise_vector_kernel": "equal",
    "warp.tests.test_indexedarray:inc_2d[a2i4]": "equal",
    "warp.tests.test_indexedarray:inc_1d[ia1i4]": "refused",
    "warp.tests.test_indexedarray:kernel_indexedarray_in_struct_array": "refused",
    "warp.tests.test_indexedarray:kernel_indexedarray_in_struct": "skipped",
    "warp.tests.test_launch:kernel_tuple_bounds": "equal",
    "warp.tests.test_launch:kernel_struct_param": "skipped",
    "warp.tests.test_dense:eval_dense_solve": "equal",
    "warp.tests.test_rand:test_kernel": "equal",
    "warp.tests.test_closest_point_edge_edge:closest_point_edge_edge_kernel": "equal",
}

_SUBSET_TIMEOUT = 240.0
_SWEEP_TIMEOUT = 4 * 3600.0


def _modules(ids: list[str]) -> list[str]:
    return sorted({i.split(":", 1)[0] for i in ids})


def _report(report: SweepReport) -> str:
    counts = report.counts()
    return (
        f"{report.selected} kernels in {report.seconds:.0f} s: "
        + ", ".join(f"{n} {status}" for status, n in counts.items())
        + f"\n{report.summary()}"
    )


@pytest.fixture(scope="module")
def subset() -> SweepReport:
    ids = sorted(SUBSET)
    return run_sweep(ids, modules=_modules(ids), timeout=_SUBSET_TIMEOUT)


def test_sweep_subset(subset: SweepReport) -> None:
    print(_report(subset))
    assert not subset.failures(), _report(subset)
    assert subset.selected == len(SUBSET), _report(subset)
    wrong = {
        i: (subset.verdicts[i].status, subset.verdicts[i].detail) if i in subset.verdicts else ("not run", "")
        for i, expected in SUBSET.items()
        if i not in subset.verdicts or subset.verdicts[i].status != expected
    }
    assert not wrong, f"outcomes other than SUBSET's: {wrong}\n{_report(subset)}"


def test_sweep_subset_refusals_are_jarps(subset: SweepReport) -> None:
    # a refusal is a TypeError/ValueError raised by jarp, whose message names the jax_kernel call
    refused = [v for v in subset.verdicts.values() if v.status == "refused"]
    assert refused
    assert all(v.detail.startswith("jax_kernel()") for v in refused), refused


#: Three kernels of one small module, for the tests of the harness's crash handling.
_FAULT_IDS = ("warp.tests.test_copy:mul_1d", "warp.tests.test_copy:mul_2d", "warp.tests.test_copy:mul_3d")


# the hang waits out the 15 s a kernel may take: `nox -s tests_full` runs it (the abort takes the same path)
@pytest.mark.parametrize("fault", ["abort", pytest.param("hang", marks=pytest.mark.slow)])
def test_a_crash_or_hang_in_jarps_call_is_recorded_and_the_sweep_goes_on(
    fault: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the worker aborts (or hangs) when it reaches jarp's call of the middle kernel
    monkeypatch.setenv(FAULT_ENV, f"{fault}:{_FAULT_IDS[1]}")
    report = run_sweep(_FAULT_IDS, modules=_modules(list(_FAULT_IDS)), kernel_timeout=15.0, timeout=_SUBSET_TIMEOUT)
    statuses = {i: v.status for i, v in report.verdicts.items()}
    assert statuses == {_FAULT_IDS[0]: "equal", _FAULT_IDS[1]: "crash", _FAULT_IDS[2]: "equal"}, _report(report)
    crash = report.verdicts[_FAULT_IDS[1]]
    assert crash.stage == "jarp"
    assert ("died of signal 6" if fault == "abort" else "hung for 15 s") in crash.detail
    assert report.restarts == 1
    assert [v.id for v in report.failures()] == [_FAULT_IDS[1]]


def test_a_difference_from_warp_is_a_mismatch(monkeypatch: pytest.MonkeyPatch) -> None:
    # Warp's result for the middle kernel is changed before the comparison
    monkeypatch.setenv(FAULT_ENV, f"perturb:{_FAULT_IDS[1]}")
    report = run_sweep(_FAULT_IDS, modules=_modules(list(_FAULT_IDS)), timeout=_SUBSET_TIMEOUT)
    statuses = {i: v.status for i, v in report.verdicts.items()}
    assert statuses == {_FAULT_IDS[0]: "equal", _FAULT_IDS[1]: "mismatch", _FAULT_IDS[2]: "equal"}, _report(report)
    assert "1 of 64 differ, first at (0, 0)" in report.verdicts[_FAULT_IDS[1]].detail
    assert report.restarts == 0


@pytest.mark.skipif(os.environ.get("JARP_SWEEP") != "1", reason="the whole sweep takes long: set JARP_SWEEP=1")
def test_whole_sweep() -> None:
    report = run_sweep(timeout=_SWEEP_TIMEOUT)
    print(_report(report))
    assert report.harvested > 1000, _report(report)
    assert len(report.verdicts) == report.selected, _report(report)
    failures = [f"{v.status.upper()} {v.id} ({v.stage}): {v.detail}" for v in report.failures()]
    assert not failures, "\n".join(failures) + "\n" + _report(report)
