"""The run report: one self-contained static ``report.html`` per run (no server, no external URLs).

:func:`render_report` turns a run's output tables and its manifest into an HTML page with

* a header: run id, pipeline, job, method, start time, status, per-step timings, input fingerprints
  (path, SHA-256, rows), output row counts and relative links to each Parquet file and the manifest;
* what to act on (skills runs: best and worst workers by name, tasks to re-label, labels changed against
  majority vote, estimated vs gold-measured accuracy), each with a stable ``id`` (see :data:`ACTION_IDS`);
* the job's figures, each a ``<figure>`` with a stable ``id`` (see :data:`FIGURE_IDS`), a PNG embedded
  as a ``data:`` URI, ``alt`` text and a caption saying what is plotted and how it was computed (or a sentence
  where a chart would be one bar that says nothing);
* the checks: their settings (block/warn) apart from what they found;
* previews of every output table.

Figures need matplotlib (``pip install 'crowdflow[report]'``), drawn with the Agg canvas through the
object-oriented API (no pyplot, no global backend state). Without matplotlib the page is still written:
every figure keeps its ``id`` and caption, shows the numbers it would plot as a small table, and says
how to get the plots.

This module is pure library code: it imports neither Prefect nor Great Expectations.
"""

from __future__ import annotations

import html
import json
import logging
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from crowdflow._version import __version__
from crowdflow.report.assignment import assignment_figures, assignment_header
from crowdflow.report.figure import INSTALL_HINT, Action, Plot, ReportFigure, matplotlib_figure, png
from crowdflow.report.personal import personal_models_figures, personal_rankings_figures, personal_rankings_header
from crowdflow.report.ranking import ranking_figures, ranking_header
from crowdflow.report.skills import skills_actions, skills_figures
from crowdflow.report.trends import explain_timings, trends_plot
from crowdflow.storage.run_store import read_output_table, run_date_of
from crowdflow.storage.runs import run_history

log = logging.getLogger(__name__)

REPORT_FILE = "report.html"

#: Figure ids per job, in page order. Every id is present in the page of a run of that job (with a note
#: instead of an image when the run has nothing to plot for it, or matplotlib is missing).
FIGURE_IDS: dict[str, tuple[str, ...]] = {
    "skills": (
        "fig-skill-distribution",
        "fig-worker-label-counts",
        "fig-worker-components",
        "fig-identifiability",
        "fig-consensus-confidence",
        "fig-gold-vs-estimated",
        "fig-confusion",
    ),
    "ranking": ("fig-ranking-intervals", "fig-ranking-baseline", "fig-outlier-path", "fig-annotator-outliers"),
    "personal_rankings": ("fig-personal-heatmap", "fig-item-score-spread"),
    "personal_models": ("fig-residual-histogram", "fig-convergence"),
    "assignment": ("fig-worker-load", "fig-task-load"),
    "next_batch": ("fig-worker-load", "fig-task-load", "fig-candidate-scores"),
}
# every job's page ends its figures with the pipeline's trends over its earlier runs (crowdflow.report.trends)
FIGURE_IDS = {job: (*ids, "fig-run-trends") for job, ids in FIGURE_IDS.items()}


#: Figures that span the whole row of the grid (several panels side by side).
WIDE_FIGURES = frozenset({"fig-run-trends"})


#: Items of "What to act on" per job, in page order (skills: every id is present, with a sentence saying what is
#: missing when the run lacks its data, e.g. gold labels).
ACTION_IDS: dict[str, tuple[str, ...]] = {
    "skills": ("act-best-workers", "act-worst-workers", "act-relabel", "act-majority", "act-gold"),
}


@dataclass
class RunReport:
    """The rendered report: the HTML page, the figures it embeds and what to act on."""

    html: str
    figures: list[ReportFigure]
    has_plots: bool
    seconds: float
    summary: pd.DataFrame = field(default_factory=pd.DataFrame)
    actions: list[Action] = field(default_factory=list)

    def figure(self, fig_id: str) -> ReportFigure:
        for f in self.figures:
            if f.id == fig_id:
                return f
        raise KeyError(fig_id)


_ACTIONS: dict[str, Callable[[Mapping[str, pd.DataFrame], Mapping[str, Any]], list[Action]]] = {
    "skills": skills_actions,
}

