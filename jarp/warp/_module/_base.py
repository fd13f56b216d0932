"""`AbstractWarpModule`: what `JaxKernel` and `JaxCallable` share.

A call flows one way: ``__call__`` (eager dispatch or tracing) -> derivative
rules (``jvp=``/``vjp=``) -> target resolution for the argument dtypes (final
class) -> argument binding (`_plan/_binding.py`) -> launch plan (final class,
`_plan/_builder.py`) -> reverse mode (`_jax/_adjoint.py`) -> the primitive
(`_jax/_primitive.py`) -> lowering (`_jax/_lowering.py`) -> the FFI target and its
executors (`_ffi/_target.py`, `_ffi/_executors.py`). The final classes supply only
what differs: how the target is resolved and how its plan is built.
"""

# No `from __future__ import annotations`: Equinox refuses stringified `AbstractVar` annotations.

import abc
import dataclasses
import gc
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import equinox as eqx
import jax
import warp as wp
from jaxtyping import PyTree

if TYPE_CHECKING:
    # as Equinox's documentation advises: type checkers know ClassVar, not Equinox's runtime marker
    from typing import ClassVar as AbstractClassVar
else:
    from equinox import AbstractClassVar

from .. import _geometry
from .._ffi._registry import registry
from .._jax import _adjoint, _user_rules
from .._jax._primitive import CallConfig
from .._plan._arg_spec import ArgSpec
from .._plan._binding import BoundCall, bind_arguments
from .._plan._normalize import check_vmap_method, normalize_output_dims
from .._plan._signature import Signature
from .._plan._values import Plan
from .._upstream import _warp_kernels, _warp_launches
from . import _eager


