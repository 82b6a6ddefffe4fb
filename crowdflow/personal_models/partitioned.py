"""Blocked DJAM on an agents dataset read by the workers: the flow holds the graph and the models, never a sample.

The in-memory :func:`~crowdflow.personal_models.blocked.djam_blocked` builds every agent's loss in one process. Here
the ``agents`` table is a set of files (a partitioned input, docs/scale.md) and every pass runs through an executor
(``executor(fn, items)``, a Dask client's map in the pipeline):

1. :func:`summarize_agents` per file: the agent ids and the parameter names. The flow takes the sorted union of
   the ids, checks that every file names the same parameters, builds the agent graph from the ``edges`` table and
   cuts it into blocks (:func:`~crowdflow.personal_models.blocked.partition_agents`).
2. :func:`split_agents` per file: each row goes to its agent's block folder, and the rows of the agents on a cut
   edge also to the ``boundary`` folder. An agent's rows keep their input order.
3. Sweeps. A sweep's work items are the blocks (:func:`run_block_data`): the worker builds its agents' losses
   from its folder (:func:`~crowdflow.personal_models.problem.build_losses`, the same checks as in memory), reads
   out θ̂ = G(b) from the sums ``b`` the flow computed from the copies, returns ∇f_i(θ̂_i) for the certificate and
   then runs the block's internal rounds; the cut edges are one more work item over the boundary agents. The flow
   assembles the copies, recomputes ``b = S C`` and checks the certified rule of docs/methods/personal_models.md
   §2.6 with the gradients sent back.

Every round, every random draw and every read-out is the in-memory sweep's (docs/methods/personal_models.md §6.3),
so the models equal :func:`djam_blocked`'s up to the inner solver's tolerance (exactly for quadratic and Huber
losses). What the flow holds: the graph, the copies (2|E| × p) and the models, sums and gradients (n × p).
"""

from __future__ import annotations

import functools
import logging
import pickle
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from crowdflow.contracts.errors import DegenerateInput, InputError
from crowdflow.executors import MapFn
from crowdflow.personal_models.blocked import block_arcs, partition_agents, sweep_budget, warn_unconverged
from crowdflow.personal_models.djam import batched_rounds, serial_rounds
from crowdflow.personal_models.graph import AgentGraph
from crowdflow.personal_models.helpers import format_ids
from crowdflow.personal_models.problem import (
    _LOSS_ALIASES,
    AgentLosses,
    PersonalProblem,
    _canonical_components,
    _features,
    _validate_edges,
    build_losses,
)
from crowdflow.personal_models.result import PersonalModelsResult, certificate, make_result, trace_row
from crowdflow.personal_models.schedule import Engine
from crowdflow.progress import IterationProgress, ProgressFn

log = logging.getLogger(__name__)

#: Reads one file of the agents dataset in canonical columns (the pipeline's canonical copies).
ReadFn = Callable[[str], pd.DataFrame]
_BOUNDARY = "boundary"


@dataclass(frozen=True)
class AgentsSummary:
    """What :func:`summarize_agents` returns for one file: its agents and the parameter names its rows give.

    ``param_names`` is empty for a file without an observed sample.
    """

    file: str
    agents: np.ndarray
    param_names: tuple[str, ...]
    n_rows: int
    declared: tuple[str, ...] = ()  # a file without observations: the names its columns would give


def _rows(df: pd.DataFrame) -> pd.DataFrame:
    return df.rename(columns={"agent_id": "agent"}) if "agent" not in df.columns and "agent_id" in df else df


def summarize_agents(path: str, *, read: ReadFn, loss: str, feature_cols: list[str] | None) -> AgentsSummary:
    """Pass 1 (a worker): one file's distinct agent ids and parameter names (the rule of :func:`build_losses`)."""
    df = _rows(read(path))
    observed = int(df["y"].notna().sum())
    # a file without an observed sample (agents declared for their prior only) says nothing about the parameters
    names = _features(df, feature_cols, _LOSS_ALIASES.get(loss, loss))[1] if observed else ()
    declared: tuple[str, ...] = ()
    if not observed and len(df):
        try:
            declared = _features(df, feature_cols, _LOSS_ALIASES.get(loss, loss))[1]
        except DegenerateInput:  # an 'x' column without a vector: raised again if no file has one
            declared = ()
    ids = np.sort(pd.unique(df["agent"].astype(str).to_numpy())) if len(df) else np.array([], dtype=object)
    return AgentsSummary(path, ids.astype(object), names, len(df), declared)


