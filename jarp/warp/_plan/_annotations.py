"""Read the Warp annotations of a `jax_callable` function, also when they are strings.

In a module with `from __future__ import annotations` every annotation is a string,
evaluated here in the function's globals, its closure cells and, for functions built
by a `jax_callable(generic=True)` factory, the factory's local variables. The last ones
matter because a name a nested function uses only in its annotations (`vec3` in the
example below) is not captured in its closure: once the factory has returned, nothing
but the factory's frame knew its value, so jarp records the locals of the frame that
defined the returned function as that frame returns.

Example:
    ```python
    from __future__ import annotations

    def factory(dtype):
        vec3 = wp.types.vector(3, dtype)

        def norm(v: wp.array(dtype=vec3), out: wp.array(dtype=dtype)):
            wp.launch(norm_kernel, dim=v.shape, inputs=[v], outputs=[out])

        return norm
    ```
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import weakref
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any

from .._upstream import _locks

# The local variables of the factory call that created each function (weakly keyed by that function).
_factory_scopes: weakref.WeakKeyDictionary[Callable[..., Any], dict[str, Any]] = weakref.WeakKeyDictionary()
_scopes_lock = _locks.make("annotation_scopes")


def _name(func: object) -> str:
    return getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)


def _factory_scope(func: Any) -> dict[str, Any]:
    """The locals recorded by `call_factory` for the scope that defined `func` (empty if none)."""
    with _scopes_lock:
        try:
            return _factory_scopes.get(func, {})
        except TypeError:  # not weakly referenceable, so never recorded
            return {}


def _closure_vars(func: object) -> dict[str, Any]:
    """The function's closure variables by name, skipping cells not yet filled."""
    code, closure = getattr(func, "__code__", None), getattr(func, "__closure__", None)
    if code is None or closure is None:
        return {}
    out = {}
    for name, cell in zip(code.co_freevars, closure, strict=True):
        with contextlib.suppress(ValueError):  # an empty cell (a variable assigned after the function was made)
            out[name] = cell.cell_contents
    return out


def call_factory(factory: Callable[..., Any], *args: object) -> Any:
    """Call a `jax_callable(generic=True)` factory, recording the locals of the scope that defined its result.

    While the factory runs, a profile hook (on this thread only) watches functions
    return; the frame that returns the function the factory ends up returning, and
    whose code defines it, is the scope its annotations were written in (the factory
    itself, or a helper it delegates to). When another profiler is active the hook is
    not installed, and the function's string annotations resolve through its globals
    and closure alone.

    Args:
        factory: The factory.
        *args: The Warp scalar dtypes to specialise it for.

    Returns:
        What the factory returns.
    """
    if sys.getprofile() is not None:
        return factory(*args)
    defined: list[tuple[Any, dict[str, Any]]] = []  # (function, locals of the frame that defined and returned it)

    def hook(frame: FrameType, event: str, arg: object) -> None:
        if event == "return":
            code = getattr(arg, "__code__", None)
            if code is not None and any(c is code for c in frame.f_code.co_consts):
                defined.append((arg, dict(frame.f_locals)))

    sys.setprofile(hook)
    try:
        result = factory(*args)
    finally:
        sys.setprofile(None)
    scope = next((scope for func, scope in reversed(defined) if func is result), None)
    if scope is not None:
        try:
            with _scopes_lock:
                _factory_scopes[result] = scope
        except TypeError:  # not weakly referenceable: resolve without the factory's locals
            pass
    return result


def _resolve(func: object, param: str, annotation: str, namespace: Mapping[str, Any], what: str) -> Any:
    """Evaluate one string annotation, turning any failure into a `TypeError` that says where and why."""
    try:
        return eval(annotation, getattr(func, "__globals__", {}), dict(namespace))
    except NameError as e:
        cause = (
            f"{e}. String annotations (from `from __future__ import annotations`) are evaluated in the function's "
            "module globals and closure variables"
            + (", and the locals of the generic factory that built it" if _factory_scope(func) else "")
            + "; a name a nested function uses only in annotations is not in its closure. Define the name at "
            "module level, use it in the function's body as well, or build the function in a "
            "jax_callable(generic=True) factory"
        )
    except Exception as e:
        cause = f"{type(e).__name__}: {e}"
    raise TypeError(
        f"{what}: cannot resolve the annotation {annotation!r} of parameter {param!r} of {_name(func)!r}: {cause}."
    ) from None


def _positional_params(func: Callable[..., Any]) -> tuple[list[str], dict[str, Any]]:
    """The names of the parameters a caller passes positionally, and their (unevaluated) annotations.

    Works for functions, callable objects (``__call__``, without ``self``) and ``functools.partial``
    (without the arguments it binds).
    """
    sig = inspect.signature(func, eval_str=False)
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    params = [p for p in sig.parameters.values() if p.kind in kinds]
    return [p.name for p in params], {p.name: p.annotation for p in params}


def _code_function(func: Any) -> Any:
    """The plain function whose code defines ``func``'s parameters (through partials, wrappers and ``__call__``)."""
    for _ in range(16):
        if isinstance(func, functools.partial):
            func = func.func
        elif not inspect.isfunction(func) and hasattr(func, "__wrapped__"):
            func = func.__wrapped__  # a wrapper instance (e.g. a callable compared by value)
        elif inspect.ismethod(func):
            func = func.__func__
        elif not inspect.isfunction(func) and callable(func):
            func = type(func).__call__
        else:
            break
    return func


def function_params(func: Callable[..., Any], what: str = "jax_callable()") -> tuple[tuple[str, Any], ...]:
    """Return `(name, annotation)` for each positional parameter of a Warp-annotated Python function.

    String annotations are evaluated in the function's globals, overridden by the locals
    of the generic factory that built it (if any), overridden by its closure variables.

    Args:
        func: The function.
        what: How to name the caller in error messages.

    Returns:
        One `(name, annotation)` pair per positional parameter, in order.

    Raises:
        TypeError: a parameter has no annotation, or a string annotation cannot be evaluated
            (the message names the function, the parameter and the cause).

    Example:
        >>> import warp as wp
        >>> def scale(a: "wp.array(dtype=float)", s: float): ...
        >>> (a_name, a_type), (s_name, s_type) = function_params(scale)
        >>> a_name, wp.types.type_repr(a_type), s_name, s_type
        ('a', 'array(ndim=1, dtype=float32)', 's', <class 'float'>)
    """
    names, annotations = _positional_params(func)
    missing = [name for name in names if annotations.get(name, inspect.Parameter.empty) is inspect.Parameter.empty]
    if missing:
        raise TypeError(
            f"{what}: parameter(s) {missing} of {_name(func)!r} have no type annotation; annotate every "
            "parameter like a Warp kernel (e.g. `a: wp.array(dtype=float)`)."
        )
    code = _code_function(func)  # whose globals, closure and factory scope string annotations refer to
    namespace: dict[str, Any] | None = None
    params = []
    for name in names:
        annotation = annotations[name]
        if isinstance(annotation, str):
            if namespace is None:
                namespace = {**_factory_scope(code), **_closure_vars(code)}
            # twice for a quoted annotation in a module with `from __future__ import annotations`
            for _ in range(2):
                if isinstance(annotation, str):
                    annotation = _resolve(code, name, annotation, namespace, what)
        params.append((name, annotation))
    return tuple(params)
