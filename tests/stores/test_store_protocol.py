"""Both stores are the whole ``AgentTurnStore`` protocol, quarantine included."""

from __future__ import annotations

import inspect

import pytest

from runner_core import AgentTurnStore, InMemoryAgentTurnStore, TurnNotFoundError
from stores import RedisAgentTurnStore


def protocol_methods() -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in vars(AgentTurnStore).items()
        if callable(member) and not name.startswith("_")
    }


def test_the_protocol_names_quarantine() -> None:
    methods = protocol_methods()

    assert {"quarantine", "quarantined"} <= methods.keys()
    assert list(methods["quarantine"].parameters) == ["self", "turn_id", "reason"]
    assert list(methods["quarantined"].parameters) == ["self", "limit"]


@pytest.mark.parametrize("cls", [InMemoryAgentTurnStore, RedisAgentTurnStore])
def test_every_store_has_every_method_with_its_parameters(cls: type) -> None:
    for name, wanted in protocol_methods().items():
        method = getattr(cls, name, None)
        assert callable(method), f"{cls.__name__} has no {name}"
        have = inspect.signature(method).parameters
        assert list(have) == list(wanted.parameters), f"{cls.__name__}.{name}"
        for param in wanted.parameters.values():
            assert have[param.name].default == param.default, f"{cls.__name__}.{name}"


def test_quarantine_through_the_protocol(store: AgentTurnStore) -> None:
    from tests.support.commits import save
    from tests.support.stores import snap

    turn = snap()
    save(store, turn, -1)
    assert store.quarantined() == []

    assert store.quarantine(turn.id, "spoiled") is True
    assert store.quarantine(turn.id, "again") is False

    [(turn_id, reason, when)] = store.quarantined(limit=10)
    assert (turn_id, reason) == (turn.id, "spoiled")
    assert abs(when - store.now()) < 60
    assert store.quarantined(limit=0) == []


def test_quarantining_an_unknown_turn_is_turn_not_found(store: AgentTurnStore) -> None:
    with pytest.raises(TurnNotFoundError):
        store.quarantine("no-such-turn", "spoiled")
    assert store.quarantined() == []