# job → extra header entries (label, text): a baseline beside the method's number
_HEADER: dict[str, Callable[[Mapping[str, pd.DataFrame], Mapping[str, Any]], list[tuple[str, str]]]] = {
    "ranking": ranking_header,
    "personal_rankings": personal_rankings_header,
    "next_batch": assignment_header,
}

_BUILDERS: dict[str, Callable[[Mapping[str, pd.DataFrame], Mapping[str, Any]], list[Plot]]] = {
    "skills": skills_figures,
    "ranking": ranking_figures,
    "personal_rankings": personal_rankings_figures,
    "personal_models": personal_models_figures,
    "assignment": assignment_figures,
    "next_batch": assignment_figures,
}


# --------------------------------------------------------------------------------------------------
# HTML


_CSS = """
:root{--fg:#1f2933;--muted:#616e7c;--line:#e4e7eb;--bg:#f7f8fa;--accent:#3a6ea5}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;
 color:var(--fg);background:var(--bg)}
main{max-width:1240px;margin:0 auto;padding:20px 24px 40px}
header.run{background:#fff;border:1px solid var(--line);border-radius:8px;padding:16px 20px;margin-bottom:16px}
h1{font-size:22px;margin:0 0 4px}
h2{font-size:17px;margin:24px 0 10px;border-bottom:1px solid var(--line);padding-bottom:4px}
.sub{color:var(--muted);margin:0 0 12px}
.kv{display:grid;grid-template-columns:repeat(auto-fill,minmax(220px,1fr));gap:6px 18px;margin:0}
.kv div{min-width:0} .kv dt{color:var(--muted);font-size:12px} .kv dd{margin:0;font-weight:600;overflow-wrap:anywhere}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;background:#e3f2ec;color:#1d6b54}
.badge.warn{background:#fdecea;color:#a4282a}
nav.toc a{margin-right:14px;color:var(--accent);text-decoration:none}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(560px,1fr));gap:16px}
figure{margin:0;background:#fff;border:1px solid var(--line);border-radius:8px;padding:12px}
figure img{width:100%;height:auto;display:block}
figure.fact,figure.wide{grid-column:1/-1} figure.fact .sentence{font-size:15px;margin:0 0 6px}
ul.legend{list-style:none;margin:6px 0 0;padding:0;display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12px}
ul.legend li{display:flex;align-items:center;gap:5px}
.swatch{display:inline-block;width:11px;height:11px;border-radius:2px;border:1px solid #0002}
p.reading{margin:6px 0 4px;font-weight:600;font-size:13px}
figcaption{color:var(--fg);font-size:13px;margin-top:8px} figcaption b{display:block;margin-bottom:2px}
.note{background:#fff8e1;border:1px solid #f3d27a;border-radius:6px;padding:8px 12px;margin:8px 0}
table{border-collapse:collapse;font-size:12.5px;background:#fff;margin:4px 0 8px}
th,td{border:1px solid var(--line);padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f0f2f5} td.num{text-align:right;font-variant-numeric:tabular-nums}
details{margin:6px 0} summary{cursor:pointer;font-weight:600}
.cols{display:grid;grid-template-columns:repeat(auto-fit,minmax(380px,1fr));gap:16px}
code{font-size:12px;overflow-wrap:anywhere} a{color:var(--accent)}
p.sentence{font-size:15px;margin:10px 4px 14px;padding:12px 14px;border-left:4px solid var(--accent);background:#f3f6fa}
.acts{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:16px}
.act{background:#fff;border:1px solid var(--line);border-radius:8px;padding:10px 14px;overflow-x:auto}
.act h3{margin:2px 0 6px;font-size:15px} .act p{margin:0 0 8px}
footer{color:var(--muted);font-size:12px;margin-top:28px}
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _text(s: Any) -> str:
    """Escaped text with `name` spans rendered as code: a caption, a note or an action never shows a backtick."""
    parts = _e(s).split("`")
    if len(parts) % 2 == 0:  # an unmatched backtick: drop it rather than print it
        return "".join(parts)
    return "".join(f"<code>{x}</code>" if i % 2 else x for i, x in enumerate(parts))


def _reading(f: ReportFigure) -> str:
    if f.reading:
        return f.reading
    if f.sentence:
        return f.sentence
    sentences = re.split(r"(?<=[.!?])\s+", f.caption.strip())
    return next((s for s in sentences if re.search(r"\d", s)), sentences[0] if sentences else f.title)


def _fmt(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, bool | np.bool_):
        return str(bool(v))
    if isinstance(v, float | np.floating):
        return f"{float(v):.4g}"
    return str(v)


def _table_html(df: pd.DataFrame, max_rows: int = 20, table_id: str | None = None, max_chars: int = 80) -> str:
    if df is None or df.empty:
        return f'<p class="sub"{f" id={_q(table_id)}" if table_id else ""}>(no rows)</p>'
    head = df.head(max_rows)
    num = [pd.api.types.is_numeric_dtype(head[c]) and not pd.api.types.is_bool_dtype(head[c]) for c in head.columns]
    parts = [f"<table{f' id={_q(table_id)}' if table_id else ''}><thead><tr>"]
    parts += [f"<th>{_e(c)}</th>" for c in head.columns]
    parts.append("</tr></thead><tbody>")
    for row in head.itertuples(index=False):
        parts.append("<tr>")
        for v, isnum in zip(row, num, strict=True):
            text = _fmt(v)
            if len(text) > max_chars:
                text = text[: max_chars - 3] + "…"
            parts.append(f'<td class="num">{_e(text)}</td>' if isnum else f"<td>{_e(text)}</td>")
        parts.append("</tr>")
    parts.append("</tbody></table>")
    if len(df) > max_rows:
        parts.append(f'<p class="sub">… {len(df) - max_rows} more rows</p>')
    return "".join(parts)


def _q(s: str) -> str:
    return '"' + html.escape(s, quote=True) + '"'


def _kv(items: list[tuple[str, Any]]) -> str:
    cells = "".join(f"<div><dt>{_e(k)}</dt><dd>{v}</dd></div>" for k, v in items)
    return f'<dl class="kv">{cells}</dl>'


def _figure_html(f: ReportFigure, has_mpl: bool) -> str:
    uri = f.data_uri()
    fact = uri is None and bool(f.sentence) and not (f.note or "").startswith("figure needs matplotlib")
    # a figure that is a sentence (a chart would be one bar) spans the row: never a half-empty card beside a chart
    # a figure of several panels (the run-over-run trends) spans the row too: half a row squeezes its panels
    cls = ' class="fact"' if fact else ' class="wide"' if f.id in WIDE_FIGURES else ""
    parts = [f"<figure id={_q(f.id)} data-figure={_q(f.id)}{cls}>"]
    if f.sentence:
        parts.append(f'<p class="sentence">{_text(f.sentence)}</p>')
    if uri:
        parts.append(f'<img src="{uri}" alt={_q(f.alt)}>')
        swatches = "".join(
            f'<li><span class="swatch" style="background:{_e(colour)}"></span>{_text(label)}</li>'
            for colour, label in f.legend
        )
        parts.append(f'<ul class="legend" aria-label="legend">{swatches}</ul>')
    elif fact:
        pass  # the sentence is the whole figure
    else:
        reason = f.note or ""
        if not has_mpl and f.data is not None:
            reason = f"Figure needs matplotlib: <code>{_e(INSTALL_HINT)}</code>. The numbers it would plot:"
            parts.append(f'<div class="note">{reason}</div>')
            parts.append(_table_html(f.data, 20))
        else:
            parts.append(f'<div class="note">{_text(reason or "nothing to plot")}</div>')
    if uri or not fact:
        parts.append(f'<p class="reading">{_text(_reading(f))}</p>')
    parts.append(f"<figcaption><b>{_e(f.title)}</b>{_text(f.caption)}</figcaption></figure>")
    return "".join(parts)


def planned_outputs(
    tables: Mapping[str, pd.DataFrame], layout: str = "flat", pipeline: str = "", run_id: str = ""
) -> dict[str, dict[str, Any]]:
    """The manifest ``outputs`` the atomic writer will record for these tables (name → path, rows).

    Paths are relative to the run folder ``<out>/<pipeline>/<run_id>``; with the hive layout a table
    is the part ``<out>/<table>/pipeline=<pipeline>/run_date=<date>/part-<run_id>.parquet``.
    """
    if layout == "hive":
        date = run_date_of(run_id)
        return {
            name: {"path": f"../../{name}/pipeline={pipeline}/run_date={date}/part-{run_id}.parquet", "rows": len(df)}
            for name, df in tables.items()
        }
    return {name: {"path": f"{name}.parquet", "rows": len(df)} for name, df in tables.items()}


def _header(
    manifest: Mapping[str, Any], outputs: Mapping[str, Mapping[str, Any]], extra: Sequence[tuple[str, str]] = ()
) -> str:
    run_id = manifest.get("run_id", "?")
    status = manifest.get("status") or "completed"
    timings = manifest.get("timings") or {}
    total = sum(float(v) for v in timings.values() if isinstance(v, int | float))
    checks = manifest.get("checks") or {}
    warn = any(str(v) in ("warn", "failed") or str(v).startswith("failed") for v in checks.values())
    items: list[tuple[str, Any]] = [
        ("pipeline", _e(manifest.get("pipeline", "?"))),
        ("job", _e(manifest.get("job", "?"))),
        ("method", _e(manifest.get("method") or "—")),
        ("started (UTC)", _e(manifest.get("started_at", "?"))),
        ("status", f'<span class="badge{" warn" if warn else ""}">{_e(status)}</span>'),
        ("timed steps", f"{total:.2f} s"),
        ("flow run", f"<code>{_e(manifest.get('flow_run_id') or '—')}</code>"),
        ("crowdflow", _e((manifest.get("versions") or {}).get("crowdflow", __version__))),
    ]
    metrics = manifest.get("metrics") or {}
    if isinstance(metrics.get("accuracy"), float) and isinstance(metrics.get("baseline_accuracy"), float):
        acc, base = metrics["accuracy"], metrics["baseline_accuracy"]
        items.append(
            (
                "accuracy vs baseline",
                f"{acc:.4f} vs {base:.4f} ({_e(metrics.get('baseline', 'baseline'))}): {acc - base:+.4f}",
            )
        )
    items += [(k, _text(v)) for k, v in extra]
    for k, v in metrics.items():
        if isinstance(v, int | float | bool | str) and v is not None:
            items.append((k, _e(_fmt(v))))
    return (
        f'<header class="run" id="run-header"><h1>crowdflow run <code>{_e(run_id)}</code></h1>'
        f'<p class="sub">Static report of one run: figures, the tables it wrote and where its inputs came from. '
        f"Links are relative to this file's folder.</p>{_kv(items)}</header>"
    )


def _meta_sections(manifest: Mapping[str, Any], outputs: Mapping[str, Mapping[str, Any]]) -> str:
    out_rows = [
        {"output": name, "file": info.get("path", ""), "rows": info.get("rows")} for name, info in outputs.items()
    ]
    links = ['<table id="outputs-table"><thead><tr><th>output</th><th>file</th><th>rows</th></tr></thead><tbody>']
    for r in out_rows:
        links.append(
            f"<tr><td>{_e(r['output'])}</td><td><a href={_q(r['file'])}>{_e(r['file'])}</a></td>"
            f'<td class="num">{_e(_fmt(r["rows"]))}</td></tr>'
        )
    links.append(
        '<tr><td>manifest</td><td><a href="manifest.json">manifest.json</a></td><td class="num"></td></tr>'
        "</tbody></table>"
    )
    inputs = pd.DataFrame(manifest.get("inputs") or [])
    if not inputs.empty:
        inputs = inputs.rename(columns={"name": "input"})
    in_html = (
        '<table id="inputs-table"><thead><tr><th>input</th><th>rows</th><th>format</th><th>SHA-256</th><th>path</th>'
        "</tr></thead><tbody>"
        + "".join(
            f'<tr><td>{_e(r.get("input", ""))}</td><td class="num">{_e(_fmt(r.get("rows")))}</td>'
            f"<td>{_e(r.get('format', ''))}</td><td><code title={_q(str(r.get('sha256', '')))}>"
            f"{_e(str(r.get('sha256', ''))[:16])}…</code></td><td><code>{_e(r.get('path', ''))}</code></td></tr>"
            for r in inputs.to_dict("records")
        )
        + "</tbody></table>"
    )
    t_html = _table_html(explain_timings(manifest), 50, "timings-table", max_chars=400)
    settings, results = check_tables(manifest)
    s_html = _table_html(settings, 50, "check-settings-table")
    c_html = _table_html(results, 50, "check-results-table")
    return (
        '<section id="outputs"><h2>Outputs</h2><div class="cols">'
        f"<div><h3>Files of this run</h3>{''.join(links)}</div>"
        f'<div id="checks"><h3>Check settings</h3>{s_html}<h3>Check results</h3>{c_html}'
        f"<h3>Timings</h3>{t_html}</div></div></section>"
        f'<section id="inputs"><h2>Inputs (fingerprints)</h2>{in_html}</section>'
    )


_SETTING_VALUES = frozenset({"block", "warn"})


def check_tables(manifest: Mapping[str, Any]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The checks of a run as two tables: their settings (check → block/warn) and what they found (check → result).

    Settings come from the manifest's ``check_settings`` (older manifests: the spec's ``checks``); results from its
    ``checks``, where a value that is only a setting (``validation: block`` in manifests before the split) is left
    out and a nested record is shown as ``key.sub``.
    """
    settings = dict(manifest.get("check_settings") or {})
    if not settings:
        spec_checks = (manifest.get("spec") or {}).get("checks") or {}
        settings = {k: v for k, v in spec_checks.items() if v is not None}
    rows: list[tuple[str, str]] = []
    for key, value in (manifest.get("checks") or {}).items():
        if isinstance(value, Mapping):
            rows += [(f"{key}.{k}", _fmt(v)) for k, v in value.items()]
        elif str(value) in _SETTING_VALUES:  # a setting recorded among the results (manifests before the split)
            settings.setdefault(str(key), str(value))
        else:
            rows.append((str(key), _fmt(value)))
    return (
        pd.DataFrame({"check": list(settings), "setting": [str(v) for v in settings.values()]}),
        pd.DataFrame(rows, columns=["check", "result"]),
    )


