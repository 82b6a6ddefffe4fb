"""How a cached fit is stored: cloudpickle, then base64 on one line (Prefect's result record is JSON text).

Prefect's default ``pickle`` serializer base64-encodes with a line break every 76 characters
(``base64.encodebytes``), and the JSON record then escapes every break: at 10^6 comparison rows (a 180 MB pickle
of the ranking's tables) encoding and escaping took ~2 s of every ranking run, several times the pickling itself
(issue #19). :class:`FitResultSerializer` stores the same pickle as one base64 line (``base64.b64encode``): the
record holds the same object, written and read back in a fraction of the time. Records written by the default
serializer (type ``pickle``) are still read by it: a record names its serializer.
"""

from __future__ import annotations

import base64
from typing import Any

import cloudpickle  # type: ignore[import-untyped]  # ships no stubs or py.typed (Prefect's own pickler)
from prefect.serializers import Serializer
from pydantic import Field

__all__ = ["FIT_RESULTS", "FitResultSerializer"]


class FitResultSerializer(Serializer):  # Serializer[X] would register another class with Prefect's dispatch
    """cloudpickle (protocol 5) + one-line base64: what a fit task persists for its cache.

    ``loads(dumps(x))`` gives back an object equal to ``x`` (the pickle round trip); the type name
    ``crowdflow-fit-pickle`` is recorded in each result record, so Prefect finds this class when it reads one
    (it is registered when :mod:`tasks.results` is imported, as the fit tasks do).
    """

    type: str = Field(default="crowdflow-fit-pickle", frozen=True)

    def dumps(self, obj: Any) -> bytes:
        return base64.b64encode(cloudpickle.dumps(obj, protocol=5))

    def loads(self, blob: bytes) -> Any:
        return cloudpickle.loads(base64.b64decode(blob))


#: The serializer every fit task persists its result with.
FIT_RESULTS = FitResultSerializer()
