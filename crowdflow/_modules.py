"""Job packages that are also functions: ``crowdflow.skills`` is the skills package *and* its front door.

So ``crowdflow.skills(df)`` and ``crowdflow.skills.fit_skills`` both work (same for ``personal_rankings`` and
``personal_models``). Imports nothing of the library, so any package may use it.
"""

from __future__ import annotations

import inspect
import sys
import types
from collections.abc import Callable
from typing import Any


class _CallablePackage(types.ModuleType):
    """A job package that is also its front-door function (``crowdflow.skills(labels, ...)``)."""

    __front_door__: Callable[..., Any]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.__front_door__(*args, **kwargs)


def callable_package(module_name: str, front_door: Callable[..., Any]) -> None:
    """Make the package ``module_name`` callable as ``front_door`` (its signature shows in ``help`` and IDEs).

    The package stays a package: ``crowdflow.skills.fit_skills``, ``import crowdflow.skills.fit`` and pickling
    by module name work as before; only ``crowdflow.skills(...)`` is added.
    """
    module = sys.modules[module_name]
    module.__class__ = _CallablePackage
    module.__front_door__ = front_door  # type: ignore[attr-defined]  # set on the instance, typed on the class
    module.__signature__ = inspect.signature(front_door)  # type: ignore[attr-defined]  # read by inspect.signature
