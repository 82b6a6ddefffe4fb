"""Entry-point flows for deployments (``deployments/prefect.yaml``, ``crowdflow serve``).

Two flows, both running the job's steps (tasks, artifacts, logs) inside their own flow run, so the run page
a deployment links to is the pipeline run:

- :func:`run_pipeline` takes the whole spec as a typed parameter (``spec: PipelineSpec``), so a
  deployment's run form in the Prefect UI is generated from the pydantic models (job, inputs, options,
  checks, runner, output), and a scheduled run carries its full configuration in the deployment;
- :func:`run_spec_file` takes the path of a YAML spec (``spec_path: str``), read when the run starts,
  for specs kept next to the data and edited without redeploying.

Relative paths inside a spec resolve against its ``base_dir`` (for ``run_pipeline``) or the spec
file's folder (for ``run_spec_file``); a relative ``base_dir`` is taken from the flow run's working
directory: for the deployments of ``deployments/prefect.yaml`` the project folder their pull step moves into
(the Prefect Variable ``crowdflow_project_dir``, read by the worker when the run starts), for ``crowdflow serve``
the folder it was started in. Paths are normalised (:meth:`crowdflow.spec.PipelineBase.path_of`).

An expected failure (bad input or spec, a missing extra, variable or Secret block, an unreachable scheduler or
warehouse) ends the flow run ``Failed`` with a one-line state message saying what to fix (:mod:`flows.operator`).
"""

# No ``from __future__ import annotations`` here: a worker loads this file by path (the deployment's
# entrypoint), and Prefect builds the parameter model from the annotations, which must be real types.
from pathlib import Path
from typing import Any

from prefect import flow

from crowdflow.spec import PipelineSpec, load_spec
from flows.operator import failed_state
from flows.pipeline import run_spec


@flow(name="crowdflow-pipeline", log_prints=True)
def run_pipeline(spec: PipelineSpec, run_id: str = "") -> dict[str, Any]:
    """Run one crowdflow pipeline spec (any job) and return its summary.

    Parameters
    ----------
    spec : PipelineSpec
        The pipeline: job, inputs, options, checks, runner and output folder.
    run_id : str, optional
        Empty (the default) names the run ``<UTC timestamp>-<flow run id>``.

    Returns
    -------
    dict
        ``run_id``, ``run_dir`` and ``metrics`` of the completed run.
    """
    try:
        return run_spec(spec, run_id or None, in_this_flow=True)
    except Exception as exc:  # an expected failure ends the run Failed with one line; a bug is re-raised
        return failed_state(exc)  # type: ignore[no-any-return]


@flow(name="crowdflow-spec-file", log_prints=True)
def run_spec_file(spec_path: str, out: str | None = None) -> dict[str, Any]:
    """Read a YAML pipeline spec when the run starts and run it.

    Parameters
    ----------
    spec_path : str
        Path of the spec (relative to the flow run's working directory, or absolute).
    out : str, optional
        Output folder overriding the spec's ``output.dir`` (relative to the working directory).
    """
    try:
        spec = load_spec(spec_path)
        if out:
            out_dir = str(Path(out).resolve())
            spec = spec.model_copy(update={"output": spec.output.model_copy(update={"dir": out_dir})})
        return run_spec(spec, in_this_flow=True)
    except Exception as exc:  # as run_pipeline
        return failed_state(exc)  # type: ignore[no-any-return]
