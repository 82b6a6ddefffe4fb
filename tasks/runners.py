"""Executors that fan a library's independent work items out to a real engine (Dask).

The library's blocked algorithms accept any ``executor(fn, items) -> results`` callable; this module
provides one backed by ``dask.distributed`` — an existing cluster (``address``) or a local one that is
started for the call and torn down after it. Dask is an optional dependency (``pip install .[dask]``, also in
``.[deploy]``).

An existing cluster is never waited for silently: the scheduler must answer and have at least one worker
within ``worker_timeout`` seconds, else :class:`~crowdflow.contracts.errors.RunnerError` (exit 2) names the address and
what is missing. A scratch folder for partition files is created when it does not exist yet.
"""

from __future__ import annotations

import logging
import os
import queue
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from crowdflow.contracts.errors import RunnerError, SpecError
from crowdflow.storage.scratch import owned_scratch, sweep
from crowdflow.storage.secrets import redact

MapFn = Callable[[Callable[[Any], Any], list[Any]], list[Any]]

log = logging.getLogger(__name__)


@contextmanager
def run_scratch(scratch_root: str | None) -> Iterator[str]:
    """The run's own scratch folder (``crowdflow-run-*``), after removing what dead runs left beside it."""
    removed = sweep(scratch_root) if scratch_root is not None else []
    removed += sweep(None)
    if removed:
        log.warning("removed %d scratch folder(s) left by killed runs: %s", len(removed), removed)
    with owned_scratch("crowdflow-run-", scratch_root) as folder:
        yield folder


def scratch_folder(path: str | None) -> str | None:
    """``runner.scratch_dir`` as an absolute folder that exists (created with its parents), or None.

    Raises :class:`~crowdflow.contracts.errors.SpecError` naming the folder when it cannot be created (a file stands
    there, no permission).
    """
    if path is None:
        return None
    folder = Path(os.path.abspath(Path(path).expanduser()))
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError(f"runner.scratch_dir {folder}: cannot create the folder: {exc.strerror or exc}") from None
    return str(folder)


def connect(address: str, worker_timeout: float) -> Any:
    """A ``distributed.Client`` of the cluster at ``address`` that has at least one worker.

    Raises
    ------
    RunnerError
        The scheduler did not answer, or had no worker, within ``worker_timeout`` seconds.
    """
    from distributed import Client

    shown = redact(address)
    t0 = time.monotonic()
    try:
        client = Client(address, timeout=worker_timeout)
    except (OSError, TimeoutError) as exc:
        raise RunnerError(
            f"runner.address {shown}: no Dask scheduler answered within {worker_timeout:g} s "
            f"(runner.worker_timeout): {exc}; start the scheduler (dask scheduler) or fix runner.address "
            "(empty starts a local cluster)"
        ) from None
    left = max(worker_timeout - (time.monotonic() - t0), 0.1)
    try:
        client.wait_for_workers(1, timeout=left)
    except TimeoutError:
        client.close()
        raise RunnerError(
            f"runner.address {shown}: the Dask scheduler has no worker after {worker_timeout:g} s "
            f"(runner.worker_timeout); start workers (dask worker {shown}) or raise runner.worker_timeout"
        ) from None
    n = len(client.scheduler_info().get("workers", {}))
    log.info("Dask cluster %s: %d worker(s) after %.1f s", shown, n, time.monotonic() - t0)
    return client


def _same(value: Any) -> Any:
    """The value itself (a task that copies a held item to the worker it is pinned to)."""
    return value


class _Sender:
    """The stand-in for the caller's progress callback in :meth:`DaskMap.elsewhere`'s task: each report an event
    of the call's topic (``Worker.log_event``: a message queued on the worker's batched stream to the scheduler,
    which passes it to the subscribed client; the task does not wait for it)."""

    def __init__(self, worker: Any, topic: str) -> None:
        self.worker = worker
        self.topic = topic

    def __call__(self, fraction: float) -> None:
        self.worker.log_event(self.topic, {"fraction": float(fraction)})

    def note(self, line: str) -> None:
        self.worker.log_event(self.topic, {"line": str(line)})

    def end(self) -> None:
        self.worker.log_event(self.topic, {"end": True})


def _drive(job: Callable[[Any, list[Any], Any, Any], Any], keys: list[Any], arg: Any, topic: str | None) -> Any:
    """:meth:`DaskMap.elsewhere`'s task: ``job`` with a :class:`DaskMap` of this worker's client (its thread seceded
    from the worker's pool while ``job`` waits on the passes, so they run on every worker thread, this one's too),
    the held items as futures of that client (the caller's futures keep them in memory) and, with a ``topic``, a
    :class:`_Sender` of its progress reports (its last event, sent also when ``job`` fails, says it has ended)."""
    from distributed import Future, get_worker, worker_client

    sender = _Sender(get_worker(), topic) if topic is not None else None
    try:
        with worker_client() as client:
            held = [Future(k, client) for k in keys]
            try:
                return job(DaskMap(client), held, arg, sender)
            finally:
                del held
    finally:
        if sender is not None:
            sender.end()


