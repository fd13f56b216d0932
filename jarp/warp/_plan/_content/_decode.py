"""Reading untrusted content text back into a plan (`rebuild`): every field checked, the target found here, the
plan checks run again (`_recheck`)."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, NamedTuple

from .. import _launch_checks
from .._analysis import _races, _writes
from .._arg_spec import MAX_WARP_NDIM
from .._signature import param_spec
from .._values import Buffer, Param, Plan, Runs
from ._fields import (
    ABI_VERSION,
    MAX_BATCH_DIMS,
    MAX_SIZE,
    MAX_TEXT,
    PLAN_FIELDS,
    ContentError,
    check_keys,
    invalid,
    no_constant,
    no_duplicates,
    read_aliases,
    read_binding,
    read_bool,
    read_buffers,
    read_indices,
    read_int,
    read_ints,
    read_list,
    read_operand_batch,
    read_str,
    show,
)
from ._recheck import check_binding, check_plan
from ._targets import find_target, target_params


class LocalName(NamedTuple):
    """What a local description names (`local_text`): a plan of one process, by its handle there."""

    process: str  # the process's token (the registry's)
    handle: int
    name: str  # the plan's name, for messages
    why: str  # why the plan has no portable description


def read_text(text: str) -> Plan | LocalName:
    """The plan ``text`` describes (as `rebuild`), or, for a local description, the handle it names.

    The text is parsed once; a local description's fields are checked like any other description's.

    Raises:
        ContentError: as `rebuild`.
    """
    doc = _parse(text)
    if "local" not in doc:
        return _plan_of(doc)
    check_keys(doc, ("abi", "local"), "the local description")
    local = doc["local"]
    check_keys(local, ("handle", "name", "process", "why"), "local")
    return LocalName(
        read_str(local["process"], "local.process"),
        read_int(local["handle"], "local.handle", 0, 2**63 - 1),
        read_str(local["name"], "local.name"),
        read_str(local["why"], "local.why"),
    )


def rebuild(text: str) -> Plan:
    """The plan ``text`` describes, with its target found (and jarp's derived kernel rebuilt) in this process.

    Args:
        text: a description from `content_text`, possibly from another process, possibly crafted.

    Returns:
        The plan, equal to the one described (its target the same kernel or function object).

    Raises:
        ContentError: ``reason="invalid"`` for text that is not a well-formed description (the message names
            the field) or that describes an inconsistent launch; ``"abi"`` for a description of another jarp
            call ABI; ``"not_found"`` when its kernel or function is not defined in this process (the message
            names the module to import); ``"changed"`` when the one found has other code.

    Example:
        ```python
        assert rebuild(content_text(plan)) == plan
        ```
    """
    return _plan_of(_parse(text))


def _parse(text: str) -> dict[str, Any]:
    """The JSON object of a description, its ABI checked."""
    if not isinstance(text, str):
        invalid(f"a plan description is text, got {type(text).__name__}")
    if len(text) > MAX_TEXT:
        invalid(f"the plan description is {len(text)} characters long, more than the {MAX_TEXT} jarp reads")
    try:
        doc = json.loads(text, object_pairs_hook=no_duplicates, parse_constant=no_constant)
    except (ValueError, RecursionError) as e:
        invalid(f"the plan description is not JSON ({type(e).__name__}: {str(e)[:200]})")
    if not isinstance(doc, dict):
        invalid(f"the plan description is a JSON {type(doc).__name__}, not an object")
    abi = doc.get("abi")
    if type(abi) is not int:
        invalid(f"field 'abi' must be an int, got {show(abi)}")
    if abi != ABI_VERSION:
        raise ContentError(
            "abi",
            f"the program's Warp call was described for jarp call ABI {abi}, and this jarp reads ABI {ABI_VERSION}; "
            "load the program with the jarp version that compiled it, or compile it again with this one.",
        )
    return doc


def _plan_of(doc: dict[str, Any]) -> Plan:
    check_keys(doc, PLAN_FIELDS + (("partitioned",) if "partitioned" in doc else ()), "the plan")
    return _Reader(doc).plan()


class _Reader:
    """Reads one parsed description into a `Plan`, checking each field as it goes."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc

    def plan(self) -> Plan:
        doc = self.doc
        runs = {"kernel": Runs.KERNEL, "callable": Runs.CALLABLE}.get(read_str(doc["runs"], "runs"))
        if runs is None:
            invalid(f"field 'runs' must be 'kernel' or 'callable', got {show(doc['runs'])}")
        adjoint = read_bool(doc["adjoint"], "adjoint")
        name = read_str(doc["name"], "name")
        block_dim = doc["block_dim"]
        if block_dim is not None:
            block_dim = read_int(block_dim, "block_dim", 1, _launch_checks.MAX_BLOCK_DIM)
        target = find_target(runs, doc["target"], block_dim)
        operands = read_buffers(doc["operands"], "operands")
        results = read_buffers(doc["results"], "results")
        n_ops, n_res = len(operands), len(results)
        launch_dims = read_ints(doc["launch_dims"], "launch_dims", 0, MAX_SIZE, max_len=MAX_WARP_NDIM)
        if runs is Runs.KERNEL and not launch_dims:
            invalid("field 'launch_dims' of a kernel plan must have 1 to 4 dims, got []")
        if runs is Runs.CALLABLE and launch_dims:
            invalid(f"field 'launch_dims' of a callable plan must be [], got {list(launch_dims)}")
        if math.prod(launch_dims) > MAX_SIZE:
            invalid(f"field 'launch_dims' {list(launch_dims)} launches more than 2**63 - 1 threads")
        batch_shape = read_ints(doc["batch_shape"], "batch_shape", 0, MAX_SIZE, max_len=MAX_BATCH_DIMS)
        operand_batch = read_operand_batch(doc["operand_batch"], n_ops, len(batch_shape))
        for what, bufs in (("operands", operands), ("results", results)):
            for i, buf in enumerate(bufs):
                if math.prod(batch_shape) * buf.nbytes > MAX_SIZE:
                    invalid(f"field '{what}[{i}]' with batch shape {list(batch_shape)} holds more than 2**63 - 1 bytes")
        params = self._params(runs, target, operands, results)
        plan = Plan(
            runs=runs,
            adjoint=adjoint,
            target=target,
            params=params,
            launch_dims=launch_dims,
            operands=operands,
            results=results,
            zero_results=read_indices(doc["zero_results"], "zero_results", n_res, increasing=True),
            aliases=read_aliases(doc["aliases"], n_ops, n_res),
            batch_shape=batch_shape,
            operand_batch=operand_batch,
            has_side_effect=read_bool(doc["has_side_effect"], "has_side_effect"),
            graph_compatible=read_bool(doc["graph_compatible"], "graph_compatible"),
            scalar_operands=read_indices(doc["scalar_operands"], "scalar_operands", n_ops, increasing=True),
            protected=read_indices(doc["protected"], "protected", n_res, increasing=True),
            name=name,
            block_dim=block_dim,
            cpu_blocks=read_bool(doc["cpu_blocks"], "cpu_blocks"),
            bounds_checked=read_bool(doc["bounds_checked"], "bounds_checked"),
            partitioned=self._partitioned(batch_shape, operand_batch),
        )
        check_plan(plan)
        # derived, not described: recomputed from the target found here, as `build_plan` computed them (an adjoint
        # plan keeps its forward plan's `shares_cpu_state`, which the forward race proof decides)
        code_hash = _writes.code_hash(target) if runs is Runs.KERNEL else None
        forward = _races.split_proofs(
            runs, target, tuple(p.spec for p in params), block_dim, plan.bounds_checked, plan.launch_dims
        )
        shares = _races.plan_shares_cpu_state(runs, target, block_dim, plan.bounds_checked, forward.race_free)
        if adjoint:
            race_free, private = _races.adjoint_split_proofs(
                runs, target, params, results, block_dim, plan.bounds_checked, plan.launch_dims, forward
            )
        else:
            race_free, private = forward.race_free, _races.private_results(params, forward.private)
        return dataclasses.replace(
            plan, race_free=race_free, private=private, shares_cpu_state=shares, code_hash=code_hash
        )

    def _partitioned(self, batch_shape: tuple[int, ...], operand_batch: tuple[tuple[bool, ...], ...]) -> bool:
        if "partitioned" not in self.doc:
            return False
        if self.doc["partitioned"] is not True:
            invalid(f"field 'partitioned' must be true where present, got {show(self.doc['partitioned'])}")
        if not batch_shape:
            invalid("field 'partitioned' needs batch dims (field 'batch_shape' is [])")
        for i, flags in enumerate(operand_batch):
            if any(flags) and not all(flags):
                invalid(f"field 'operand_batch[{i}]' of a partitioned plan must carry every batch dim or none")
        return True

    def _params(
        self, runs: Runs, target: object, operands: tuple[Buffer, ...], results: tuple[Buffer, ...]
    ) -> tuple[Param, ...]:
        raw = read_list(self.doc["params"], "params")
        declared = target_params(runs, target)
        if len(raw) != len(declared):
            invalid(f"field 'params' has {len(raw)} parameters, but the target has {len(declared)}")
        params = []
        for i, (item, (name, warp_type)) in enumerate(zip(raw, declared, strict=True)):
            where = f"params[{i}]"
            check_keys(item, ("adjoint", "in_out", "name", "primal"), where)
            if read_str(item["name"], f"{where}.name") != name:
                invalid(f"field '{where}.name' is {show(item['name'])}, but the target's parameter {i} is {name!r}")
            in_out = read_bool(item["in_out"], f"{where}.in_out")
            try:
                spec = param_spec(name, warp_type, in_out=in_out, what="jarp plan description")
            except TypeError as e:
                invalid(f"parameter {name!r} of the target has no argument spec ({e})")
            if in_out and not spec.is_array:
                invalid(f"field '{where}.in_out' is true, but parameter {name!r} is a {spec.phrase()}")
            primal = read_binding(item["primal"], f"{where}.primal")
            adjoint = read_binding(item["adjoint"], f"{where}.adjoint")
            check_binding(spec, primal, adjoint, operands, results, where)
            params.append(Param(spec, primal, adjoint))
        return tuple(params)
