"""The Python front door: what a notebook user calls (``import crowdflow as cf`` re-exports it).

- :mod:`~crowdflow.frontdoor.api`: one call per job and completed runs (``cf.skills(df)``, ``cf.read_run``);
- :mod:`~crowdflow.frontdoor.estimators`: Crowd-Kit–style estimators (change one import, keep your code);

Each job's own door (``crowdflow.skills.door`` …) is written over :mod:`crowdflow.storage.frames` and
:func:`crowdflow.checks.check_modes`, which import no job, so this package may import every job.
"""
