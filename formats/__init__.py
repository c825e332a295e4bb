"""faultproxy's on-disk formats: trace lines, the run directory (plan, episode log, verdict
layout), redaction, the line-aware YAML input reader and the user-error base class.

The bottom layer: it imports nothing else of faultproxy and never mitmproxy.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("faultproxy")
except PackageNotFoundError:  # running from a checkout that was never installed
    __version__ = "0+unknown"
