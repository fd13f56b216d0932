"""Where the checkout and this package are, for the tests that start child processes from the repository root."""

from __future__ import annotations

import os
from pathlib import Path

SUPPORT = Path(__file__).resolve().parent  # tests/support: the scripts run by path live here
REPO = (
    SUPPORT.parent.parent
)  # the repository root: a child's cwd and PYTHONPATH, so `import tests...` finds this checkout


def child_environment() -> dict[str, str]:
    """This process's environment with the checkout first on ``PYTHONPATH``: a child imports this jarp and ``tests``."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
