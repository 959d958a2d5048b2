"""What model calls cost: a price table per model (``AGENTWORKER_PRICES``) over token counts."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner_core import ConfigurationError, Usage

#: Prices are per this many tokens.
PER_TOKENS = 1_000_000


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens of one model; cached input falls back to the input price."""

    input: float = 0.0
    output: float = 0.0
    cached_input: float | None = None

    def cost(self, usage: Usage) -> float:
        """The cost of ``usage`` in USD (cached tokens at their own price)."""
        cached = usage.cached_input_tokens
        fresh = max(0, usage.input_tokens - cached)
        cached_price = self.input if self.cached_input is None else self.cached_input
        total = fresh * self.input + cached * cached_price + usage.output_tokens * self.output
        return total / PER_TOKENS


@dataclass(frozen=True, slots=True)
class Prices:
    """The table: model name to ``Price``; an unknown model has no cost (None)."""

    models: Mapping[str, Price]

    def cost(self, model: str | None, usage: Usage) -> float | None:
        """The cost of ``usage`` on ``model``, None when the table has no price for it."""
        price = self.models.get(model or "")
        return None if price is None else price.cost(usage)

    def __bool__(self) -> bool:
        return bool(self.models)


NO_PRICES = Prices({})


def prices_of(raw: str | None) -> Prices:
    """The table of ``AGENTWORKER_PRICES``: a JSON object, or the path of a JSON file."""
    if not raw or not raw.strip():
        return NO_PRICES
    text = raw if raw.lstrip().startswith("{") else _read(raw.strip())
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ConfigurationError(f"AGENTWORKER_PRICES is not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ConfigurationError("AGENTWORKER_PRICES must map model names to prices")
    return Prices({str(name): _price(str(name), entry) for name, entry in doc.items()})


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"AGENTWORKER_PRICES: cannot read {path!r}: {exc}") from None


def _price(name: str, entry: Any) -> Price:
    known = {"input", "output", "cached_input"}
    if not isinstance(entry, dict) or not set(entry) <= known:
        raise ConfigurationError(
            f"AGENTWORKER_PRICES[{name!r}]: an object of {', '.join(sorted(known))} (USD/1M)"
        )
    values = {k: v for k, v in entry.items()}
    if not all(isinstance(v, int | float) and v >= 0 for v in values.values()):
        raise ConfigurationError(f"AGENTWORKER_PRICES[{name!r}]: prices are numbers >= 0")
    return Price(**{k: float(v) for k, v in values.items()})


def usage_of(data: Mapping[str, Any]) -> Usage:
    """The usage a MODEL_COMPLETED event reports (counts it lacks are 0)."""
    return Usage(
        input_tokens=int(data.get("input_tokens") or 0),
        output_tokens=int(data.get("output_tokens") or 0),
        cached_input_tokens=int(data.get("cached_input_tokens") or 0),
        reasoning_tokens=int(data.get("reasoning_tokens") or 0),
    )


def dollars(cost: float | None) -> str:
    """A cost for people: ``$0.0123``; empty when unknown."""
    if cost is None:
        return ""
    return f"${cost:.4f}" if cost < 100 else f"${cost:,.2f}"
