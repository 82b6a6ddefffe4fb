"""Reading a spec's sources: files, or database queries with their password resolved at run time.

Passwords never travel in the spec or the manifest: a spec names an environment variable
(``password_env``) or a Prefect Secret block (``password_secret``); the password is looked up here and
handed to the library call that opens the connection. Prefect is imported only to read a Secret block,
so ``crowdflow validate`` stays free of it.
"""

from __future__ import annotations

from typing import Any, cast

from crowdflow.contracts.errors import SpecError
from crowdflow.contracts.tables import INPUTS
from crowdflow.spec import Credentials, PipelineBase, SourceSpec, StorageSecret
from crowdflow.storage.io import LoadedTable, read_query, read_table
from crowdflow.storage.secrets import remember_secret, resolve_storage_options
from crowdflow.storage.warehouse import password_from_env


def load_secret_block(name: str, what: str = "storage_options", field: str = "secret_block") -> str:
    """The value of the Prefect Secret block ``name`` (remembered for redaction); ``SpecError`` when missing."""
    from prefect.blocks.system import Secret

    try:
        # _sync=True: the synchronous path of Prefect's sync/async dual API (stubs only know the async one)
        block = cast(Secret[Any], Secret.load(name, _sync=True))  # type: ignore[call-arg]
    except ValueError:
        raise SpecError(
            f"{what}: Prefect Secret block '{name}' ({field}) not found: create it (prefect block create secret, or "
            "Secret(value=...).save(name)) on the server the worker uses"
        ) from None
    value = str(block.get())
    remember_secret(value)
    return value


def storage_options_of(source: SourceSpec, kind: str = "input") -> dict[str, Any] | None:
    """The source's fsspec options with ``{env: …}`` / ``{secret_block: …}`` resolved (None when it has none).

    The resolved values go only to the file system that opens the URL; they are remembered so that
    :func:`crowdflow.storage.secrets.redact` removes them from anything recorded.
    """
    if not source.storage_options:
        return None
    opts = source.storage_options
    raw = {k: v.model_dump(exclude_none=True) if isinstance(v, StorageSecret) else v for k, v in opts.items()}
    return resolve_storage_options(raw, load_secret=lambda name: load_secret_block(name, f"{kind} storage_options"))


def resolve_password(creds: Credentials, what: str) -> str | None:
    """The password named by ``password_env`` / ``password_secret``, or ``None`` when neither is set.

    Parameters
    ----------
    creds : Credentials
        A source or warehouse spec.
    what : str
        What needs it (for messages), e.g. ``labels source``.

    Raises
    ------
    SpecError
        The environment variable is unset or the Secret block does not exist.
    """
    if creds.password_env:
        return password_from_env(creds.password_env, what)
    if creds.password_secret:
        return load_secret_block(creds.password_secret, what, "password_secret")
    return None


def read_source(spec: PipelineBase, source: SourceSpec, kind: str) -> LoadedTable:
    """A file source through :func:`read_table`, a query source through :func:`read_query` (password resolved)."""
    if not source.is_query:
        where = spec.location_of(source) if source.is_url else spec.path_of(source)
        return read_table(where, INPUTS[kind], source.columns, source.format, source.storage_options)
    assert source.sql is not None and source.connection is not None
    return read_query(
        source.connection,
        source.sql,
        INPUTS[kind],
        source.params,
        source.columns,
        password=resolve_password(source, f"{kind} source"),
        base_dir=spec.base_dir,
    )
