"""MkDocs hook: the pages generated from the code, and the benchmark pages included from benchmarks/results/.

- ``<!-- crowdflow:cli -->`` in a page becomes the ``crowdflow`` command's help, read from its argparse parser
  (``flows.cli.build_parser``), one section per command;
- ``<!-- crowdflow:spec-fields -->`` becomes one table per pipeline-spec model (``crowdflow.spec`` and the jobs'
  options models): each field's name, type, default and description, read from the pydantic models;
- every ``benchmarks/results/<name>.md`` becomes the page ``benchmarks/<name>.md``, which includes the file with
  ``pymdownx.snippets`` (no copy to drift) and is added to the "Benchmarks" section of the navigation;
- a relative link that leaves ``docs/`` (``../../crowdflow/spec.py``) names the repository file as code instead
  of a broken link: the site holds the documentation, the repository holds the code.
"""

from __future__ import annotations

import argparse
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
_LINK = re.compile(r"(?<!!)\[([^\]]+)\]\(([^)\s]+)\)")


def _results() -> list[Path]:
    return sorted(RESULTS.glob("*.md"))


def _title(path: Path) -> str:
    first = path.read_text().lstrip().split("\n", 1)[0]
    return first.lstrip("# ").strip() or path.stem


def on_config(config: Any) -> Any:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    for entry in config["nav"] or []:
        if isinstance(entry, dict) and "Benchmarks" in entry:
            entry["Benchmarks"] = [
                *entry["Benchmarks"],
                *({p.stem.replace("_", " "): f"benchmarks/{p.name}"} for p in _results()),
            ]
    return config


def on_files(files: Files, config: Any) -> Files:
    for path in _results():
        content = f'--8<-- "benchmarks/results/{path.name}"\n'
        files.append(File.generated(config, f"benchmarks/{path.name}", content=content))
    return files


# ------------------------------------------------------------------------------------------------ generated pages


def _cli_reference() -> str:
    from flows.cli import JOB_COMMANDS, build_parser

    parser = build_parser()
    out = ["```text", parser.format_help().rstrip(), "```", ""]
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name in sub.choices:
        full = build_parser(name if name in JOB_COMMANDS else "")
        sub_full = next(a for a in full._actions if isinstance(a, argparse._SubParsersAction))
        out += [f"### crowdflow {name}", "", "```text", sub_full.choices[name].format_help().rstrip(), "```", ""]
    return "\n".join(out)


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args if a is not type(None))
    if origin in (list, tuple):
        return f"list of {_type_name(args[0])}" if args else "list"
    if origin is dict:
        return "mapping"
    if isinstance(annotation, type):
        return {"str": "text", "int": "integer", "float": "number", "bool": "true/false"}.get(
            annotation.__name__, annotation.__name__
        )
    return str(annotation).replace("typing.", "")


def _default(field: Any) -> str:
    from pydantic import BaseModel
    from pydantic_core import PydanticUndefined

    if field.is_required():
        return "**required**"
    if field.default_factory is not None:
        value = field.default_factory()
        return "(its defaults)" if isinstance(value, BaseModel) else f"`{value!r}`"
    if field.default is PydanticUndefined or field.default is None:
        return "empty"
    return f"`{field.default!r}`"


def _cell(text: str | None) -> str:
    return (text or "").replace("|", "\\|").replace("\n", " ")


def _model_table(model: Any) -> list[str]:
    doc = (model.__doc__ or "").strip().split("\n\n", 1)[0].replace("\n", " ")
    rows = [f"### `{model.__name__}`", "", doc, "", "| field | type | default | what it is |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        rows.append(
            f"| `{field.alias or name}` | {_cell(_type_name(field.annotation))} | {_default(field)} | "
            f"{_cell(field.description)} |"
        )
    return [*rows, ""]


def _spec_reference() -> str:
    from crowdflow import spec
    from crowdflow.assignment import AssignmentOptions
    from crowdflow.personal_models import PersonalModelsOptions
    from crowdflow.personal_rankings.options import PersonalRankingsOptions
    from crowdflow.ranking import RankingOptions
    from crowdflow.skills import SkillsOptions

    out = ["## Jobs", ""]
    for model in spec.JOB_MODELS.values():
        out += _model_table(model)
    out += ["## Inputs, checks, output, runner, cache", ""]
    shared = (spec.SourceSpec, spec.ChecksSpec, spec.OutputSpec, spec.WarehouseSpec, spec.RunnerSpec, spec.CacheSpec)
    for model in shared:
        out += _model_table(model)
    out += ["## Job options", ""]
    for model in (SkillsOptions, RankingOptions, PersonalRankingsOptions, PersonalModelsOptions, AssignmentOptions):
        out += _model_table(model)
    return "\n".join(out)


_MARKERS = {"<!-- crowdflow:cli -->": _cli_reference, "<!-- crowdflow:spec-fields -->": _spec_reference}


def _outside_links(markdown: str, page_src: str, docs_dir: Path) -> str:
    here = (docs_dir / page_src).parent

    def fix(match: re.Match[str]) -> str:
        text, target = match.group(1), match.group(2)
        if "://" in target or target.startswith(("#", "mailto:")):
            return match.group(0)
        path = (here / target.split("#", 1)[0]).resolve()
        if path.is_relative_to(docs_dir.resolve()) or not path.is_relative_to(ROOT):
            return match.group(0)
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("benchmarks/results/") and rel.endswith(".md"):  # the generated benchmark page
            up = Path(*([".."] * len(Path(page_src).parent.parts)))
            return f"[{text}]({(up / 'benchmarks' / path.name).as_posix()})"
        return text if text.strip("`") == rel else f"{text} (`{rel}`)"

    return _LINK.sub(fix, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    for marker, make in _MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, make())
    return _outside_links(markdown, page.file.src_uri, Path(config["docs_dir"]))
