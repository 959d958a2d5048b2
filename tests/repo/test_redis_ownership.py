"""``stores/`` owns Redis: agentworker builds no Redis key and imports only ``stores.redis``.

Every key is built by ``stores.redis.keys.Keyspace`` (DESIGN "Layout"); a key family
written by hand in agentworker is how the webhook outbox, beat's gate and the request
ledger once drifted away from the store's keyspace documentation.
"""

from __future__ import annotations

import ast
from pathlib import Path

import stores.redis

ROOT = Path(__file__).resolve().parents[2]
#: Pieces of the namespace's key families: a string built with one of them is a key.
KEY_MARKERS = (
    ":wh:",
    ":sweep:",
    ":http:",
    ":stream",
    ":ev:",
    ":turn:",
    ":due:",
    ":partitions",
    ":retained",
    ":runnable",
)


def _has_marker(value: object) -> bool:
    return isinstance(value, str) and any(marker in value for marker in KEY_MARKERS)


def _built_keys(tree: ast.AST) -> list[int]:
    """Lines where a string with a key marker is formatted or concatenated."""
    lines = []
    for node in ast.walk(tree):
        pieces: list[ast.expr] = []
        if isinstance(node, ast.JoinedStr):
            pieces = list(node.values)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mod):
            pieces = [node.left, node.right]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("format", "join"):
                pieces = [node.func.value]
        if any(isinstance(p, ast.Constant) and _has_marker(p.value) for p in pieces):
            lines.append(node.lineno)
    return lines


def _private_imports(tree: ast.AST) -> list[str]:
    """Imports of ``stores.redis`` modules, or of names ``stores.redis`` does not export."""
    found = []
    exported = set(stores.redis.__all__)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("stores.redis.")]
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            if node.module.startswith("stores.redis."):
                found.append(node.module)
            elif node.module == "stores.redis":
                found += [f"stores.redis.{a.name}" for a in node.names if a.name not in exported]
    return found


def offences(source: str) -> list[str]:
    """What in one module breaks the rule, as printable lines."""
    tree = ast.parse(source)
    built = [f"line {n}: builds a Redis key" for n in _built_keys(tree)]
    return built + [f"imports {name} (not exported)" for name in _private_imports(tree)]


def test_the_check_sees_a_hand_built_key_and_a_private_import() -> None:
    assert offences('key = f"{ns}:wh:due"\n') == ["line 1: builds a Redis key"]
    assert offences('key = ns + ":sweep:pending"\n') == ["line 1: builds a Redis key"]
    assert offences('key = "%s:http:request:%s" % (ns, rid)\n')
    assert offences("from stores.redis.keys import Keyspace\n") == [
        "imports stores.redis.keys (not exported)"
    ]
    assert offences("from stores.redis import Scanner\n")
    assert offences('"""Keys like ``ns:wh:d:<id>`` are documented, not built."""\n') == []
    assert offences("from stores.redis import Keyspace, make_client\n") == []


def test_agentworker_builds_no_redis_key_and_imports_only_what_stores_redis_exports() -> None:
    found = {
        str(path.relative_to(ROOT)): problems
        for path in sorted((ROOT / "agentworker").rglob("*.py"))
        if (problems := offences(path.read_text(encoding="utf-8")))
    }
    assert found == {}


def test_stores_redis_exports_a_sorted_list() -> None:
    assert list(stores.redis.__all__) == sorted(stores.redis.__all__)
