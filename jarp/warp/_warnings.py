"""The warnings jarp gives about a call, to filter with ``warnings.filterwarnings`` by category.

Each is raised where its check runs (the launch checks of the plan stage, `_plan._launch_checks`).
"""

from ._plan._launch_checks import LaunchDimsWarning as LaunchDimsWarning

__all__ = ["LaunchDimsWarning"]