class AbstractWarpModule(eqx.Module):
    """The abstract base of jarp's modules: a Warp launch as an immutable, JAX-callable Equinox module.

    Subclasses are final (`JaxKernel`, `JaxCallable`); they declare the options as
    static fields and implement target resolution and plan building. Calling a
    module returns a tuple of output arrays: in-out arguments first, then the pure
    outputs (which start zero-filled).

    The options both kinds share are declared here as ``eqx.AbstractVar``s (which make no dataclass
    field, so each final class keeps its target as the first field), with their converters in
    the ``*_field`` helpers below and their checks in one `__check_init__`.
    """

    num_outputs: eqx.AbstractVar[int]
    vmap_method: eqx.AbstractVar[str | None]
    output_dims: eqx.AbstractVar[Any]
    in_out_argnames: eqx.AbstractVar[tuple[str, ...]]
    module_preload_mode: eqx.AbstractVar[wp.JaxModulePreloadMode]
    enable_backward: eqx.AbstractVar[bool]
    jvp: eqx.AbstractVar[Callable[..., Any] | None]
    vjp: eqx.AbstractVar[Callable[..., Any] | None]

    # The factory's name, for messages ("jax_kernel()").
    _what: AbstractClassVar[str]
    # The per-call options `__call__` accepts.
    _call_options: AbstractClassVar[tuple[str, ...]]
    # Whether scalar parameters may take JAX values (read at run time from one-element arrays).
    _runtime_scalars: AbstractClassVar[bool]

    def __check_init__(self) -> None:
        # Equinox runs this after the final class's own checks (those of its target).
        check_vmap_method(self.vmap_method, self._what)
        for name in ("jvp", "vjp"):
            rule = getattr(self, name)
            if rule is not None and not callable(rule):
                raise TypeError(f"{self._what}: {name} must be a jarp module or a function, got {type(rule).__name__}.")

    def __call__(self, *args: PyTree, **options: object) -> tuple[jax.Array, ...]:
        """Launch on ``args`` (one value per input parameter); return the outputs as a tuple."""
        unknown = sorted(set(options) - set(self._call_options))
        if unknown:
            raise TypeError(
                f"{self._what}: unknown call option(s) {unknown}; a {type(self).__name__} call takes "
                f"{list(self._call_options)}."
            )
        if _geometry.has_structures(args):
            if self.jvp is not None or self.vjp is not None:
                raise TypeError(
                    f"{self._what}: a call given Warp structures (jarp.warp.Mesh...) differentiates through Warp's "
                    "adjoint (enable_backward=True); jvp=/vjp= rules are not applied to it. Drop the rules, or pass "
                    "the structure's arrays as array parameters of the rule's modules."
                )
            return self._call_with_structures(tuple(args), options)
        out = _eager.try_eager(self, args, options)
        return out if out is not None else self._trace(tuple(args), options)

    def _trace(self, args: tuple[Any, ...], options: Mapping[str, Any]) -> tuple[jax.Array, ...]:
        """Bind the launch into the current JAX trace (what `__call__` does under `jit`)."""
        if self.jvp is not None or self.vjp is not None:
            bare = dataclasses.replace(self, jvp=None, vjp=None)
            return _user_rules.call_with_rules(
                lambda *a: bare._trace(a, options),
                args,
                self.jvp,
                self.vjp,
                self._label(self._unresolved_target()),
                primal_differentiable=self.enable_backward,
            )
        # Before building anything: a kernel whose plans are released leaves Warp's live set, so
        # the module build below does not include (and keep) it.
        registry.release_idle()
        if _warp_launches.take_build_failures():
            # A kernel whose build failed is often kept only by reference cycles (the traceback of
            # the error): collect them once, so that Warp's next build of that module leaves it out.
            gc.collect()
        target = self._target_for(args)
        what = self._label(target)
        bound = bind_arguments(self._signature(target), args, what=what, runtime_scalars=self._runtime_scalars)
        with _warp_kernels.one_code_version():  # a plan is drawn from one version of its code, hashed once
            plan = self._plan(target, bound, options, what)
        vmap_method = options.get("vmap_method")
        config = CallConfig(check_vmap_method(self.vmap_method if vmap_method is None else vmap_method, what))
        out = _adjoint.launch(plan, config, bound.operands, self.enable_backward)
        return out[: len(plan.results) - len(plan.protected)]

    def _output_dims(self, options: Mapping[str, Any], what: str) -> Any:
        """This call's (normalised) ``output_dims``: the per-call option, else the module's."""
        dims = options.get("output_dims")
        return self.output_dims if dims is None else normalize_output_dims(dims, f"{what}: output_dims")

    def input_specs(self) -> tuple[ArgSpec, ...] | None:
        """The module's input parameters (in-out ones included), in call order; None where they are only known per
        call (a ``jax_callable(generic=True)`` factory). Generic kernel parameters have no dtype (``generic``)."""
        target = self._annotated_target()
        return None if target is None else self._signature(target).inputs

    @abc.abstractmethod
    def _annotated_target(self) -> Any:
        """The target whose annotations give the parameters before any call; None if only a call resolves it."""

    @abc.abstractmethod
    def _unresolved_target(self) -> Any:
        """The wrapped kernel or function, before resolution for argument dtypes."""

    @abc.abstractmethod
    def _target_for(self, args: tuple[Any, ...]) -> Any:
        """The concrete target (kernel overload, specialised function) for the arguments' dtypes."""

    @abc.abstractmethod
    def _signature(self, target: Any) -> Signature:
        """The signature of a resolved target under this module's output options."""

    @abc.abstractmethod
    def _label(self, target: Any) -> str:
        """How messages name this module and target (``"jax_kernel() kernel 'k'"``)."""

    @abc.abstractmethod
    def _plan(self, target: Any, bound: BoundCall, options: Mapping[str, Any], what: str) -> Plan:
        """The launch plan of one bound call."""

    @abc.abstractmethod
    def _call_with_structures(self, args: tuple[Any, ...], options: Mapping[str, Any]) -> tuple[jax.Array, ...]:
        """A call given jarp structures (`jarp.warp.Mesh`...): a callable call on their arrays (`_geometry.launch`)."""
