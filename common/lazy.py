"""A module imported at its first use, for a feature's live half: the command's pure sub-commands
(``analyze``, ``plot``, ``check``) import every feature and workload but run none of their live
hooks, so they run without the live stack (pyroute2, Mininet, os-ken) installed. Pure: the
standard library only."""
from __future__ import annotations

import importlib
import sys
from types import ModuleType


class _Deferred(ModuleType):
    """Stands for module ``__name__`` until an attribute is read or set, then imports it and hands
    every attribute access to it (a test's monkeypatch reaches the real module)."""

    def _module(self) -> ModuleType:
        return importlib.import_module(self.__name__)

    def __getattr__(self, attr: str):
        return getattr(self._module(), attr)

    def __setattr__(self, attr: str, value) -> None:
        setattr(self._module(), attr, value)

    def __delattr__(self, attr: str) -> None:
        delattr(self._module(), attr)

    @property
    def __dict__(self) -> dict:      # the module's own namespace (what a test's monkeypatch reads and restores)
        return self._module().__dict__

    def __repr__(self) -> str:
        return f"<module {self.__name__!r}, imported at its first use>"


def lazy_module(name: str) -> ModuleType:
    """The module ``name`` if it is imported already, else a stand-in that imports it at the first
    attribute read or write (nothing is imported now, not even its parent packages).

    Raises (at that first use): ModuleNotFoundError or the module's own import error.
    """
    return sys.modules.get(name) or _Deferred(name)
