"""From tables to a TVCS instance: candidates, caps tables and the budget; the output tables.

Candidates ``(task, worker, score…)`` are the elements; view 1 groups them by worker (cap = the
worker's capacity), view 2 by task (cap = the task's redundancy cap) and the budget is the total.
This module reads and checks those tables (ids as strings, finite values, unique pairs, one cap row
per id, caps ≥ 0; ``None``/``inf`` = no cap), builds the dense-id instance :class:`_Instance`, and
turns a selection back into the ``assignment``, ``worker_load`` and ``task_load`` tables.

See docs/methods/assignment.md §1.3 (inputs) and §1.4 (outputs).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from crowdflow.assignment.constraints import TVCSConstraints
from crowdflow.contracts.errors import InputError

log = logging.getLogger(__name__)

_CAND_ALIASES = {"task_id": "task", "worker_id": "worker", "value": "score"}
_WORKER_CAP_ALIASES = {"worker_id": "worker", "max_tasks": "capacity", "worker_capacity": "capacity"}
_TASK_CAP_ALIASES = {"task_id": "task", "max_workers": "cap", "task_cap": "cap"}


def _rename_aliases(df: pd.DataFrame, aliases: dict[str, str]) -> pd.DataFrame:
    ren = {a: c for a, c in aliases.items() if a in df.columns and c not in df.columns}
    return df.rename(columns=ren) if ren else df


def _ids_as_str(col: pd.Series, table: str, name: str) -> np.ndarray:
    return _id_text(col, table, name).to_numpy(dtype=object)


def _id_text(col: pd.Series, table: str, name: str) -> pd.Series:
    """The ids of ``col`` as text (``astype(str)``); missing ids are an error naming the rows."""
    if col.isna().any():
        rows = np.flatnonzero(col.isna().to_numpy())[:10].tolist()
        raise ValueError(f"{table}: column '{name}' has missing ids at rows {rows}")
    return col.astype(str)


def _id_codes(text: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, distinct)`` of an id column as text: ``distinct[codes]`` is the column (object ``str``s).

    One hash pass (``pandas.factorize``; Arrow's dictionary encoding for Arrow-backed text), so the
    per-row work is on integers and only the distinct ids become Python strings.
    """
    codes, distinct = pd.factorize(text)
    return codes.astype(np.int64, copy=False), np.asarray(distinct, dtype=object)


