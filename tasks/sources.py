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
from crowdflow.spec import Credentials, PipelineBase, SourceSpec
from crowdflow.storage.io import LoadedTable, read_query, read_table
from crowdflow.storage.warehouse import password_from_env


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
        from prefect.blocks.system import Secret

        try:
            # _sync=True: the synchronous path of Prefect's sync/async dual API (stubs only know the async one)
            block = cast(Secret[Any], Secret.load(creds.password_secret, _sync=True))  # type: ignore[call-arg]
        except ValueError:
            raise SpecError(
                f"{what}: Prefect Secret block '{creds.password_secret}' (password_secret) not found"
            ) from None
        return str(block.get())
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
