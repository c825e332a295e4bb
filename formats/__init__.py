"""faultproxy's on-disk formats: trace lines, the run directory (plan, episode log, verdict
layout), redaction, the line-aware YAML input reader and the user-error base class.

The bottom layer: it imports nothing else of faultproxy and never mitmproxy.
"""

def __getattr__(name: str) -> str:
    """`__version__`, read from the installed metadata on first use: importlib.metadata costs
    about 45 ms, which every `faultproxy report` would pay before parsing its arguments."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("faultproxy")
    except PackageNotFoundError:  # running from a checkout that was never installed
        return "0+unknown"
