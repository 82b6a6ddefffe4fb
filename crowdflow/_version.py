"""The installed version of crowdflow, in a module of its own.

Library modules import ``__version__`` from here (never from the package root), so the root
``crowdflow/__init__.py`` can import its children without an import cycle.
"""

from importlib import metadata as _md

try:
    __version__ = _md.version("crowdflow")
except _md.PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+source"

__all__ = ["__version__"]