def split_agents(
    item: tuple[int, str], *, read: ReadFn, folder: str, agents: np.ndarray, block: np.ndarray, boundary: np.ndarray
) -> int:
    """Pass 2 (a worker): write one file's rows to its agents' block folders (and the boundary folder).

    ``agents`` (sorted ids), ``block`` (block id per agent) and ``boundary`` (a flag per agent) come from the flow.
    The part is named after the file's position, so a block's parts read in name order keep the input order.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    index, path = item
    df = _rows(read(path))
    codes = pd.Index(agents).get_indexer(df["agent"].astype(str).to_numpy())
    where = block[codes]
    for k in np.unique(where):
        sub = df[where == k]
        out = Path(folder) / f"block-{int(k):05d}" / f"part-{index:06d}.parquet"
        out.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pandas(sub, preserve_index=False), out)
    edge = boundary[codes]
    if edge.any():
        out = Path(folder) / _BOUNDARY / f"part-{index:06d}.parquet"
        out.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pandas(df[edge], preserve_index=False), out)
    return len(df)


@dataclass(frozen=True)
class BlockData:
    """Where a work item's samples are and how its losses are built (picklable: it travels to a worker)."""

    folder: str
    agents: np.ndarray  # sorted ids of the agents whose losses the item needs
    loss_args: dict[str, Any]
    shift: np.ndarray  # the agents' weighted degrees w_i (the read-out's shift)
    inner_tol: float = 1e-12


_BUILT = "losses.pickle"


def _block_losses(data: BlockData) -> tuple[AgentLosses, Any]:
    """The item's losses and read-out solver: built from its sample files on the first pass, then kept next to them.

    The built losses (for a quadratic loss n_b·(p² + p + 1) numbers, far less than the samples) are written once
    into the item's own folder, which only this item reads, so later sweeps skip parsing and building; the file is
    written under a temporary name and renamed, so a pass that dies never leaves half a file.
    """
    import pyarrow.parquet as pq

    folder = Path(data.folder)
    cached = folder / _BUILT
    if cached.is_file():
        with cached.open("rb") as fh:
            built: AgentLosses = pickle.load(fh)  # written by this run's first pass, in its own scratch
    else:
        parts = sorted(folder.glob("part-*.parquet"))
        df = pd.concat([pq.read_table(p).to_pandas() for p in parts], ignore_index=True)
        built = build_losses(df, **data.loss_args)
        del df
        tmp = folder / f".{_BUILT}.tmp"
        with tmp.open("wb") as fh:
            pickle.dump(built, fh, protocol=pickle.HIGHEST_PROTOCOL)
        tmp.replace(cached)
    if built.agents.size != data.agents.size or np.any(built.agents != data.agents):  # pragma: no cover - a defect
        raise RuntimeError(f"{data.folder}: the block's rows name other agents than the flow assigned to it")
    return built, built.losses.solver(data.shift, inner_tol=data.inner_tol)


@dataclass(frozen=True)
class BlockWork:
    """One work item of a partitioned sweep: read out θ̂ = G(b) for the block's agents, then its rounds.

    ``refresh`` is False for the cut item, whose read-outs are the blocks' (it only runs rounds). Arrays are in the
    item's local numbering; ``li``/``lj``/``aij``/``aji``/``w`` are the rounds, in order.
    """

    data: BlockData
    C: np.ndarray
    b: np.ndarray
    th: np.ndarray
    li: np.ndarray
    lj: np.ndarray
    aij: np.ndarray
    aji: np.ndarray
    w: np.ndarray
    engine: Engine = "matching"
    refresh: bool = True
    first: bool = False


