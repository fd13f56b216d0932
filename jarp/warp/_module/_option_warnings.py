"""Warnings about a module's options, given once per process, module kind and option, at the user's line."""

from __future__ import annotations

import os
import sys
import warnings

import equinox as eqx

_warned: set[tuple[str, str]] = set()


def warned(what: str, option: str) -> bool:
    """Whether `warn_unused_option` has warned about this module kind's option already."""
    return (what, option) in _warned


def warn_unused_option(what: str, option: str, message: str) -> None:
    """Warn (once per process, module kind and option) about an option: ``"{what}: {option} {message}"``."""
    if (what, option) in _warned:
        return
    _warned.add((what, option))
    warnings.warn(f"{what}: {option} {message}", UserWarning, stacklevel=_user_stacklevel())


def _user_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside jarp, Equinox and dataclasses (the user's call)."""
    jarp_dir = os.path.dirname(sys.modules[__name__.partition(".")[0]].__file__ or "")  # the top-level package
    internal = (jarp_dir, os.path.dirname(eqx.__file__), "<string>")
    frame, level = sys._getframe(1), 1
    while frame is not None and (
        frame.f_code.co_filename.startswith(internal) or frame.f_code.co_filename.endswith("dataclasses.py")
    ):
        frame, level = frame.f_back, level + 1
    return level
