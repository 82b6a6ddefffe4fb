"""The README's "Python API" section runs as written (#23 part 1), and so do the front door's docstring examples.

The section's ``>>>`` examples are one doctest (names carry over from block to block); its ``crowdflow ...``
command is run first through the CLI, in a folder where ``crowdflow/data`` is the bundled data, as from the
repository root. A drifted output, a renamed function or a changed command fails here.
"""

from __future__ import annotations

import doctest
import importlib
import re
import shlex
from pathlib import Path

import pytest

import crowdflow

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "## Python API"


def _section() -> str:
    text = README.read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return text[start : end if end >= 0 else len(text)]


@pytest.mark.flow
@pytest.mark.usefixtures("prefect_harness")
def test_readme_python_api_section_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flows.cli import main

    section = _section()
    (tmp_path / "crowdflow").mkdir()
    (tmp_path / "crowdflow" / "data").symlink_to(Path(crowdflow.__file__).parent / "data")
    monkeypatch.chdir(tmp_path)
    commands = re.findall(r"^crowdflow (.+)$", section, flags=re.MULTILINE)
    assert commands, "the section shows the command that makes the run it reads"
    for command in commands:
        assert main(shlex.split(command)) == 0, command
    test = doctest.DocTestParser().get_doctest(section, {}, "README.md#python-api", str(README), 0)
    assert len(test.examples) >= 10
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} README example(s) failed (the output above shows which)"


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