def _float_column(df: pd.DataFrame, name: str, table: str) -> np.ndarray:
    try:
        vals = pd.to_numeric(df[name], errors="raise").to_numpy(dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{table}: column '{name}' must be numeric ({exc})") from None
    bad = ~np.isfinite(vals)
    if bad.any():
        rows = np.flatnonzero(bad)[:10].tolist()
        raise ValueError(f"{table}: column '{name}' has NaN/inf values at rows {rows}")
    return vals


@dataclass(frozen=True)
class _Instance:
    """Worker × task TVCS instance with dense ids (sorted string ids)."""

    workers: np.ndarray  # sorted worker ids (object/str)
    tasks: np.ndarray  # sorted task ids
    w_idx: np.ndarray  # worker index per candidate
    t_idx: np.ndarray  # task index per candidate
    worker_cap: np.ndarray  # float, inf = unlimited
    task_cap: np.ndarray  # float, inf = unlimited
    budget: int | None
    cand: pd.DataFrame  # normalised candidates (task, worker, ... ) in input order

    @property
    def p(self) -> int:
        return int(self.w_idx.shape[0])

    def constraints(self) -> TVCSConstraints:
        return TVCSConstraints.build(self.p, self.w_idx, self.t_idx, self.worker_cap, self.task_cap, self.budget)


_COUNTED = {"worker": "tasks", "task": "workers"}  # what a cap of each entity counts


class CapsTableError(InputError, ValueError):
    """A value of a caps table that is not a cap (e.g. ``1.5``): the message names the table, the column
    and the 1-based data row.

    A ``ValueError`` for library callers and an :class:`~crowdflow.contracts.errors.InputError` for the
    pipeline, which reports it as bad input (exit 2), never as an unexpected error.
    """


def _check_whole_caps(vals: np.ndarray, ids: np.ndarray, table: str, cap_col: str, entity: str) -> None:
    """Refuse fractional caps (``1.5``): a cap counts tasks or workers, and rounding one silently would
    assign a different number than the table says (docs/methods/assignment.md §1.3). ``inf`` = no cap."""
    frac = np.isfinite(vals) & (vals != np.floor(vals))
    if frac.any():
        rows = np.flatnonzero(frac)
        first = int(rows[0])
        raise CapsTableError(
            f"a cap counts {_COUNTED.get(entity, 'elements')} and must be a whole number, got "
            f"{vals[first]:g} for {entity} {str(ids[first])!r} ({rows.size} fractional value(s); "
            "they are refused, not rounded)",
            path=table,
            column=cap_col,
            rows=[int(r) + 1 for r in rows[:10]],
        )


def _caps_vector(
    caps: Any,
    ids_in_candidates: np.ndarray,
    entity: str,
    id_col: str,
    cap_col: str,
    aliases: dict[str, str],
    default: float | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Return (all ids sorted, cap per id as float with inf = unlimited).

    ``caps`` is a caps table (``id_col``, ``cap_col``), a number (one cap for every id) or ``None``
    (no cap). With a table, ``default`` is the cap of the candidates' ids the table does not list;
    ``None`` makes such an id an error naming it.
    """
    cand_ids = np.unique(ids_in_candidates.astype(str)) if ids_in_candidates.size else np.array([], dtype=object)
    if caps is None:
        return cand_ids.astype(object), np.full(cand_ids.shape[0], np.inf)
    if isinstance(caps, pd.DataFrame):
        df = _rename_aliases(caps, aliases).reset_index(drop=True)
        table = f"{entity} caps"
        for col in (id_col, cap_col):
            if col not in df.columns:
                raise ValueError(f"{table}: missing column '{col}' (columns: {list(caps.columns)})")
        ids = _ids_as_str(df[id_col], table, id_col)
        vals = pd.to_numeric(df[cap_col], errors="coerce").to_numpy(dtype=np.float64)
        if np.isnan(vals).any():
            bad = ids[np.isnan(vals)][:10].tolist()
            raise ValueError(f"{table}: column '{cap_col}' is missing or non-numeric for {entity}s {bad}")
        if (vals < 0).any():
            bad = ids[vals < 0][:10].tolist()
            raise ValueError(f"{table}: negative '{cap_col}' for {entity}s {bad}")
        _check_whole_caps(vals, ids, f"{entity}_caps", cap_col, entity)
        uniq, counts = np.unique(ids.astype(str), return_counts=True)
        if (counts > 1).any():
            raise ValueError(f"{table}: duplicate {entity} ids {uniq[counts > 1][:10].tolist()}")
        missing = np.setdiff1d(cand_ids.astype(str), uniq)
        if missing.size:
            if default is None:
                raise ValueError(
                    f"{table}: {missing.size} {entity}(s) in candidates have no '{cap_col}' row, "
                    f"e.g. {missing[:10].tolist()}"
                )
            # the scalar cap is the default for the ids the table omits
            ids = np.concatenate([ids.astype(str), missing.astype(str)]).astype(object)
            vals = np.concatenate([vals, np.full(missing.size, float(default))])
        all_ids = np.union1d(cand_ids.astype(str), ids.astype(str)).astype(object)
        order = np.argsort(ids.astype(str))
        pos = np.searchsorted(ids.astype(str)[order], all_ids.astype(str))
        return all_ids, vals[order][pos]
    try:
        val = float(caps)
    except (TypeError, ValueError):
        raise ValueError(f"{entity} caps must be None, a number or a DataFrame ({id_col}, {cap_col})") from None
    if math.isnan(val) or val < 0:
        raise ValueError(f"{entity} cap must be >= 0, got {caps!r}")
    return cand_ids.astype(object), np.full(cand_ids.shape[0], math.floor(val) if math.isfinite(val) else np.inf)


def _check_budget(budget: Any) -> int | None:
    if budget is None:
        return None
    if isinstance(budget, bool):
        raise ValueError("budget must be a non-negative integer or None (unlimited)")
    try:
        b = float(budget)
    except (TypeError, ValueError):
        raise ValueError(f"budget must be a non-negative integer or None, got {budget!r}") from None
    if math.isnan(b) or b < 0:
        raise ValueError(f"budget must be >= 0 (or None for unlimited), got {budget!r}")
    return None if math.isinf(b) else math.floor(b)


def _build_instance(
    candidates: pd.DataFrame,
    budget: Any,
    worker_caps: Any,
    task_caps: Any,
    value_cols: tuple[str, ...],
    *,
    worker_default: float | None,
    task_default: float | None,
) -> _Instance:
    """The instance of ``candidates`` (columns ``task, worker`` and ``value_cols``) under the budget and
    caps; ``worker_caps`` / ``task_caps`` are tables, numbers or ``None`` (see :func:`_caps_vector`,
    the defaults apply to the ids a table omits)."""
    if not isinstance(candidates, pd.DataFrame):
        raise ValueError("candidates must be a pandas DataFrame with columns task, worker, ...")
    cand = _rename_aliases(candidates, _CAND_ALIASES)
    for col in ("task", "worker", *value_cols):
        if col not in cand.columns:
            raise ValueError(f"candidates: missing column '{col}' (columns: {list(candidates.columns)})")
    cand = cand.reset_index(drop=True)
    task_text = _id_text(cand["task"], "candidates", "task")
    worker_text = _id_text(cand["worker"], "candidates", "worker")
    cand = cand.assign(task=task_text, worker=worker_text)
    for col in value_cols:
        cand[col] = _float_column(cand, col, "candidates")
    # ids become integer codes once; the checks and the instance work on the codes (issue #19: no per-row
    # Python strings on the hot path), only the distinct ids are compared as text
    t_codes, t_distinct = _id_codes(task_text)
    w_codes, w_distinct = _id_codes(worker_text)
    dup = pd.Series(t_codes * max(1, w_distinct.shape[0]) + w_codes).duplicated(keep=False).to_numpy()
    if dup.any():
        pairs = list(cand.loc[dup, ["task", "worker"]].drop_duplicates().itertuples(index=False, name=None))
        raise ValueError(f"candidates: duplicate (task, worker) pairs, e.g. {pairs[:10]}")
    b = _check_budget(budget)
    workers, wcap = _caps_vector(
        worker_caps, w_distinct, "worker", "worker", "capacity", _WORKER_CAP_ALIASES, worker_default
    )
    tasks, tcap = _caps_vector(task_caps, t_distinct, "task", "task", "cap", _TASK_CAP_ALIASES, task_default)
    w_idx = np.searchsorted(workers.astype(str), w_distinct.astype(str)).astype(np.int64)[w_codes]
    t_idx = np.searchsorted(tasks.astype(str), t_distinct.astype(str)).astype(np.int64)[t_codes]
    return _Instance(workers, tasks, w_idx, t_idx, wcap, tcap, b, cand)


def _nullable_caps(cap: np.ndarray) -> pd.Series:
    return pd.Series(np.where(np.isfinite(cap), cap, 0).astype(np.int64), dtype="Int64").mask(~np.isfinite(cap))


def _loads(inst: _Instance, x: np.ndarray) -> tuple[pd.DataFrame, pd.DataFrame]:
    nw = np.bincount(inst.w_idx[x], minlength=inst.workers.shape[0]).astype(np.int64)
    nt = np.bincount(inst.t_idx[x], minlength=inst.tasks.shape[0]).astype(np.int64)
    wcap = _nullable_caps(inst.worker_cap)
    tcap = _nullable_caps(inst.task_cap)
    wl = pd.DataFrame({"worker": pd.Series(inst.workers.astype(str), dtype=object), "n_assigned": nw, "capacity": wcap})
    wl["slack"] = wl["capacity"] - wl["n_assigned"]
    tl = pd.DataFrame({"task": pd.Series(inst.tasks.astype(str), dtype=object), "n_assigned": nt, "cap": tcap})
    tl["slack"] = tl["cap"] - tl["n_assigned"]
    return wl, tl


def _assignment_table(inst: _Instance, x: np.ndarray, score: np.ndarray, extra: dict[str, np.ndarray]) -> pd.DataFrame:
    """The selected candidates by task, then score (descending), then worker.

    Ordered by the instance's sorted-id ranks (``t_idx``, ``w_idx``: the text order of the ids) with one
    ``lexsort``; (task, worker) pairs are unique, so the order is the one ``sort_values(["task", "score",
    "worker"], ascending=[True, False, True])`` gives (:func:`_assignment_table_reference`).
    """
    sel = np.flatnonzero(x)
    sel = sel[np.lexsort((inst.w_idx[sel], -score[sel], inst.t_idx[sel]))]
    df = pd.DataFrame(
        {
            "task": pd.Series(inst.cand["task"].take(sel).to_numpy(dtype=object), dtype=object),
            "worker": pd.Series(inst.cand["worker"].take(sel).to_numpy(dtype=object), dtype=object),
            "score": score[sel].astype(np.float64),
        }
    )
    for k, v in extra.items():
        df[k] = v[sel]
    return df


def _assignment_table_reference(
    inst: _Instance, x: np.ndarray, score: np.ndarray, extra: dict[str, np.ndarray]
) -> pd.DataFrame:
    """:func:`_assignment_table` by pandas' sort on the id texts (the reference its tests compare with)."""
    sel = np.flatnonzero(x)
    df = pd.DataFrame(
        {
            "task": pd.Series(inst.cand["task"].to_numpy(dtype=object)[sel], dtype=object),
            "worker": pd.Series(inst.cand["worker"].to_numpy(dtype=object)[sel], dtype=object),
            "score": score[sel].astype(np.float64),
        }
    )
    for k, v in extra.items():
        df[k] = v[sel]
    df = df.sort_values(["task", "score", "worker"], ascending=[True, False, True], kind="stable")
    return df.reset_index(drop=True)
