"""How a cached fit is stored: cloudpickle, then base64 on one line (Prefect's result record is JSON text).

Prefect's default ``pickle`` serializer base64-encodes with a line break every 76 characters
(``base64.encodebytes``), and the JSON record then escapes every break: at 10^6 comparison rows (a 180 MB pickle
of the ranking's tables) encoding and escaping took ~2 s of every ranking run, several times the pickling itself
(issue #19). :class:`FitResultSerializer` stores the same pickle as one base64 line (``base64.b64encode``): the
record holds the same object, written and read back in a fraction of the time. Records written by the default
serializer (type ``pickle``) are still read by it: a record names its serializer.

Prefect's record holds the serialized result several times at once while it is written (the base64 bytes, the
record's JSON text and its encoded bytes: ≈ 4× the pickle). A serializer with ``compress_over`` set stores a pickle
longer than that as ``zlib:`` + base64 of its zlib (level 1) compression: the skills fit's, whose worker table grows
with the workers (22 MB → 5.5 MB at 10^6 labels over 2·10^5 workers, issue #36). ``:`` is not a base64 character,
so :meth:`FitResultSerializer.loads` tells the two forms apart, and records written before read back unchanged.
"""

from __future__ import annotations

import base64
import zlib
from typing import Any

import cloudpickle  # type: ignore[import-untyped]  # ships no stubs or py.typed (Prefect's own pickler)
from prefect.serializers import Serializer
from pydantic import Field

__all__ = ["FIT_RESULTS", "SKILLS_FIT_RESULTS", "FitResultSerializer"]

_ZLIB = b"zlib:"


class FitResultSerializer(Serializer):  # Serializer[X] would register another class with Prefect's dispatch
    """cloudpickle (protocol 5) + one-line base64: what a fit task persists for its cache.

    ``loads(dumps(x))`` gives back an object equal to ``x`` (the pickle round trip); the type name
    ``crowdflow-fit-pickle`` is recorded in each result record, so Prefect finds this class when it reads one
    (it is registered when :mod:`tasks.results` is imported, as the fit tasks do).
    """

    type: str = Field(default="crowdflow-fit-pickle", frozen=True)
    #: pickles longer than this many bytes are stored zlib-compressed (level 1); None: never
    compress_over: int | None = None

    def dumps(self, obj: Any) -> bytes:
        data = cloudpickle.dumps(obj, protocol=5)
        if self.compress_over is not None and len(data) > self.compress_over:
            return _ZLIB + base64.b64encode(zlib.compress(data, 1))
        return base64.b64encode(data)

    def loads(self, blob: bytes) -> Any:
        if blob.startswith(_ZLIB):
            return cloudpickle.loads(zlib.decompress(base64.b64decode(blob[len(_ZLIB) :])))
        return cloudpickle.loads(base64.b64decode(blob))


#: The serializer every fit task persists its result with.
FIT_RESULTS = FitResultSerializer()
#: The skills fit's: its result holds a row per worker. Over 16 MB compressed (a 10^6-label fit over 2,000 workers,
#: 8.8 MB, is not: no cost where the workers are few).
SKILLS_FIT_RESULTS = FitResultSerializer(compress_over=16 * 2**20)
