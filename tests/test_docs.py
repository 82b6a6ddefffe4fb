"""The documentation runs as written (issue #37): the site builds with warnings as errors, and every code block of
README.md and docs/ is executed.

How each block is executed, by its fence language:

- ``python`` with ``>>>``: one doctest per page (names carry over from block to block, in page order); without
  ``>>>``: run with ``exec`` in that page's namespace;
- ``bash``/``sh``/``console``: every command line is a ``crowdflow ...`` command, run through the CLI
  (``flows.cli.main``) and expected to exit 0;
- ``yaml``: a pipeline spec (each ``---`` document) is validated by the spec models; one whose inputs exist is
  also checked by ``crowdflow validate``; a fragment (no ``name``) is validated inside a minimal spec.

Each page runs in its own folder where ``crowdflow/data`` and ``deployments`` are the repository's, as from the
repository root. A block that cannot run here says so with a tag on the line before its fence, which this test
honours and lists (``pytest -s`` prints the list):

- ``<!-- docs-test: install: REASON -->``: one of the README's two install commands; its ``crowdflow`` part is run,
  and ``.ci/run`` must end with exactly the test command;
- ``<!-- docs-test: synopsis -->``: a command synopsis; each ``crowdflow COMMAND`` must exist and each ``--flag``
  must be accepted by that command's parser;
- ``<!-- docs-test: prefect-yaml -->``: a fragment of ``deployments/prefect.yaml``; it must be found in that file;
- ``<!-- docs-test: skip: REASON -->``: needs what a test here cannot have (a Prefect server, a database server, a
  remote cluster) or shows output; the reason is required and names the test that covers it, if any.

Blocks without a language (formulas, trees, sample output) hold no command: a line that starts with
``crowdflow``, ``$`` or ``>>>`` in one fails this test.
"""

from __future__ import annotations

import contextlib
import doctest
import importlib
import io
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

import crowdflow

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TEST_COMMAND = (
    "python3 -m venv .venv && .venv/bin/pip install -c constraints.txt -e '.[test]' && .venv/bin/python -m pytest"
)
DEMO_COMMAND = (
    "python3 -m venv .venv && .venv/bin/pip install -c constraints.txt -e '.[report]' "
    "&& .venv/bin/crowdflow demo --out crowdflow-out"
)
_TAG = re.compile(r"<!--\s*docs-test:\s*([a-z-]+)\s*:?\s*(.*?)\s*-->")
_FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    code: str
    tag: str | None
    reason: str

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line} ({self.lang or 'text'})"


def pages() -> list[Path]:
    docs = sorted(p for p in (ROOT / "docs").rglob("*.md") if "hooks" not in p.parts)
    return [README, *docs]


def blocks(page: Path) -> list[Block]:
    lines = page.read_text().split("\n")
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.groups()
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            j += 1
        code = "\n".join(ln[len(indent) :] if ln.startswith(indent) else ln for ln in lines[i + 1 : j])
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        tag = _TAG.search(lines[k]) if k >= 0 else None
        out.append(Block(page, i + 1, lang.lower(), code, tag.group(1) if tag else None, tag.group(2) if tag else ""))
        i = j + 1
    return out


ALL = [b for p in pages() for b in blocks(p)]
TAGGED = [b for b in ALL if b.tag is not None]


def test_tags_are_known_and_justified() -> None:
    for b in TAGGED:
        assert b.tag in {"install", "synopsis", "prefect-yaml", "skip"}, f"{b}: unknown tag {b.tag!r}"
        if b.tag in {"skip", "install"}:
            assert len(b.reason) >= 20, f"{b}: a {b.tag} tag needs its reason"
    print("\nblocks not executed as written (tag: reason):")
    for b in TAGGED:
        print(f"  {b}: {b.tag}: {b.reason}")


def test_text_blocks_hold_no_command() -> None:
    for b in ALL:
        if b.lang in {"", "text"} and b.tag is None:
            bad = [ln for ln in b.code.split("\n") if re.match(r"\s*(crowdflow |\$ |>>> )", ln)]
            assert not bad, f"{b}: commands in a block that is not run: {bad[:3]} (fence it as bash/python, or tag it)"


