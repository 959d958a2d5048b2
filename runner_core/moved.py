"""Old module paths that still import: each name is the module it moved to, with a warning.

``import agentworker.eventstream`` (or ``python -m agentworker.health``) keeps working after
the regrouping listed in ``docs/upgrading.md``: the old name is bound to the very module
object of the new path (one module, one state), and importing it emits a
``DeprecationWarning`` naming the new path.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Mapping, Sequence
from types import CodeType, ModuleType


class _Alias(importlib.abc.Loader):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(
            f"{self.old} moved to {self.new}; import it from there",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the new module ran when ``create_module`` imported it."""

    def get_code(self, fullname: str) -> CodeType | None:
        """The new module's code, for ``python -m <old name>``."""
        spec = importlib.util.find_spec(self.new)
        loader = spec.loader if spec is not None else None
        get_code = getattr(loader, "get_code", None)
        return get_code(self.new) if get_code is not None else None


class _MovedFinder(importlib.abc.MetaPathFinder):
    def __init__(self, moved: Mapping[str, str]) -> None:
        self.moved = dict(moved)

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        new = self.moved.get(fullname)
        if new is None:
            return None
        return importlib.util.spec_from_loader(fullname, _Alias(fullname, new))


def alias_moved_modules(moved: Mapping[str, str]) -> None:
    """Let each old module name of ``moved`` import the module it moved to (once per table)."""
    if any(isinstance(f, _MovedFinder) and f.moved == dict(moved) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _MovedFinder(moved))
