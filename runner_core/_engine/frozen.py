"""Read-only JSON values: what listeners and callers get must not change what runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn


def _refuse(self: object, *args: Any, **kwargs: Any) -> NoReturn:
    raise TypeError(f"{type(self).__name__} is read-only")


class FrozenDict(dict[str, Any]):
    """A ``dict`` that refuses every change (still a dict for JSON and ``isinstance``)."""

    __slots__ = ()
    __setitem__ = __delitem__ = __ior__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse

    def __copy__(self) -> dict[str, Any]:
        return thaw(self)  # type: ignore[no-any-return]

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return thaw(self)  # type: ignore[no-any-return]

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (thaw(self),))


class FrozenList(list[Any]):
    """A ``list`` that refuses every change."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse

    def __copy__(self) -> list[Any]:
        return thaw(self)  # type: ignore[no-any-return]

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        return thaw(self)  # type: ignore[no-any-return]

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (thaw(self),))


_SCALARS = frozenset({str, int, float, bool, type(None)})


def freeze(value: Any) -> Any:
    """A deep read-only copy of a JSON-like value (already frozen parts are reused)."""
    kind = type(value)
    if kind in _SCALARS or kind is FrozenDict or kind is FrozenList:
        return value
    if kind is dict or isinstance(value, Mapping):
        return freeze_dict(value)
    if kind is list or kind is tuple or isinstance(value, list | tuple):
        return FrozenList([freeze(v) for v in value])
    return value


def freeze_dict(value: Mapping[str, Any]) -> FrozenDict:
    """``freeze`` for a mapping (the common flat one costs one copy)."""
    if type(value) is FrozenDict:
        return value
    if all(type(v) in _SCALARS for v in value.values()):
        return FrozenDict(value)
    return FrozenDict({str(k): freeze(v) for k, v in value.items()})


def thaw(value: Any) -> Any:
    """A deep mutable copy (plain dicts and lists) of a JSON-like value."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [thaw(v) for v in value]
    return value
