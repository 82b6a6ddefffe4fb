"""Names that become one path component: pipeline names, run ids, output table names.

One rule, kept here (not in :mod:`crowdflow.spec`) so the readers and writers of :mod:`crowdflow.storage.io` can
use it without importing the spec models and, through them, every job package.
"""

from __future__ import annotations

import re

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"


def check_name(name: str, what: str = "name") -> str:
    """A pipeline name or run id that is safe as one path component, or ``ValueError`` saying why.

    1-128 characters of ``A-Z a-z 0-9 _ - .``, starting with a letter or digit: no ``/`` or ``\\``, no
    ``..``, no absolute path, no NUL, nothing a shell or a file system treats specially.
    """
    if not isinstance(name, str) or re.fullmatch(NAME_PATTERN, name) is None:
        shown = repr(name) if len(str(name)) <= 60 else repr(str(name)[:60]) + "..."
        why = ""
        if isinstance(name, str):
            if "\x00" in name:
                why = " (contains a NUL byte)"
            elif "/" in name or "\\" in name or name.startswith(("~", ".")):
                why = " (a name is one folder, not a path)"
            elif len(name) > 128:
                why = f" ({len(name)} characters, at most 128)"
        raise ValueError(
            f"invalid {what} {shown}{why}: use 1-128 letters, digits, '_', '-', '.', starting with a letter or digit"
        )
    return name
