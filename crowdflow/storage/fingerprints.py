"""Fingerprints: what a fit receives, and which code computes it (the cache key of every fit).

A fit's cache key (:func:`fit_key`) hashes what the fit actually receives, after every step that can change it
(the source, the column mapping, the reader's coercions, the duplicate policy, validation, encoding): the data
passed to the fit (:func:`data_fingerprint`: DataFrames, arrays, encoded label matrices), the job's options, any
other setting the fit reads, where it runs (the runner kind and address: a cluster that never saw a client is
never answered from a local cache) and the code's identity (:func:`code_identity`: the package version, plus a
hash of the library's source in a development install, where the version does not move with the code). So no
setting of the spec can change a fit without changing its key; fields that cannot change what the fit receives
(output folder, report, warehouse, names) leave it alone.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel

from crowdflow._version import __version__

__all__ = ["code_identity", "data_fingerprint", "fit_key"]


def _update(h: Any, obj: Any) -> None:
    if isinstance(obj, pd.DataFrame):
        h.update(b"frame")
        h.update(json.dumps([[str(c), str(t)] for c, t in obj.dtypes.items()]).encode())
        h.update(np.ascontiguousarray(pd.util.hash_pandas_object(obj, index=False).to_numpy()).tobytes())
    elif isinstance(obj, pd.Series):
        _update(h, obj.to_frame())
    elif isinstance(obj, np.ndarray):
        h.update(f"array{obj.dtype}{obj.shape}".encode())
        if obj.dtype == object:
            _update(h, pd.Series(obj, dtype=object).astype(str).to_frame())
        else:
            h.update(np.ascontiguousarray(obj).tobytes())
    elif isinstance(obj, BaseModel):
        h.update(obj.model_dump_json().encode())
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        h.update(type(obj).__name__.encode())
        for f in dataclasses.fields(obj):
            h.update(f.name.encode())
            _update(h, getattr(obj, f.name))
    elif isinstance(obj, dict):
        h.update(b"dict")
        for k in sorted(obj, key=str):
            h.update(str(k).encode())
            _update(h, obj[k])
    elif isinstance(obj, list | tuple):
        h.update(f"seq{len(obj)}".encode())
        for item in obj:
            _update(h, item)
    elif hasattr(obj, "tocsr"):  # a SciPy sparse matrix
        m = obj.tocsr()
        h.update(f"sparse{m.shape}".encode())
        for part in (m.indptr, m.indices, m.data):
            _update(h, np.asarray(part))
    else:
        h.update(json.dumps(obj, default=str, sort_keys=True).encode())


def data_fingerprint(*objs: Any) -> str:
    """BLAKE2b over the content of ``objs`` (DataFrames, arrays, dataclasses such as a ``LabelMatrix``, models).

    Equal content gives an equal fingerprint whatever the object's identity; any changed value, column name,
    dtype, order or shape changes it. A DataFrame is hashed column by column (``pandas.util.hash_pandas_object``,
    vectorised), never row by row in Python.
    """
    h = hashlib.blake2b(digest_size=32)
    for obj in objs:
        _update(h, obj)
    return h.hexdigest()


@functools.cache
def code_identity() -> str:
    """The identity of the crowdflow code that computes a fit: ``<version>`` or ``<version>+src.<hash>``.

    In a development install (an editable install, or a source tree run without installing) the version
    does not change with the code, so the SHA-256 of the library's Python sources (``crowdflow/**/*.py``,
    names and bytes) is appended: an edited model is never answered from a cache filled by the old one.
    """
    if not _is_development_install():
        return __version__
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    return f"{__version__}+src.{h.hexdigest()[:16]}"


def _is_development_install() -> bool:
    """The library is imported from a source tree (an editable install or none), not from site-packages."""
    return not any(part in ("site-packages", "dist-packages") for part in Path(__file__).resolve().parts)


def fit_key(job: str, data: Any, options: Any, where: Any = None, **settings: Any) -> str:
    """The cache key of one fit.

    Parameters
    ----------
    job : str
        The job (a skills fit never answers a ranking fit).
    data : Any
        What the fit receives (:func:`data_fingerprint`).
    options : pydantic model or mapping
        The job's options.
    where : Any
        Where the fit runs (runner kind and address); part of the key so a cluster is never skipped.
    **settings
        Any other value the fit reads (e.g. ``allow_disconnected`` from the checks).

    Returns
    -------
    str
        A hex digest.
    """
    return data_fingerprint(job, code_identity(), data, options, where, settings)
