"""kubeherd: a Kopf operator for CustomDaemonSets and SchedulerProfiles."""

from importlib.metadata import PackageNotFoundError, version

try:
    # The installed package's version (pyproject.toml's), so that `--version`, the start-up log
    # line and the User-Agent can never disagree with what pip or uv installed.
    __version__ = version("kubeherd")
except PackageNotFoundError:  # a source tree on PYTHONPATH, never installed
    __version__ = "0+unknown"
