"""faultproxy's chaos proxy (a mitmproxy addon) and the runner that puts agents behind it."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("faultproxy")
except PackageNotFoundError:  # running from a checkout that was never installed
    __version__ = "0+unknown"