def test_every_block_has_a_way_to_run() -> None:
    runnable = {"python", "py", "bash", "sh", "shell", "console", "yaml", "yml", "", "text"}
    for b in ALL:
        assert b.tag is not None or b.lang in runnable, f"{b}: language {b.lang!r} is neither run nor tagged"


def test_readme_is_a_first_visit() -> None:
    text = README.read_text()
    assert len(text.split("\n")) <= 150
    for command in (DEMO_COMMAND, TEST_COMMAND):
        assert f"```bash\n{command}\n```" in text, "the README's two commands changed"
    last = [ln for ln in (ROOT / ".ci" / "run").read_text().split("\n") if ln.strip()][-1]
    assert last == TEST_COMMAND, ".ci/run must end with exactly the README's test command"


def test_synopsis_blocks_match_the_parser() -> None:
    from flows.cli import JOB_COMMANDS, build_parser

    checked = 0
    for b in (b for b in TAGGED if b.tag == "synopsis"):
        for line in b.code.split("\n"):
            m = re.match(r"crowdflow (\S+)", line)
            if m and not m.group(1).startswith("-"):
                command = m.group(1)
            elif not line.startswith(" ") or not line.strip():
                continue
            parser = build_parser(command if command in JOB_COMMANDS else "")
            sub = next(a for a in parser._actions if a.dest == "command")
            assert command in sub.choices, f"{b}: no command {command!r}"  # type: ignore[attr-defined]
            known = set(sub.choices[command]._option_string_actions)  # type: ignore[attr-defined]
            for flag in re.findall(r"(--[a-z][a-z0-9-]*)", line.split("  ")[0] if "   " in line else line):
                assert flag in known, f"{b}: crowdflow {command} has no flag {flag}"
                checked += 1
    assert checked >= 20 or not any(b.tag == "synopsis" for b in TAGGED)


def _contains(big: Any, small: Any) -> bool:
    if isinstance(small, dict):
        if isinstance(big, dict) and all(k in big and _contains(big[k], v) for k, v in small.items()):
            return True
    elif isinstance(small, list):
        if isinstance(big, list) and all(any(_contains(x, s) for x in big) for s in small):
            return True
    elif big == small:
        return True
    if isinstance(big, dict):
        return any(_contains(v, small) for v in big.values())
    if isinstance(big, list):
        return any(_contains(v, small) for v in big)
    return False


def test_prefect_yaml_fragments_are_in_the_deployments_file() -> None:
    deployments = yaml.safe_load((ROOT / "deployments" / "prefect.yaml").read_text())
    for b in (b for b in TAGGED if b.tag == "prefect-yaml"):
        assert _contains(deployments, yaml.safe_load(b.code)), f"{b}: not found in deployments/prefect.yaml"


# ------------------------------------------------------------------------------------------------ run the pages


def _workdir(tmp: Path) -> Path:
    (tmp / "crowdflow").mkdir()
    (tmp / "crowdflow" / "data").symlink_to(Path(crowdflow.__file__).parent / "data")
    (tmp / "deployments").symlink_to(ROOT / "deployments")
    return tmp


def _run_shell(b: Block, commands: list[str]) -> None:
    from flows.cli import main

    for command in commands:
        words = shlex.split(command)
        assert words[0] == "crowdflow", f"{b}: {command!r} is not a crowdflow command (tag the block)"
        assert main(words[1:]) == 0, f"{b}: {command}"


def _shell_lines(code: str) -> list[str]:
    return [ln.strip() for ln in code.split("\n") if ln.strip() and not ln.strip().startswith("#")]


_BASE = {"name": "docs-fragment", "job": "skills", "labels": {"path": "crowdflow/data/snow_rte/labels.csv"}}
_FRAGMENT_JOB = {"comparisons": "ranking", "agents": "personal_models", "candidates": "assignment"}