@dataclass(frozen=True)
class BlockOutcome:
    """What a work item sends back: the read-out and its gradient, then the state after the rounds."""

    th_read: np.ndarray
    grad: np.ndarray
    C: np.ndarray
    b: np.ndarray
    th: np.ndarray
    m: np.ndarray | None = None  # first pass: strong-convexity moduli
    n_samples: np.ndarray | None = None
    param_names: tuple[str, ...] = ()
    targets: frozenset[float] = field(default_factory=frozenset)


def run_block_data(work: BlockWork) -> BlockOutcome:
    """Execute a :class:`BlockWork` on a worker (pure; the losses are built from the item's own files)."""
    built, solver = _block_losses(work.data)
    local = np.arange(work.data.agents.size)
    th = solver.solve(local, work.b, work.th) if work.refresh else work.th.copy()
    grad = built.losses.grad(local, th) if work.refresh else np.zeros_like(th)
    th_read = th.copy()
    C, b = work.C.copy(), work.b.copy()
    if work.li.size:
        rounds = batched_rounds if work.engine == "matching" else serial_rounds
        rounds(solver, C, b, th, work.li, work.lj, work.aij, work.aji, work.w, work.li, work.lj)
    if not work.first:
        return BlockOutcome(th_read, grad, C, b, th)
    return BlockOutcome(
        th_read, grad, C, b, th, built.losses.strong_convexity(), built.n_samples, built.param_names, built.targets
    )


@dataclass(frozen=True)
class RemoteLosses:
    """The losses of a partitioned problem as the flow knows them: the strong-convexity moduli only."""

    m: np.ndarray

    def strong_convexity(self) -> np.ndarray:
        return self.m


@dataclass(frozen=True)
class _Item:
    agents: np.ndarray  # global positions, increasing
    arcs: np.ndarray  # the agents' arcs (global ids)
    local_arc: np.ndarray
    local_agent: np.ndarray
    edges: np.ndarray  # the item's edges (global ids)
    data: BlockData


def _item(
    g: AgentGraph,
    ag: np.ndarray,
    edges: np.ndarray,
    folder: Path,
    ids: np.ndarray,
    args: dict[str, Any],
    inner_tol: float,
) -> _Item:
    arcs, local_arc, local_agent = block_arcs(g, ag)
    data = BlockData(str(folder), ids[ag], args, g.degree[ag], inner_tol)
    return _Item(ag, arcs, local_arc, local_agent, edges, data)


def _work(
    it: _Item,
    g: AgentGraph,
    seq: np.ndarray,
    C: np.ndarray,
    b: np.ndarray,
    th: np.ndarray,
    engine: Engine,
    refresh: bool,
    first: bool,
) -> BlockWork:
    return BlockWork(
        data=it.data,
        C=C[it.arcs],
        b=b[it.agents],
        th=th[it.agents],
        li=it.local_agent[g.u[seq]],
        lj=it.local_agent[g.v[seq]],
        aij=it.local_arc[g.a_uv[seq]],
        aji=it.local_arc[g.a_vu[seq]],
        w=g.w[seq],
        engine=engine,
        refresh=refresh,
        first=first,
    )


def agent_ids(summaries: list[AgentsSummary]) -> tuple[np.ndarray, tuple[str, ...]]:
    """The sorted union of the files' agent ids and the one parameter-name list they agree on."""
    names = {s.param_names for s in summaries if s.param_names}
    if len(names) > 1:
        by = "; ".join(f"{Path(s.file).name}: {list(s.param_names)}" for s in summaries if s.param_names)
        raise InputError(
            f"the files of the agents dataset give different model parameters ({by}); every file must "
            "have the same feature columns (or 'x' vectors of one length)"
        )
    ids = np.unique(np.concatenate([s.agents.astype(str) for s in summaries])) if summaries else np.array([])
    if ids.size == 0:
        raise InputError("agents: empty table (no row in any file)")
    if not names:  # no observed sample anywhere: every agent is pinned by its prior (as in memory)
        names = {s.declared for s in summaries if s.declared}
        if not names:
            raise DegenerateInput("observations: empty feature vectors in 'x' (column 'x')", "bad_features")
    return ids.astype(object), min(names)


