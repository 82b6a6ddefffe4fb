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
        secrets = sorted({*secret_env_values(), *known_secrets()}, key=len, reverse=True)
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


# --- storage_options: secret unless known public ---------------------------------------------------------------------
#: ``storage_options`` keys whose values are never credentials: documented fsspec / s3fs / gcsfs / adlfs options that
#: say *where* or *how* to read (an endpoint, a region, caching, a profile's or project's or account's *name*), never
#: *who may* read. Every other key (``key``, ``secret``, ``token``, ``connection_string``, ``passphrase``,
#: ``sas_token``, ``client_secret``, anything new or misspelt) is a secret: its value comes from an environment
#: variable (``{env: VAR}``) or a Prefect Secret block (``{secret_block: name}``), never inline. The list is short on
#: purpose: a key missing from it costs a user one ``{env: …}``; a secret key on it would leak.
PUBLIC_STORAGE_OPTIONS: frozenset[str] = frozenset(
    {
        "anon",  # s3fs/gcsfs/adlfs: anonymous access (a flag)
        "use_ssl",  # s3fs
        "endpoint_url",  # s3fs: an S3-compatible server's address (refused with a user part, see below)
        "region_name",  # s3fs (botocore)
        "requester_pays",  # s3fs, gcsfs
        "version_aware",  # s3fs, gcsfs
        "profile",  # s3fs: the *name* of a profile in ~/.aws (its keys stay in that file)
        "project",  # gcsfs: a Google Cloud project id
        "account_name",  # adlfs: the storage account's name (public: it is in every blob URL)
        "default_fill_cache",  # fsspec caching knobs
        "default_cache_type",
        "default_block_size",
        "cache_type",
        "block_size",
        "skip_instance_cache",
        "use_listings_cache",
        "listings_expiry_time",
        "auto_mkdir",  # local file system
    }
)
#: The two forms a secret storage option takes in a spec.
SECRET_REF_KEYS = ("env", "secret_block")

_KNOWN_SECRETS: set[str] = set()


def storage_option_refusal(options: dict[str, Any]) -> str | None:
    """Why ``options`` (a spec's ``storage_options``) cannot be accepted, naming keys only, or None.

    A key on :data:`PUBLIC_STORAGE_OPTIONS` takes a plain value (an ``endpoint_url`` without a user part); every other
    key takes only a reference, ``{"env": "VAR"}`` or ``{"secret_block": "name"}``.

    Examples
    --------
    >>> storage_option_refusal({"anon": True, "key": {"env": "AWS_KEY"}}) is None
    True
    >>> storage_option_refusal({"connection_string": "AccountKey=abc"})  # doctest: +ELLIPSIS
    "storage_options ['connection_string'] are secrets ..."
    """
    inline = sorted(k for k, v in options.items() if k not in PUBLIC_STORAGE_OPTIONS and not is_secret_ref(v))
    if inline:
        return (
            f"storage_options {inline} are secrets (only {sorted(PUBLIC_STORAGE_OPTIONS)} may be given inline) and "
            "credentials never go in a spec: write {env: VARIABLE} (an environment variable of the flow and the "
            "workers) or {secret_block: name} (a Prefect Secret block) instead of the value"
        )
    for k, v in options.items():
        if k in PUBLIC_STORAGE_OPTIONS and isinstance(v, str) and inline_secret(v, allow_user=False):
            return refusal(f"storage_options.{k}", inline_secret(v, allow_user=False) or "")
    return None


def is_secret_ref(value: Any) -> bool:
    """Whether ``value`` is ``{"env": "VAR"}`` or ``{"secret_block": "name"}`` (a mapping or an object with those)."""
    if isinstance(value, dict):
        given = [k for k in SECRET_REF_KEYS if value.get(k)]
        return len(given) == 1 and set(value) <= {*SECRET_REF_KEYS}
    return any(getattr(value, k, None) for k in SECRET_REF_KEYS)


def resolve_storage_options(
    options: dict[str, Any],
    load_secret: Any = None,
    environ: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The file system's options with every secret reference replaced by its value (kept out of every record).

    Parameters
    ----------
    options : dict
        The spec's ``storage_options`` (plain public values and ``{env: …}`` / ``{secret_block: …}`` references).
    load_secret : callable(str) -> str, optional
        Loads a Prefect Secret block by name (the tasks layer passes it; the library never imports Prefect).
    environ : dict, optional
        The environment (``os.environ`` by default).

    Raises
    ------
    crowdflow.contracts.errors.SpecError
        A variable that is not set, or a secret block without a loader; the message names it, never a value.
    """
    from crowdflow.contracts.errors import SpecError

    env = os.environ if environ is None else environ
    out: dict[str, Any] = {}
    for key, value in options.items():
        if not is_secret_ref(value):
            out[key] = value
            continue
        ref = value if isinstance(value, dict) else {k: getattr(value, k, None) for k in SECRET_REF_KEYS}
        if ref.get("env"):
            name = str(ref["env"])
            if name not in env:
                raise SpecError(
                    f"storage_options.{key} reads the environment variable {name}, which is not set where the flow "
                    f"runs: set {name} on the worker (and the Dask workers)"
                )
            secret = env[name]
        else:
            block = str(ref["secret_block"])
            if load_secret is None:
                raise SpecError(f"storage_options.{key} names the Prefect Secret block {block!r}: run it as a flow")
            secret = str(load_secret(block))
        remember_secret(secret)
        out[key] = secret
    return out


def remember_secret(value: str, min_length: int = 4) -> None:
    """Add ``value`` to the secrets :func:`redact` removes from every recorded string (this process)."""
    if isinstance(value, str) and len(value) >= min_length:
        _KNOWN_SECRETS.add(value)


def known_secrets() -> list[str]:
    """Secret values resolved in this process (longest first)."""
    return sorted(_KNOWN_SECRETS, key=len, reverse=True)