def _check_yaml(b: Block, where: Path) -> None:
    from crowdflow.spec import parse_spec
    from flows.cli import main

    for doc in yaml.safe_load_all(b.code):
        assert isinstance(doc, dict), f"{b}: not a mapping"
        if "name" in doc:
            spec = parse_spec(doc, origin=str(b), base_dir=where)
            if all(spec.path_of(src).exists() for src in spec.inputs().values() if not src.is_query and not src.is_url):
                path = where / f"docs-{b.line}.yaml"
                path.write_text(yaml.safe_dump(doc))
                assert main(["validate", str(path)]) == 0, f"{b}: crowdflow validate failed"
        else:
            job = next((j for k, j in _FRAGMENT_JOB.items() if k in doc), "skills")
            base = dict(_BASE) if job == "skills" else {"name": "docs-fragment", "job": job}
            if job == "ranking" and "comparisons" not in doc:
                base["comparisons"] = {"path": "c.csv"}
            parse_spec({**base, **doc}, origin=str(b), base_dir=where)


def _run_page(page: Path, where: Path) -> int:
    todo = [b for b in blocks(page) if b.tag not in {"skip", "synopsis", "prefect-yaml"}]
    globs: dict[str, Any] = {"__name__": f"docs:{page.name}"}
    ran = 0
    for b in todo:
        if b.tag == "install":
            assert b.code.strip() in (DEMO_COMMAND, TEST_COMMAND), f"{b}: not one of the README's two commands"
            parts = [p.strip() for p in b.code.split("&&") if "bin/crowdflow " in p]
            _run_shell(b, [p.split("bin/", 1)[1] for p in parts])
        elif b.lang in {"python", "py"} and ">>>" in b.code:
            test = doctest.DocTestParser().get_doctest(b.code, globs, str(b), str(page), b.line)
            runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
            runner.run(test, clear_globs=False)
            globs.update(test.globs)  # a DocTest works on a copy: carry its names to the next block
            assert runner.summarize(verbose=False).failed == 0, f"{b}: example failed (the output above shows which)"
        elif b.lang in {"python", "py"}:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(b.code, str(b), "exec"), globs)
        elif b.lang in {"bash", "sh", "shell", "console"}:
            _run_shell(b, _shell_lines(b.code))
        elif b.lang in {"yaml", "yml"}:
            _check_yaml(b, where)
        else:
            continue
        ran += 1
    return ran


RUN_PAGES = [p for p in pages() if any(b.tag not in {"skip", "synopsis", "prefect-yaml"} for b in blocks(p))]


@pytest.mark.flow
@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.parametrize("page", RUN_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_page_code_runs(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(_workdir(tmp_path))
    _run_page(page, tmp_path)


@pytest.mark.parametrize(
    "module",
    [
        "crowdflow.skills.door",
        "crowdflow.ranking.door",
        "crowdflow.personal_rankings.door",
        "crowdflow.personal_models.door",
        "crowdflow.assignment.door",
        "crowdflow.frontdoor.estimators",
    ],
)
def test_front_door_docstring_examples_run(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


# ------------------------------------------------------------------------------------------------ the site

MKDOCS = shutil.which("mkdocs", path=str(Path(sys.executable).parent))


@pytest.mark.skipif(MKDOCS is None, reason="mkdocs is not installed (the docs and test extras install it)")
def test_site_builds_strict(tmp_path: Path) -> None:
    """``mkdocs build --strict``: a broken link, a missing page, a bad snippet or API reference is an error."""
    proc = subprocess.run(
        [str(MKDOCS), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    site = tmp_path / "site"
    cli = (site / "reference" / "cli" / "index.html").read_text()
    assert "crowdflow next-batch" in cli and "--max-skills-run-age-hours" in cli  # generated from the parser
    spec = (site / "reference" / "spec" / "index.html").read_text()
    assert "max_skills_run_age_hours" in spec and "SkillsOptions" in spec  # generated from the models
    api = (site / "reference" / "api" / "index.html").read_text()
    assert "fit_predict" in api and "latest_run" in api  # mkdocstrings
    for result in (ROOT / "benchmarks" / "results").glob("*.md"):
        page = (site / "benchmarks" / result.stem / "index.html").read_text()
        first = result.read_text().strip().split("\n", 1)[0].lstrip("# ").split("`")[0][:30]
        assert first.split("(")[0].strip()[:20] in page, f"benchmark page {result.stem} does not include its file"
    assert "--8<--" not in "".join(p.read_text() for p in site.rglob("*.html"))