def scan_agents(
    files: list[str], read: ReadFn, executor: MapFn, loss_args: dict[str, Any]
) -> tuple[np.ndarray, tuple[str, ...]]:
    """Pass 1: the sorted agent ids of the dataset and its parameter names (:func:`summarize_agents` per file)."""
    scan = functools.partial(
        summarize_agents,
        read=read,
        loss=str(loss_args.get("loss", "quadratic")),
        feature_cols=loss_args.get("feature_cols"),
    )
    return agent_ids(executor(scan, list(files)))


def fit_personal_models_partitioned(
    files: list[str],
    read: ReadFn,
    edges: pd.DataFrame,
    executor: MapFn,
    folder: str,
    *,
    loss_args: dict[str, Any],
    scanned: tuple[np.ndarray, tuple[str, ...]] | None = None,
    allow_disconnected: bool = False,
    n_blocks: int = 4,
    seed: int = 0,
    tol: float = 1e-8,
    max_rounds: int | None = None,
    engine: Engine = "matching",
    inner_tol: float = 1e-12,
    progress: ProgressFn | None = None,
) -> PersonalModelsResult:
    """Blocked DJAM (``init="zeros"``, one internal pass per sweep) with the agents' samples on the workers.

    Parameters
    ----------
    files : list of str
        The agents dataset's files in canonical columns (``agent``, ``y``, features, per-agent settings).
    read : callable
        ``read(path) -> DataFrame`` (picklable; runs on the workers).
    edges : pandas.DataFrame
        The agent graph (``source``, ``target``, ``weight``), held by the flow.
    executor : MapFn
        Where the passes run (:func:`crowdflow.executors.inline_executor` in process).
    folder : str
        Scratch folder the workers share: the block files are written there.
    loss_args : dict
        The keyword arguments of :func:`~crowdflow.personal_models.problem.build_losses` (loss, reg, prior_mean,
        huber_c, huber_kappa, feature_cols).
    scanned : (ids, param_names), optional
        What :func:`scan_agents` returned, when the caller ran pass 1 already (the pipeline checks the graph on it).
    allow_disconnected, n_blocks, seed, tol, max_rounds, engine, inner_tol, progress
        As :func:`~crowdflow.personal_models.blocked.djam_blocked`.

    Returns
    -------
    PersonalModelsResult
        ``method="djam_blocked"``; ``metadata["passes"]`` counts the executor passes.

    Raises
    ------
    crowdflow.contracts.errors.DegenerateInput, ValueError
        As :func:`~crowdflow.personal_models.problem.build_problem` (raised by the worker that builds the block).
    crowdflow.contracts.errors.InputError
        Files that disagree on the model's parameters; an empty dataset.
    """
    t0 = time.perf_counter()
    loss = str(loss_args.get("loss", "quadratic"))
    ids, names = scan_agents(files, read, executor, loss_args) if scanned is None else scanned
    edges = edges.rename(columns={"u": "source", "v": "target"}) if "u" in edges.columns else edges
    u, v, w = _validate_edges(edges, ids, allow_disconnected)
    g = AgentGraph.build(ids.size, u, v, w)
    n, p = g.n, len(names)
    block = partition_agents(g, n_blocks)
    internal = block[g.u] == block[g.v]
    cut = np.flatnonzero(~internal)
    on_cut = np.zeros(n, dtype=bool)
    on_cut[g.u[cut]] = on_cut[g.v[cut]] = True
    root = Path(folder)
    executor(
        functools.partial(split_agents, read=read, folder=str(root), agents=ids, block=block, boundary=on_cut),
        list(enumerate(files)),
    )
    passes = 2
    items = [
        _item(
            g,
            np.flatnonzero(block == k),
            np.flatnonzero(internal & (block[g.u] == k)),
            root / f"block-{int(k):05d}",
            ids,
            loss_args,
            inner_tol,
        )
        for k in np.unique(block)
    ]
    cut_item = _item(g, np.flatnonzero(on_cut), cut, root / _BOUNDARY, ids, loss_args, inner_tol) if cut.size else None
    per_sweep = int(np.count_nonzero(internal)) + int(cut.size)
    max_rounds, max_sweeps = sweep_budget(g, per_sweep, max_rounds)
    rng = np.random.default_rng(seed)
    S = g.holder_matrix()
    C = np.zeros((g.nbr.size, p))
    th = np.zeros((n, p))
    grad = np.zeros((n, p))
    problem: PersonalProblem | None = None
    trace: list[dict[str, Any]] = []
    rounds = sweeps = 0
    converged = False
    bound = np.inf
    tracker = IterationProgress(progress, max_sweeps, tol)
    while True:
        b = np.asarray(S @ C)
        more = sweeps < max_sweeps  # this pass also runs the next sweep's internal rounds
        seqs = [rng.permutation(it.edges) if more and it.edges.size else it.edges[:0] for it in items]
        works = [_work(it, g, s, C, b, th, engine, True, problem is None) for it, s in zip(items, seqs, strict=True)]
        outs: list[BlockOutcome] = executor(run_block_data, works)
        passes += 1
        for it, out in zip(items, outs, strict=True):
            th[it.agents], grad[it.agents] = out.th_read, out.grad
        if problem is None:
            problem = _problem(ids, names, loss, g, items, outs)
        trace.append(trace_row(problem, rounds, th, C, None, grad))
        _kn, bound, _ = certificate(problem, th, grad)
        scale = max(1.0, float(np.linalg.norm(th)))
        converged = bound <= tol * scale
        if sweeps:
            tracker.update(sweeps, bound / scale)
        if converged or not more:
            break
        sweeps += 1
        for it, out, s in zip(items, outs, seqs, strict=True):
            C[it.arcs], b[it.agents], th[it.agents] = out.C, out.b, out.th
            rounds += s.size
        if cut_item is not None:
            seq = rng.permutation(cut)
            (out,) = executor(run_block_data, [_work(cut_item, g, seq, C, b, th, engine, False, False)])
            passes += 1
            C[cut_item.arcs], th[cut_item.agents] = out.C, out.th
            rounds += seq.size
    tracker.done()
    assert problem is not None
    if not converged:
        warn_unconverged(sweeps, per_sweep, max_rounds, tol, bound)
    meta = {
        "seed": seed,
        "tol": tol,
        "sweeps": sweeps,
        "n_blocks": len(items),
        "cut_edges": int(cut.size),
        "boundary_agents": int(on_cut.sum()),
        "engine": engine,
        "passes": passes,
        "files": len(files),
        "wall_time_s": time.perf_counter() - t0,
    }
    return make_result(problem, th.copy(), "djam_blocked", rounds, converged, trace, meta, copies=C.copy(), grad=grad)