def _actions_html(actions: list[Action]) -> str:
    parts = ['<section id="actions"><h2>What to act on</h2><div class="acts">']
    for a in actions:
        parts.append(f"<div class={_q('act')} id={_q(a.id)}><h3>{_e(a.title)}</h3><p>{_text(a.text)}</p>")
        if a.table is not None and not a.table.empty:
            parts.append(_table_html(a.table, 12))
        parts.append("</div>")
    parts.append("</div></section>")
    return "".join(parts)


def render_report(
    manifest: Mapping[str, Any],
    tables: Mapping[str, pd.DataFrame],
    outputs: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    plots: bool = True,
    history: Sequence[Mapping[str, Any]] = (),
) -> RunReport:
    """Render the static HTML report of one run.

    Parameters
    ----------
    manifest : mapping
        The run manifest (``run_id``, ``pipeline``, ``job``, ``inputs``, ``timings``, ``metrics``…).
    tables : mapping of name → DataFrame
        The run's output tables.
    outputs : mapping, optional
        Output files (name → ``path``, ``rows``) to link; defaults to the manifest's ``outputs`` or, before
        the export, :func:`planned_outputs` of ``tables`` plus the report itself.
    plots : bool
        False skips matplotlib even when it is installed (the page then shows the plotted numbers).
    history : sequence of manifests
        The pipeline's earlier completed runs, oldest first (:func:`crowdflow.storage.runs.run_history`): the
        trends figure ``fig-run-trends``.

    Returns
    -------
    RunReport
    """
    t0 = time.perf_counter()
    job = str(manifest.get("job", ""))
    if outputs is None:
        layout = str(((manifest.get("spec") or {}).get("output") or {}).get("layout", "flat"))
        planned = planned_outputs(tables, layout, str(manifest.get("pipeline", "")), str(manifest.get("run_id", "")))
        outputs = manifest.get("outputs") or {
            **planned,
            "report": {"path": REPORT_FILE, "rows": None},
        }
    figure_cls = matplotlib_figure() if plots else None
    builder = _BUILDERS.get(job)
    plots_spec = [*(builder(tables, manifest) if builder else []), trends_plot(history, manifest, tables)]
    figures: list[ReportFigure] = []
    for p in plots_spec:
        image: bytes | None = None
        legend: list[tuple[str, str]] = []
        note = p.note
        if p.draw is not None and figure_cls is not None:
            image, legend = png(figure_cls, p.draw, p.size, p.margins)
        elif p.draw is not None:
            note = f"figure needs matplotlib: {INSTALL_HINT}"
        figures.append(ReportFigure(p.id, p.title, p.caption, image, note, p.data, p.sentence, legend, p.reading))
    act_builder = _ACTIONS.get(job)
    actions = act_builder(tables, manifest) if act_builder else []

    run_id = str(manifest.get("run_id", "?"))
    body = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>crowdflow {_e(manifest.get('pipeline', ''))} · {_e(run_id)}</title>",
        f"<style>{_CSS}</style></head><body><main>",
        _header(manifest, outputs, _HEADER[job](tables, manifest) if job in _HEADER else ()),
        '<nav class="toc">'
        + ('<a href="#actions">What to act on</a>' if actions else "")
        + '<a href="#figures">Figures</a><a href="#outputs">Outputs</a><a href="#inputs">Inputs</a>'
        '<a href="#tables">Table previews</a><a href="#versions">Versions</a></nav>',
    ]
    if actions:
        body.append(_actions_html(actions))
    body.append('<section id="figures"><h2>Figures</h2>')
    if figure_cls is None and any(p.draw is not None for p in plots_spec):
        body.append(
            f'<div class="note" id="no-matplotlib">Figures need matplotlib: <code>{_e(INSTALL_HINT)}</code>. '
            "Each figure below shows the numbers it would plot instead.</div>"
        )
    if not plots_spec:
        body.append(f'<p class="sub">No figures for job {_e(job)!r}.</p>')
    body.append('<div class="grid">')
    body += [_figure_html(f, figure_cls is not None) for f in figures]
    body.append("</div></section>")
    body.append(_meta_sections(manifest, outputs))
    body.append('<section id="tables"><h2>Table previews</h2>')
    for name, df in tables.items():
        body.append(
            f'<details id="table-{_e(name)}"><summary>{_e(name)} — {len(df)} rows × {df.shape[1]} columns '
            f"(<a href={_q(str(outputs.get(name, {}).get('path', f'{name}.parquet')))}>{_e(name)}.parquet</a>)"
            f"</summary>{_table_html(df, 15)}</details>"
        )
    body.append("</section>")
    versions = manifest.get("versions") or {}
    body.append(
        '<section id="versions"><h2>Versions</h2>'
        + _table_html(pd.DataFrame({"package": list(versions), "version": list(versions.values())}), 50)
        + "</section>"
    )
    spec = manifest.get("spec")
    if spec:
        body.append(
            '<details id="spec"><summary>Pipeline spec</summary><pre>'
            + _e(json.dumps(spec, indent=2, default=str))
            + "</pre></details>"
        )
    seconds = time.perf_counter() - t0
    body.append(
        f"<footer>Generated by crowdflow {_e(__version__)} in {seconds:.2f} s; self-contained (images embedded), "
        "no network access needed.</footer></main></body></html>"
    )
    summary = pd.DataFrame([{"output": k, "file": v.get("path"), "rows": v.get("rows")} for k, v in outputs.items()])
    return RunReport(
        html="\n".join(body),
        figures=figures,
        has_plots=figure_cls is not None,
        seconds=time.perf_counter() - t0,
        summary=summary,
        actions=actions,
    )


