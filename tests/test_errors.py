"""Every exception turnwatch raises derives from ``TurnwatchError`` (httpx's ``HTTPError`` is the
model), keeping its stdlib base where it has one: an embedder catches turnwatch's errors in one
clause, or as the stdlib kind they are."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import turnwatch
from turnwatch.runtime import TurnwatchError


def turnwatch_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for mod in pkgutil.walk_packages(turnwatch.__path__, "turnwatch."):
        if mod.name.endswith("__main__"):
            continue  # running it is the command line
        module = importlib.import_module(mod.name)
        for name, obj in vars(module).items():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__ == module.__name__
            ):
                found[f"{module.__name__}.{name}"] = obj
    return found


def test_every_exception_derives_from_turnwatch_error() -> None:
    found = turnwatch_exceptions()
    assert len(found) >= 16  # the walk found the package's exceptions, not none
    assert [n for n, cls in found.items() if not issubclass(cls, TurnwatchError)] == []


def test_an_exception_keeps_its_stdlib_base() -> None:
    from turnwatch.integrations.wrappers import ToolClassError
    from turnwatch.runtime import UnknownSessionError
    from turnwatch.runtime.tools.containment import ContainmentError

    assert issubclass(UnknownSessionError, LookupError)
    assert issubclass(ToolClassError, ValueError)
    assert issubclass(ContainmentError, RuntimeError)
