"""DJAM on a partitioned agent graph: blocks as independent work items (docs/methods/personal_models.md §6.3).

:func:`partition_agents` cuts a breadth-first order into blocks. One sweep of :func:`djam_blocked` runs
every block's internal edges as DJAM rounds (one :class:`BlockTask` per block, through any executor:
in process, a thread pool, Dask), then activates every cut edge once. Every round is an ordinary DJAM
round and every edge is activated each sweep, so a sweep is an epoch and the result does not depend
on the executor (docs/methods/personal_models.md §6.3).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.sparse.csgraph import breadth_first_order

from crowdflow.personal_models.djam import DjamState, batched_rounds, serial_rounds
from crowdflow.personal_models.graph import AgentGraph
from crowdflow.personal_models.helpers import ragged
from crowdflow.personal_models.problem import PersonalProblem
from crowdflow.personal_models.result import PersonalModelsResult, certificate, make_result, trace_row
from crowdflow.personal_models.schedule import Engine
from crowdflow.progress import IterationProgress, ProgressFn


def partition_agents(graph: AgentGraph, n_blocks: int) -> np.ndarray:
    """Split the agents into ``n_blocks`` contiguous pieces of a BFS order (block id per agent).

    Each connected component is ordered breadth-first from a pseudo-peripheral agent (the farthest
    agent of a first BFS), components are concatenated, and the order is cut into equal-size chunks,
    so blocks are connected-ish and the cut stays small on geometric graphs.
    """
    n = graph.n
    n_blocks = max(1, min(int(n_blocks), n))
    W = graph.weights()
    seen = np.zeros(n, dtype=bool)
    order: list[np.ndarray] = []
    for start in range(n):
        if seen[start]:
            continue
        first = breadth_first_order(W, start, directed=False, return_predecessors=False)
        far = int(first[-1])
        bfs = breadth_first_order(W, far, directed=False, return_predecessors=False)
        seen[bfs] = True
        order.append(bfs)
    full = np.concatenate(order)
    block = np.empty(n, dtype=np.int64)
    block[full] = (np.arange(n) * n_blocks) // n
    return block


@dataclass(frozen=True)
class BlockTask:
    """One work item of :func:`djam_blocked`: DJAM rounds on the edges internal to one block.

    Only the block's own state travels: the copies held by its agents (``C``, arcs in local numbering),
    their sums ``b`` and readouts ``th``. Copies of outside neighbours are read through ``b`` and are
    not changed by internal rounds, so blocks are independent and may run in any order or in parallel.
    """

    solver: Any
    agents: np.ndarray  # global ids of the block's agents
    li: np.ndarray  # local endpoint ids of the rounds, in order
    lj: np.ndarray
    aij: np.ndarray  # local arc ids
    aji: np.ndarray
    w: np.ndarray
    C: np.ndarray  # (A_b, p)
    b: np.ndarray  # (n_b, p)
    th: np.ndarray  # (n_b, p)
    engine: Engine = "matching"  # "simulation": the same rounds one at a time


def run_block(task: BlockTask) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Execute a :class:`BlockTask` (pure: returns new ``C, b, th``; picklable for process/Dask executors)."""
    C, b, th = task.C.copy(), task.b.copy(), task.th.copy()
    ga, gb = task.agents[task.li], task.agents[task.lj]
    rounds = batched_rounds if task.engine == "matching" else serial_rounds
    rounds(task.solver, C, b, th, task.li, task.lj, task.aij, task.aji, task.w, ga, gb)
    return C, b, th


