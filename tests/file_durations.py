"""Per-file test durations that order the test files for the two xdist workers (longest first).

``tests/file_durations.json`` maps each test file to its summed setup + call + teardown seconds in one full
run. ``tests/conftest.py`` sorts the collected files by it, longest first, so the default run's two workers
take the long files (served deployments, the composition covering array, mypy) at the start and the short
ones fill in at the end: the last file to finish is a short one (longest-processing-time-first scheduling;
xdist's own reorder sorts by the number of tests, which puts the three-test, 100-second server file last).
Files missing from the table count as the median file. The numbers only order the files; no test reads them.

Refresh after a large change in the suite::

    .venv/bin/python -m pytest --junitxml=/tmp/junit.xml
    .venv/bin/python tests/file_durations.py /tmp/junit.xml
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

TABLE = Path(__file__).with_suffix(".json")


def from_junit(path: Path) -> dict[str, float]:
    """Summed seconds per test file (``tests/…/test_x.py``) from a pytest JUnit XML report."""
    totals: Counter[str] = Counter()
    for case in ET.parse(path).iter("testcase"):
        parts = [p for p in (case.get("classname") or "").split(".") if p and not p[:1].isupper()]
        totals["/".join(parts) + ".py"] += float(case.get("time") or 0.0)
    return {name: round(seconds, 1) for name, seconds in totals.most_common()}


if __name__ == "__main__":
    TABLE.write_text(json.dumps(from_junit(Path(sys.argv[1])), indent=1) + "\n")
    print(f"wrote {TABLE}")
