"""The environment a jarp bug report needs: versions, devices, FFI registration, Warp's kernel cache.

`environment` collects it as a JSON-friendly dict and `format_environment` renders
it as text; ``python -m jarp`` prints one or the other. Every probe is guarded, so
a broken piece (no GPU, a CUDA plugin that fails to load) is reported, never raised.
"""

from __future__ import annotations

import importlib.metadata
import platform
import sys
from collections.abc import Callable
from typing import Any

import jax
import warp as wp

import jarp
import jarp.warp

# Distributions whose versions a bug report needs, by display name (optional ones are listed only if installed).
_PACKAGES = {
    "jarp": "jarp",
    "jax": "jax",
    "jaxlib": "jaxlib",
    "equinox": "equinox",
    "warp": "warp-lang",
    "numpy": "numpy",
    "jaxtyping": "jaxtyping",
}
_OPTIONAL_PACKAGES = {
    "jax-cuda12-plugin": "jax-cuda12-plugin",
    "jax-cuda13-plugin": "jax-cuda13-plugin",
    "jax-cuda12-pjrt": "jax-cuda12-pjrt",
    "jax-cuda13-pjrt": "jax-cuda13-pjrt",
}


def _guard(probe: Callable[[], Any]) -> Any:
    try:
        return probe()
    except Exception as e:  # a report must never crash: record what failed instead
        return f"error: {type(e).__name__}: {e}"


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _versions() -> dict[str, str]:
    out = {"python": f"{platform.python_implementation()} {sys.version.split()[0]}"}
    for name, dist in _PACKAGES.items():
        out[name] = _version(dist) or "not installed"
    if out["jarp"] == "not installed":
        out["jarp"] = f"{jarp.__version__} (source tree)"
    for name, dist in _OPTIONAL_PACKAGES.items():
        version = _version(dist)
        if version is not None:
            out[name] = version
    return out


def _jax() -> dict[str, Any]:
    return {
        "default_backend": jax.default_backend(),
        "devices": [f"{d.platform}:{d.id} ({d.device_kind})" for d in jax.devices()],
        "x64": bool(jax.config.jax_enable_x64),  # pyright: ignore[reportAttributeAccessIssue]  # JAX sets its options on Config at run time
    }


def _version_str(version: Any) -> str | None:
    return None if version is None else ".".join(str(v) for v in version)


def _warp() -> dict[str, Any]:
    wp.init()
    return {
        "devices": [f"{d.alias} ({d.name})" for d in wp.get_devices()],
        "cuda_available": bool(wp.is_cuda_available()),
        "cuda_toolkit": _version_str(wp.get_cuda_toolkit_version()),
        "cuda_driver": _version_str(wp.get_cuda_driver_version()),
        "cuda_archs_supported_by_compiler": list(wp.get_cuda_supported_archs()),
        "kernel_cache_dir": str(wp.config.kernel_cache_dir),
    }


def _jarp() -> dict[str, Any]:
    before = jarp.warp.runtime_info()
    registered: Any = _guard(lambda: jarp.warp.runtime_info(register=True)["ffi_registered"])
    return {
        "ffi_targets": before["ffi_targets"],
        "ffi_platforms": before["ffi_platforms"],
        "ffi_registered_before": before["ffi_registered"],
        "ffi_registered": registered,
        "plans": before["plans"],
        "executors": before["executors"],
    }


def environment() -> dict[str, Any]:
    """Collect the environment a bug report needs, registering jarp's FFI targets first.

    Returns:
        A JSON-serialisable dict with sections ``versions``, ``platform``, ``jax``,
        ``warp`` and ``jarp``; a section (or entry) whose probe failed holds an
        ``"error: ..."`` string instead.
    """
    return {
        "versions": _guard(_versions),
        "platform": _guard(platform.platform),
        "jax": _guard(_jax),
        "warp": _guard(_warp),
        "jarp": _guard(_jarp),
    }


def _section(title: str, value: object) -> list[str]:
    if not isinstance(value, dict):
        return [f"{title}: {value}"]
    lines = [f"{title}:"]
    for key, item in value.items():
        if isinstance(item, list):
            item = ", ".join(str(i) for i in item) or "none"
        elif item is None:
            item = "none"
        lines.append(f"  {key:<34} {item}")
    return lines


def format_environment(env: dict[str, Any]) -> str:
    """Render `environment`'s dict as the text ``python -m jarp`` prints."""
    lines = ["jarp environment report (paste this into bug reports)", ""]
    lines += _section("versions", env.get("versions"))
    lines += [f"platform: {env.get('platform')}", ""]
    lines += _section("JAX", env.get("jax"))
    lines.append("")
    lines += _section("Warp", env.get("warp"))
    lines.append("")
    jarp_info = env.get("jarp")
    if isinstance(jarp_info, dict):
        registered = jarp_info.get("ffi_registered")
        if registered is True:
            state = "registered" + ("" if jarp_info.get("ffi_registered_before") else " (by this report)")
        else:
            state = f"NOT registered ({registered})"
        targets = ", ".join(jarp_info.get("ffi_targets", []))
        platforms = ", ".join(jarp_info.get("ffi_platforms", []))
        lines += [
            "jarp:",
            f"  {'FFI targets':<34} {targets} on {platforms}: {state}",
            f"  {'launch plans in this process':<34} {jarp_info.get('plans')}",
            f"  {'prepared (plan, device) executors':<34} {jarp_info.get('executors')}",
        ]
    else:
        lines += _section("jarp", jarp_info)
    return "\n".join(lines) + "\n"
