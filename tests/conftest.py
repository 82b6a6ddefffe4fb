"""Test configuration: Prefect state goes to a temporary PREFECT_HOME, telemetry off.

The environment is set before anything imports Prefect. Tests that run real flows request the
session-scoped ``prefect_harness`` fixture (one temporary API server per session, ~15-35 s to start);
library tests never pay for it.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# Multi-threaded BLAS is 10-100x slower when the 2 cores are contended (dense eigvalsh in diagnostics).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
_HOME = tempfile.mkdtemp(prefix="crowdflow-prefect-home-")
os.environ["PREFECT_HOME"] = _HOME
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ.pop("PREFECT_API_URL", None)
# A run report that fails to render fails the run in tests (in production it is logged and skipped).
os.environ.setdefault("CROWDFLOW_REPORT_STRICT", "1")

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402
from prefect.logging.configuration import setup_logging  # noqa: E402

# Property tests are reproducible by default (CI): a fixed example sequence, no example database, no
# per-example deadline (the 2 cores are shared). HYPOTHESIS_PROFILE=explore runs more, random examples.
settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=30,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("explore", deadline=None, max_examples=500, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Configure Prefect's console handlers now, bound to the session's streams; otherwise the first flow
# run inside a test that uses capsys binds them to that test's stream, which is closed afterwards.
setup_logging()

DATA = Path(__file__).resolve().parents[1] / "crowdflow" / "data"


@pytest.fixture(scope="session")
def prefect_harness() -> Iterator[None]:
    """A temporary Prefect API for flow tests (the default 30 s start-up timeout is too tight on 2 cores)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=180):
        yield
        # pytest has closed the captured streams by now; don't print logging's own tracebacks
        # for Prefect's "Stopping temporary server" line
        logging.raiseExceptions = False


@pytest.fixture(scope="session")
def rte_dir() -> Path:
    return DATA / "snow_rte"


@pytest.fixture
def dask_spy(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Wrap ``tasks.fit.dask_executor`` (the real cluster still runs) and record how many items each
    ``map`` sent to Dask: tests of the Dask path assert that it was taken, not only that the outputs
    equal the in-process ones (which they would if the Dask branch were skipped)."""
    import contextlib

    import tasks.fit

    real = tasks.fit.dask_executor
    mapped: list[int] = []

    @contextlib.contextmanager
    def spy(*args: Any, **kwargs: Any) -> Iterator[Any]:
        with real(*args, **kwargs) as run_map:

            def counted(fn: Any, items: Any) -> Any:
                items = list(items)
                mapped.append(len(items))
                return run_map(fn, items)

            yield counted

    monkeypatch.setattr(tasks.fit, "dask_executor", spy)
    return mapped


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    shutil.rmtree(_HOME, ignore_errors=True)


def _file_seconds() -> dict[str, float]:
    """``tests/file_durations.json`` (see ``tests/file_durations.py``): summed seconds per test file."""
    import json

    table = Path(__file__).with_name("file_durations.json")
    return json.loads(table.read_text()) if table.exists() else {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order the test files longest first (stable within a file), so that the two xdist workers end together.

    Every worker collects and sorts the same way, so the controller sees one order; with ``--dist loadfile``
    and ``--no-loadscope-reorder`` (pyproject addopts) it hands out whole files in this order, each to the
    first free worker. Files not in the table count as the median file.
    """
    seconds = _file_seconds()
    if not seconds:
        return
    median = sorted(seconds.values())[len(seconds) // 2]
    order = {id(item): i for i, item in enumerate(items)}
    items.sort(key=lambda item: (-seconds.get(item.nodeid.split("::", 1)[0], median), order[id(item)]))
