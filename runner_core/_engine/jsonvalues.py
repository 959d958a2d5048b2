"""JSON-clean values: what the stores keep is checked once, naming the first bad key."""

from __future__ import annotations

from typing import Any, NoReturn

from runner_core.errors import InvalidArgumentError, shorten

#: How deeply JSON values may nest (a document deeper than this is refused, never recursed
#: into until the interpreter's stack runs out).
MAX_JSON_DEPTH = 100


def validate_json(value: Any, field: str) -> Any:
    """Return a JSON-clean copy of ``value`` (dicts with string keys, lists, finite numbers).

    ``InvalidArgumentError`` (``field=field``) names the first key or index that is not,
    or the first that nests deeper than ``MAX_JSON_DEPTH``.
    """
    return _json_value(value, field, "", 0)


def _json_value(value: Any, field: str, path: str, depth: int) -> Any:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            _not_json(field, path, f"{value} is not valid JSON")
        return value
    if depth == MAX_JSON_DEPTH and isinstance(value, list | tuple | dict):
        _not_json(field, path, f"nested deeper than {MAX_JSON_DEPTH} levels")
    depth += 1
    if isinstance(value, list | tuple):
        return [_json_value(v, field, f"{path}[{i}]", depth) for i, v in enumerate(value)]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                _not_json(field, f"{path}.{shorten(k)}".lstrip("."), "keys must be strings")
            out[k] = _json_value(v, field, f"{path}.{k}" if path else k, depth)
        return out
    _not_json(field, path, f"{type(value).__name__} is not JSON-serializable")


def _not_json(field: str, path: str, why: str) -> NoReturn:
    where = f"{field} key {shorten(path)}" if path else field
    raise InvalidArgumentError(f"{where}: {why}", field=field)