def _problem(
    ids: np.ndarray,
    names: tuple[str, ...],
    loss: str,
    g: AgentGraph,
    items: list[_Item],
    outs: list[BlockOutcome],
) -> PersonalProblem:
    """The flow's view of the problem after the first pass: moduli and sample counts from the blocks."""
    m = np.empty(g.n)
    n_samples = np.zeros(g.n, dtype=np.int64)
    targets: set[float] = set()
    for it, out in zip(items, outs, strict=True):
        if out.param_names != names:  # a block of 'x' vectors can only disagree if the files did
            raise DegenerateInput(
                f"observations: inconsistent dimension of 'x' ({list(out.param_names)} vs {list(names)}); p must be "
                "the same for every sample (column 'x')",
                "bad_features",
            )
        m[it.agents] = cast(np.ndarray, out.m)
        n_samples[it.agents] = cast(np.ndarray, out.n_samples)
        targets |= out.targets
    if targets and not (targets <= {0.0, 1.0} or targets <= {-1.0, 1.0}):
        raise DegenerateInput(
            f"observations: logistic targets must be 0/1 or ±1, got {sorted(targets)[:5]} (column 'y'); "
            "use loss quadratic for real-valued targets",
            "bad_target",
        )
    log.info("partitioned personal models: %d agents (%s), %d blocks", g.n, format_ids(ids, 3), len(items))
    name = _LOSS_ALIASES.get(loss, loss)
    return PersonalProblem(
        agents=ids,
        param_names=names,
        loss=name,
        losses=RemoteLosses(m),
        graph=g,
        n_samples=n_samples,
        component=_canonical_components(g.components()),
    )