def render_report_holding(
    table: pd.DataFrame,
    args: tuple[Mapping[str, Any], Mapping[str, pd.DataFrame | None], str, Sequence[Mapping[str, Any]]],
) -> RunReport:
    """:func:`render_report` where one of the run's tables is held (a Dask worker's, issue #36): ``args`` =
    (manifest, the tables with ``None`` in the held one's place, its name, history); ``table`` takes that place, so
    the page is the one :func:`render_report` makes of the same tables in the same order."""
    manifest, tables, name, history = args
    whole = {n: table if n == name else t for n, t in tables.items()}
    return render_report(manifest, {n: t for n, t in whole.items() if t is not None}, history=history)


def report_from_run_dir(run_dir: str | Path, *, plots: bool = True) -> RunReport:
    """Re-render the report of an exported run from its ``manifest.json`` and Parquet files."""
    run = Path(run_dir)
    manifest = json.loads((run / "manifest.json").read_text())
    layout = str(manifest.get("layout") or "flat")
    tables = {
        name: read_output_table(run, name, info, layout).to_pandas()
        for name, info in (manifest.get("outputs") or {}).items()
        if "rows" in info
    }
    history = [m for m in run_history(run.parent) if str(m.get("run_id")) < str(manifest.get("run_id", ""))]
    return render_report(manifest, tables, plots=plots, history=history)
