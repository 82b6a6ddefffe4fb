"""Credentials: the one rule that keeps them out of specs, and the one redaction of recorded text.

The rule (:func:`inline_secret`, enforced by :func:`refuse_inline_secret` on every connection or address
field of the spec): a credential never enters a spec inline. Refused anywhere in such a field:

- a password in the user part of a URL (``scheme://user:password@host``), whatever characters it holds
  (a space, ``/``, ``@``, ``:``): the test runs on the raw text, before any URL parser could misread it;
- a query parameter whose name says it carries a secret (``password``, ``sslpassword``, ``token``,
  ``access_token``, ``api_key``, ``secret``, ``credential``…).

The refusal names the field and the kind of secret, never the value. Passwords come from an environment
variable (``password_env``) or a Prefect Secret block (``password_secret``) only. The same patterns are
published as a JSON-schema ``pattern`` (:data:`NO_INLINE_SECRET_PATTERN`) on those fields, so a Prefect
server refuses a deployment run whose form holds one before it stores the parameters.

:func:`redact` is the last line of defence for every string crowdflow records (manifest, logs of
connections): URL passwords, secret query parameters and the values of secret-looking environment variables
become ``***``.
"""

from __future__ import annotations

import os
import re
from typing import Any

REDACTED = "***"

# Query parameter names that carry a secret: any name containing one of these words (case-insensitive).
_SECRET_WORDS = r"pass(?:word|wd)?|pwd|secret|token|api_?key|access_?key|private_?key|credential|auth"
_SECRET_QUERY_NAME = re.compile(rf"^[A-Za-z0-9_.\-]*(?:{_SECRET_WORDS})[A-Za-z0-9_.\-]*$", re.IGNORECASE)
# scheme://userinfo-with-colon@…, anywhere before the query: a password in the user part
_USERINFO_PASSWORD = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://[^?#]*?:[^?#]*@")
# the password runs to the '@' that is followed by a host (so one holding '@', '/' or a space goes whole)
_URL_PASSWORD = re.compile(
    r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@]*:)(?P<secret>.+?)(?P<at>@)(?=[^\s@/?#:]*(?:[:/?#\s]|$))"
)
_USERINFO = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://[^/?#]*@")
_QUERY_SECRET = re.compile(
    rf"(?P<head>[?&;][A-Za-z0-9_.\-]*(?:{_SECRET_WORDS})[A-Za-z0-9_.\-]*=)(?P<secret>[^&;#]*)", re.I
)
_SECRET_ENV = re.compile(r"PASSWORD|PASSWD|SECRET|TOKEN|API_KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL", re.IGNORECASE)

#: JSON-schema pattern of a connection/address field without an inline credential (ECMA-262 and Python re).
NO_INLINE_SECRET_PATTERN = (
    r"^(?![A-Za-z][A-Za-z0-9+.\-]*://[^?#]*:[^?#]*@)"
    rf"(?![^#]*[?&;][A-Za-z0-9_.\-]*(?:{_SECRET_WORDS.replace('?:', '')})[A-Za-z0-9_.\-]*=)"
    r"[\s\S]*$"
)
#: The same for an address, where no user part at all is allowed (``token@host`` included).
NO_USERINFO_PATTERN = r"^(?![A-Za-z][A-Za-z0-9+.\-]*://[^/?#]*@)" + NO_INLINE_SECRET_PATTERN[1:]


def inline_secret(value: str, allow_user: bool = True) -> str | None:
    """What kind of credential ``value`` (a URL or address) holds inline, or None.

    ``allow_user=False`` (addresses such as a Dask scheduler's) refuses any user part (``token@host``) too.

    Examples
    --------
    >>> inline_secret("postgresql://ana@db:5432/crowd?sslmode=require") is None
    True
    >>> inline_secret("postgresql://ana:s3 cr/et@db/crowd")
    'in the user part of the URL'
    >>> inline_secret("postgresql://ana@db/crowd?sslpassword=x")
    "in the query parameter 'sslpassword'"
    """
    if _USERINFO_PASSWORD.search(value):
        return "in the user part of the URL"
    if not allow_user and _USERINFO.search(value):
        return "a user part (user@ or token@) in the address"
    _, _, rest = value.partition("?")
    query = rest.partition("#")[0]
    for item in re.split(r"[&;]", query) if query else []:
        name = item.partition("=")[0]
        if "=" in item and _SECRET_QUERY_NAME.match(name):
            return f"in the query parameter {name!r}"
    return None


def refuse_inline_secret(value: str | None, field: str, allow_user: bool = True) -> str | None:
    """``value`` unchanged, or ``ValueError`` naming ``field`` (never the value) when it holds a credential."""
    if value is None:
        return None
    kind = inline_secret(value, allow_user)
    if kind is not None:
        raise ValueError(refusal(field, kind))
    return value


def refusal(field: str, kind: str) -> str:
    """The one message for an inline credential: the field and where in it, never the value."""
    return (
        f"{field} contains a password or other secret ({kind}); credentials never go into a spec: name an "
        "environment variable with password_env, or a Prefect Secret block with password_secret"
    )


def secret_env_values(environ: dict[str, str] | None = None, min_length: int = 6) -> list[str]:
    """Values of environment variables whose names look like secrets (``*PASSWORD*``, ``*TOKEN*``…)."""
    env = os.environ if environ is None else environ
    return sorted({v for k, v in env.items() if _SECRET_ENV.search(k) and len(v) >= min_length}, key=len, reverse=True)


def redact(value: Any, secrets: list[str] | None = None) -> Any:
    """A copy of ``value`` (str / mapping / list, nested) safe to record: no password ever written.

    Replaces the password of any URL-like string ``scheme://user:password@host`` (the user stays; the
    password runs to the last ``@``, so one holding ``@``, ``/`` or a space is redacted whole), secret query
    parameters (``?password=…``, ``&sslpassword=…``, ``&token=…``) and every occurrence of a secret-looking
    environment variable's value (:func:`secret_env_values`, or ``secrets`` when given) with ``***``.

    Examples
    --------
    >>> redact({"url": "postgresql://ana:s3cr3t@db:5432/crowd?sslmode=require"}, secrets=[])
    {'url': 'postgresql://ana:***@db:5432/crowd?sslmode=require'}
    """
    if secrets is None:
        secrets = secret_env_values()
    if isinstance(value, str):
        out = _URL_PASSWORD.sub(lambda m: m["head"] + REDACTED + m["at"], value)
        out = _QUERY_SECRET.sub(lambda m: m["head"] + REDACTED, out)
        for s in secrets:
            out = out.replace(s, REDACTED)
        return out
    if isinstance(value, dict):
        return {redact(k, secrets) if isinstance(k, str) else k: redact(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(redact(v, secrets) for v in value)
    return value