def _relay(future: Any, events: queue.SimpleQueue[Any], progress: Any, poll: float = 0.2, grace: float = 5.0) -> None:
    """Call ``progress`` with the reports of :meth:`DaskMap.elsewhere`'s task (events ``(time, message)`` put on
    ``events`` by the client's topic handler) in this thread, until the task's end event, or ``grace`` seconds
    after the task finished without it (a worker that died)."""
    from crowdflow.progress import note

    deadline = None
    while True:
        if deadline is None and future.done():
            deadline = time.monotonic() + grace
        if deadline is not None and time.monotonic() > deadline:
            return
        try:
            _, msg = events.get(timeout=poll)
        except queue.Empty:
            continue
        if "end" in msg:
            return
        if "fraction" in msg:
            progress(msg["fraction"])
        if "line" in msg:
            note(progress, msg["line"])


class DaskMap:
    """``map(fn, items)`` on a Dask client (results in input order), ``fold`` taking them as they complete, and
    ``hold`` keeping encoded items in the workers' memory across passes (persisted futures;
    :func:`crowdflow.executors.hold`)."""

    def __init__(self, client: Any) -> None:
        self.client = client

    @property
    def n_workers(self) -> int:
        """The cluster's worker threads now (at least 1)."""
        info = self.client.scheduler_info().get("workers", {})
        return max(sum(int(w.get("nthreads", 1)) for w in info.values()), 1)

    def hold(self, fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        """``fn(item)`` on the workers, kept there: the futures, each pass's task then runs where its item lives.

        An error of any item is raised here (the first in item order), after every item has finished.
        """
        from distributed import wait

        futures = self.client.map(fn, items, pure=False)
        wait(futures)
        for f in futures:
            if f.status == "error":
                try:
                    f.result()  # raises the item's exception
                finally:
                    self.release(futures)
        return list(futures)

    def groups(self, handles: list[Any]) -> list[list[int]]:
        """Positions of the held items grouped by the worker that holds them (its first holder when replicated):
        a task over one group then runs where all its items are (:func:`crowdflow.executors.held_groups`)."""
        where = self.client.who_has(handles)
        by: dict[str, list[int]] = {}
        for i, h in enumerate(handles):
            holders = sorted(where.get(h.key) or ())
            by.setdefault(holders[0] if holders else "", []).append(i)
        return list(by.values())

    def balance(self, handles: list[Any], sizes: list[int]) -> list[Any]:
        """The held items moved between workers so that each holds about the same total ``sizes``
        (:func:`crowdflow.executors.balance_moves`): each moved item copied once to its new worker (a task pinned
        there that returns it), the old future released. Returns the handles in the same order."""
        from distributed import wait

        from crowdflow.executors import balance_moves

        where = self.client.who_has(handles)
        holders = [min(where.get(h.key) or ("",)) for h in handles]
        places = sorted(self.client.scheduler_info().get("workers", {}))
        if "" in holders or len(places) < 2:
            return list(handles)
        moves = balance_moves(holders, sizes, places)
        out = list(handles)
        for i, place in moves:
            out[i] = self.client.submit(_same, handles[i], workers=[place], allow_other_workers=False, pure=False)
        wait([out[i] for i, _ in moves])
        self.release([handles[i] for i, _ in moves])
        if moves:
            log.info("moved %d of %d held items to even out the workers (%s)", len(moves), len(handles), sizes)
        return out

    def elsewhere(
        self,
        job: Callable[[Any, list[Any], Any, Any], Any],
        handles: list[Any],
        arg: Any,
        progress: Callable[[float], None] | None = None,
    ) -> Any:
        """``job(executor, handles, arg, progress)`` as one task on a worker (:func:`crowdflow.executors.elsewhere`):
        ``arg`` scattered once, the held items passed by key (a future in a task's arguments would be replaced by
        its value), the result gathered here; what ``job`` allocates lives and dies in that worker's process.

        With ``progress``, the task's reports come back as events of a topic of this call (``Worker.log_event`` on
        the worker, ``Client.subscribe_topic`` here, subscribed before the task is submitted): the handler queues
        them, and this thread calls ``progress`` (and its ``note``) with them while it waits (:func:`_relay`), so
        a Prefect callback runs in its task run's context. The scheduler keeps each topic's last events in its event
        log (at most ``distributed.admin.low-level-log-length``, 1,000): a partitioned EM leaves one fraction per
        1 % and one line per pass there, a few hundred bytes each."""
        shared = self.share(arg)
        topic = f"crowdflow-progress-{uuid.uuid4().hex}" if progress is not None else None
        events: queue.SimpleQueue[Any] = queue.SimpleQueue()
        if topic is not None:
            self.client.subscribe_topic(topic, events.put)
        try:
            future = self.client.submit(_drive, job, [h.key for h in handles], shared, topic, pure=False)
            try:
                if progress is not None:
                    _relay(future, events, progress)
                return future.result()
            finally:
                future.release()
        finally:
            if topic is not None:
                self.client.unsubscribe_topic(topic)
            self.release([shared])

    def release(self, handles: list[Any]) -> None:
        """Free the held items on the workers."""
        for f in handles:
            f.release()

    def __call__(self, fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        return list(self.client.gather(self.client.map(fn, items, pure=False)))

    def share(self, value: Any) -> Any:
        """``value`` sent once, straight to one worker (``scatter``; the scheduler keeps its key and location, not
        a copy in a task's arguments), fetched once by each worker whose tasks read it; free it by :meth:`release`."""
        return self.client.scatter([value], direct=True, hash=False)[0]

    def fold(
        self,
        fn: Callable[[Any], Any],
        items: list[Any],
        combine: Callable[[Any, Any], Any],
        acc: Any,
        *,
        ordered: bool = False,
    ) -> Any:
        """``combine(acc, fn(item))`` as the results complete, each released once combined; ``ordered`` combines in
        the items' order (a completed result waits for those before it), for floating-point sums with fixed bits.

        At most :meth:`window` items are submitted and not yet combined, so this process holds at most that many
        results (each a bucket's W·M² sums, say) whatever the number of items: O(tasks in flight), not O(items)
        (docs/scale.md, memory laws).
        """
        from distributed import as_completed

        todo = iter(enumerate(items))
        window = self.window()
        position: dict[Any, int] = {}
        running = as_completed()

        def submit() -> bool:
            nxt = next(todo, None)
            if nxt is None:
                return False
            future = self.client.submit(fn, nxt[1], pure=False)
            position[future.key] = nxt[0]
            running.add(future)
            return True

        outstanding = 0
        while outstanding < window and submit():
            outstanding += 1
        waiting: dict[int, Any] = {}
        upto = 0
        for future in running:
            result = future.result()
            future.release()
            k = position.pop(future.key)
            if not ordered:
                acc = combine(acc, result)
                outstanding -= 1
            else:
                waiting[k] = result
                while upto in waiting:
                    acc = combine(acc, waiting.pop(upto))
                    upto += 1
                    outstanding -= 1
            while outstanding < window and submit():
                outstanding += 1
        return acc

    def window(self) -> int:
        """Items of a :meth:`fold` submitted and not yet combined: two per worker thread, at least 4."""
        return max(2 * self.n_workers, 4)


def runner_executor(runner: Any) -> Any:
    """:func:`dask_executor` with the settings of a spec's ``runner`` (a context manager)."""
    return dask_executor(
        runner.address, runner.n_workers, runner.processes, runner.worker_timeout, getattr(runner, "memory_limit", None)
    )


@contextmanager
def dask_executor(
    address: str | None = None,
    n_workers: int = 2,
    processes: bool = True,
    worker_timeout: float = 60.0,
    memory_limit: str | None = None,
) -> Iterator[MapFn]:
    """Yield a :class:`DaskMap`: ``map(fn, items)``, each item a Dask task (results in input order), and ``fold``.

    Parameters
    ----------
    address : str, optional
        Scheduler address of an existing cluster; a ``LocalCluster`` of ``n_workers`` single-threaded
        processes (dashboard on a random port, scratch in a temporary folder) when omitted.
    n_workers : int
        Workers of the local cluster.
    processes : bool
        Local cluster of worker processes (default) or of threads in this process (cheap to start;
        the GIL limits the gain to code that releases it, e.g. sparse products and Parquet I/O).
    worker_timeout : float
        Seconds the cluster at ``address`` has to answer with at least one worker (:func:`connect`).
    memory_limit : str, optional
        Memory per worker of the local cluster (``"4GB"``); Dask's default (the machine's memory shared by the
        workers) when omitted.
    """
    try:
        from distributed import Client, LocalCluster
    except ImportError:  # pragma: no cover - depends on the install
        raise SpecError(
            "runner.kind dask needs dask.distributed, which is not installed here: "
            "pip install 'crowdflow[deploy]' (or 'crowdflow[dask]')"
        ) from None

    for name in ("distributed", "distributed.scheduler", "distributed.nanny", "distributed.core"):
        logging.getLogger(name).setLevel(logging.WARNING)  # the cluster's start and stop are not the run's news
    cluster = None
    sweep(None)  # what killed runs left in the temp folder
    with owned_scratch("crowdflow-dask-") as scratch:
        try:
            if address is None:
                cluster = LocalCluster(
                    n_workers=n_workers,
                    threads_per_worker=1,
                    processes=processes,
                    dashboard_address=":0",
                    local_directory=scratch,
                    **({"memory_limit": memory_limit} if memory_limit else {}),
                )
                client = Client(cluster)
            else:
                client = connect(address, worker_timeout)
            try:
                yield DaskMap(client)
            finally:
                client.close()
        finally:
            if cluster is not None:
                cluster.close()
