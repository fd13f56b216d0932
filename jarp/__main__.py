"""``python -m jarp``: print the environment a bug report needs.

Versions (Python, jarp, JAX, jaxlib, Equinox, Warp, NumPy), the devices JAX and
Warp see, whether jarp's FFI targets are registered (the command registers them
first), Warp's kernel cache directory and the number of launch plans. Works, and
exits 0, on machines without a GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

import warp as wp

from jarp._env import environment, format_environment


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m jarp",
        description="Print the environment a jarp bug report needs: versions, devices, FFI targets, kernel cache.",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)

    # The report lists Warp's devices and cache itself; Warp's start-up banner would only repeat them.
    wp.config.log_level = max(wp.config.log_level, wp.LOG_WARNING)

    env = environment()
    if args.json:
        json.dump(env, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(format_environment(env))
    return 0


if __name__ == "__main__":
    sys.exit(main())
