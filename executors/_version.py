"""The version of the ``adrules`` distribution, which ships this package."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("adrules")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
