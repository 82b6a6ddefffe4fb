"""How a deployment's flow run ends when the operator's setup is wrong: ``Failed``, with one line that says what to fix.

Two places decide it, both for runs a worker or ``crowdflow serve`` starts (the command line has its own rule, exit 2,
in :func:`flows.cli.main`, from the same :func:`crowdflow.contracts.errors.user_error`):

- :func:`enter_project`, the deployments' pull step (``deployments/prefect.yaml``): the project folder named by the
  Prefect Variable ``crowdflow_project_dir`` must exist on the worker and hold the entry point. A pull step runs before
  the flow is loaded, so a failure there would end the run ``Crashed`` with the reason only in the worker's log
  (Prefect's own ``set_working_directory``). This step marks the run ``Failed`` with the reason first; the worker's
  later ``Crashed`` proposal is then refused by the server (a terminal run stays terminal).
- :func:`failed_state`, used by the entry flows (:mod:`flows.deploy`): an expected failure
  (:func:`~crowdflow.contracts.errors.user_error` is not ``None``: a missing extra, environment variable or Secret
  block, an unreachable Dask scheduler or warehouse, bad input) ends the run ``Failed`` with the error's message on
  one line (``<Error class>: <what is wrong and what to do>``), the state message the UI and
  ``prefect flow-run inspect`` show. Anything else is a bug and is left to Prefect (``Failed`` with the traceback).
"""

from __future__ import annotations

import logging
import os
import re
import socket
from pathlib import Path
from typing import Any
from uuid import UUID

from crowdflow.contracts.errors import user_error

log = logging.getLogger(__name__)

PROJECT_VARIABLE = "crowdflow_project_dir"
ENTRY_POINT = Path("flows") / "deploy.py"  # what a deployment's worker loads from the project folder
MAX_MESSAGE = 600  # characters of a state message: the UI shows it in one line


def one_line(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` as one line: runs of whitespace (newlines included) become one space, cut at ``limit`` with ``…``."""
    flat = re.sub(r"\s+", " ", text).strip()
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def failed_state(exc: BaseException) -> Any:
    """The ``Failed`` state an entry flow returns for an expected failure; re-raises ``exc`` when it is a bug.

    Parameters
    ----------
    exc : BaseException
        What the pipeline raised.

    Returns
    -------
    prefect.states.State
        ``Failed`` with message ``"<class>: <message on one line>"`` and ``exc`` as its data (calling the flow as a
        function raises it again; the traceback is in the run's log).
    """
    from prefect.states import Failed

    err = user_error(exc)
    if err is None:
        raise exc
    return Failed(message=one_line(f"{type(err).__name__}: {err}"), data=err)


def _fail_this_run(message: str) -> None:
    """Mark the flow run this process was started for (``PREFECT__FLOW_RUN_ID``) ``Failed`` with ``message``."""
    run_id = os.environ.get("PREFECT__FLOW_RUN_ID")
    if not run_id:
        return  # not started by a worker or runner: the raised error is all there is
    from prefect.client.orchestration import get_client
    from prefect.states import Failed

    try:
        with get_client(sync_client=True) as client:
            client.set_flow_run_state(UUID(run_id), Failed(message=message), force=True)
    except Exception:  # the API is down: the run ends Crashed, the worker's log has the message below
        log.exception("could not mark flow run %s Failed", run_id)


def enter_project(directory: str) -> dict[str, str]:
    """Pull step: move the flow run into the project folder, or end the run ``Failed`` saying what to fix.

    Parameters
    ----------
    directory : str
        The project folder on the worker (``{{ prefect.variables.crowdflow_project_dir }}``). Empty (the Variable is
        not set) or relative: taken from the folder the worker started in, as Prefect's ``set_working_directory``.

    Returns
    -------
    dict
        ``{"directory": <the absolute project folder>}`` (what Prefect's step returns).

    Raises
    ------
    crowdflow.contracts.errors.SpecError
        The folder does not exist, is not a folder, or does not hold ``flows/deploy.py``; the run is marked
        ``Failed`` with the same message first.
    """
    from prefect.deployments.steps.pull import set_working_directory

    from crowdflow.contracts.errors import SpecError

    host = socket.gethostname()
    unset = not directory.strip()
    named = (
        f"the Prefect Variable {PROJECT_VARIABLE} is not set (the worker's own folder was used)"
        if unset
        else f"{PROJECT_VARIABLE} = {directory!r}"
    )
    fix = (
        f"set it to the project's folder on the worker's machine (prefect variable set {PROJECT_VARIABLE} "
        "/path/to/crowdflow), or check the project out there and install it with pip install '.[deploy]'"
    )
    try:
        result: dict[str, str] = set_working_directory(directory)
    except OSError as exc:
        message = f"project folder not found on worker host {host}: {named} ({exc.strerror or exc}); {fix}"
    else:
        here = Path(result["directory"])
        if (here / ENTRY_POINT).is_file():
            return result
        message = f"{here} on worker host {host} is not a crowdflow project folder (no {ENTRY_POINT}): {named}; {fix}"
    message = one_line(message)
    _fail_this_run(f"SpecError: {message}")
    raise SpecError(message)