def block_arcs(g: AgentGraph, agents: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The arcs held by ``agents`` and the maps from global arc and agent ids to the block's local numbering.

    Returns ``arcs`` (global arc ids, in the agents' order), ``local_arc`` (global arc → position in ``arcs``, −1
    outside) and ``local_agent`` (global agent → position in ``agents``, −1 outside).
    """
    _seg, arcs = ragged(g.ptr, agents)
    local_arc = np.full(g.nbr.size, -1, dtype=np.int64)
    local_arc[arcs] = np.arange(arcs.size)
    local_agent = np.full(g.n, -1, dtype=np.int64)
    local_agent[agents] = np.arange(agents.size)
    return arcs, local_arc, local_agent


def sweep_budget(g: AgentGraph, per_sweep: int, max_rounds: int | None) -> tuple[int, int]:
    """The round budget (default 500·|E|, as :func:`djam`) and the whole sweeps of ``per_sweep`` rounds it allows."""
    budget = 500 * max(g.n_edges, 1) if max_rounds is None else int(max_rounds)
    return budget, budget // max(per_sweep, 1)


def warn_unconverged(sweeps: int, per_sweep: int, max_rounds: int, tol: float, bound: float) -> None:
    """The ``RuntimeWarning`` of a blocked run whose round budget ran out before the certificate reached ``tol``."""
    warnings.warn(
        f"blocked DJAM stopped after {sweeps} sweeps of {per_sweep} rounds (max_rounds = {max_rounds}) "
        f"without certifying tol = {tol:g} (bound {bound:.3g})",
        RuntimeWarning,
        stacklevel=3,
    )


def _executor_map(executor: Any, fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
    if executor is None:
        return [fn(it) for it in items]
    if hasattr(executor, "map"):
        return list(executor.map(fn, items))
    if callable(executor):
        return list(executor(fn, items))
    raise ValueError("executor must be None, have a .map(fn, items) method, or be a callable (fn, items) -> results")


def djam_blocked(
    problem: PersonalProblem,
    *,
    n_blocks: int = 4,
    partition: np.ndarray | None = None,
    executor: Any = None,
    seed: int = 0,
    tol: float = 1e-8,
    max_rounds: int | None = None,
    inner_sweeps: int = 1,
    engine: Engine = "matching",
    init: str | np.ndarray = "zeros",
    reference: np.ndarray | None = None,
    inner_tol: float = 1e-12,
    progress: ProgressFn | None = None,
) -> PersonalModelsResult:
    """DJAM on a partitioned agent graph: block work items through a pluggable executor.

    One sweep =
      1. every block runs ``inner_sweeps`` random permutations of its internal edges as DJAM rounds
         (:func:`run_block`, one work item per block, dispatched with ``executor``);
      2. the coordinator activates every cut edge once, in random order (the exchange of boundary
         copies: each such round swaps the two endpoints' readouts across the cut);
      3. the certified rule of docs/methods/personal_models.md §2.6 is checked on the readouts.
    Every round is an ordinary DJAM round and every edge is activated in each sweep, so a sweep is an
    epoch and V contracts by β per sweep (docs/methods/personal_models.md §2.3, §3.1). Internal rounds of
    different blocks touch disjoint state, so the result does not depend on the executor.

    Parameters
    ----------
    problem : PersonalProblem
    n_blocks : int
        Number of blocks for :func:`partition_agents` (ignored when ``partition`` is given).
    partition : array (n,), optional
        Block id per agent.
    executor : None, ``concurrent.futures.Executor``-like, or callable
        ``None`` runs the items sequentially; an object with ``.map(fn, items)`` (e.g.
        ``ThreadPoolExecutor``, a Dask ``Client`` wrapper) or a callable ``executor(fn, items) -> results``.
    seed : int
    tol : float
        Certified relative accuracy, as :func:`djam`.
    max_rounds : int, optional
        Round budget (default 500·|E|, as :func:`djam`): the run makes as many whole sweeps as fit in it
        and stops with ``converged=False`` and a ``RuntimeWarning`` if they do not certify ``tol``.
    inner_sweeps : int
        Passes over the internal edges per work item and sweep.
    engine : {"matching", "simulation"}
        How a work item (and the cut pass) applies its rounds: in vertex-disjoint batches
        (:func:`matching_batches`; same result, much faster on large blocks) or one by one.
    init, reference, inner_tol
        As :func:`djam`.

    Returns
    -------
    PersonalModelsResult
        ``method="djam_blocked"``; ``iterations`` = total rounds; ``metadata["sweeps"]``.
    """
    t0 = time.perf_counter()
    if engine not in ("simulation", "matching"):
        raise ValueError(f"unknown engine '{engine}' (simulation | matching)")
    g = problem.graph
    n, _p = problem.n, problem.p
    block = partition_agents(g, n_blocks) if partition is None else np.asarray(partition, dtype=np.int64)
    if block.shape != (n,):
        raise ValueError(f"partition must have one block id per agent ({n})")
    blocks = np.unique(block)
    state = DjamState(problem, 1, init, inner_tol)
    C, b, th = state.C[0], state.b[0], state.th[0]
    solver = state.solver
    internal = block[g.u] == block[g.v]
    cut = np.flatnonzero(~internal)
    specs = []
    for k in blocks:
        ag = np.flatnonzero(block == k)
        arcs, local_arc, local_agent = block_arcs(g, ag)
        edges = np.flatnonzero(internal & (block[g.u] == k))
        specs.append((ag, arcs, local_arc, local_agent, edges))
    per_sweep = inner_sweeps * int(np.count_nonzero(internal)) + int(cut.size)
    max_rounds, max_sweeps = sweep_budget(g, per_sweep, max_rounds)
    rng = np.random.default_rng(seed)
    trace = [trace_row(problem, 0, th, C, reference)]
    converged = False
    rounds = 0
    sweeps = 0
    kn, bound, _ = certificate(problem, th)  # noqa: RUF059
    converged = bound <= tol * max(1.0, float(np.linalg.norm(th)))
    tracker = IterationProgress(progress, max_sweeps, tol)
    while not converged and sweeps < max_sweeps:
        sweeps += 1
        tasks = []
        for ag, arcs, local_arc, local_agent, edges in specs:
            seq = np.concatenate([rng.permutation(edges) for _ in range(inner_sweeps)]) if edges.size else edges
            tasks.append(
                BlockTask(
                    solver=solver,
                    agents=ag,
                    li=local_agent[g.u[seq]],
                    lj=local_agent[g.v[seq]],
                    aij=local_arc[g.a_uv[seq]],
                    aji=local_arc[g.a_vu[seq]],
                    w=g.w[seq],
                    C=C[arcs],
                    b=b[ag],
                    th=th[ag],
                    engine=engine,
                )
            )
            rounds += seq.size
        results = _executor_map(executor, run_block, tasks)
        for (ag, arcs, *_), (Cb, bb, thb) in zip(specs, results, strict=True):
            C[arcs], b[ag], th[ag] = Cb, bb, thb
        if cut.size:
            seq = rng.permutation(cut)
            state.run(seq[None], engine)
            rounds += seq.size
        state.refresh()
        C, b, th = state.C[0], state.b[0], state.th[0]
        trace.append(trace_row(problem, rounds, th, C, reference))
        _kn, bound, _ = certificate(problem, th)
        scale = max(1.0, float(np.linalg.norm(th)))
        tracker.update(sweeps, bound / scale)
        converged = bound <= tol * scale
    tracker.done()
    if not converged:
        warn_unconverged(sweeps, per_sweep, max_rounds, tol, bound)
    return make_result(
        problem,
        th.copy(),
        "djam_blocked",
        rounds,
        converged,
        trace,
        {
            "seed": seed,
            "tol": tol,
            "sweeps": sweeps,
            "n_blocks": int(blocks.size),
            "cut_edges": int(cut.size),
            "engine": engine,
            "wall_time_s": time.perf_counter() - t0,
        },
        copies=C.copy(),
    )
