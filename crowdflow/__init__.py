"""crowdflow: worker skills, consensus labels, rankings and assignments from crowdsourcing data (the pure library)."""

from importlib import metadata as _md

try:
    __version__ = _md.version("crowdflow")
except _md.PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+source"

__all__ = ["__version__"]
