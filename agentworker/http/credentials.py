"""Credentials of the HTTP API: bearer tokens and signing secrets, each with a tenant and scopes.

``AGENTWORKER_CREDENTIALS`` is a JSON list; each entry has either ``token`` (a bearer token)
or ``secret`` (a Standard Webhooks signing secret, ``whsec_<base64>``), a ``tenant`` (``"*"``
acts for every tenant: operators) and ``scopes`` (``read``, ``write``, ``approve``). Several
entries may share a tenant: that is how a credential is rotated (add the new one, move the
callers, drop the old one). The older ``AGENTWORKER_API_TOKEN`` and
``AGENTWORKER_WEBHOOK_SECRET`` still work: the token as ``{"tenant": "*", "scopes": [all]}``,
the secret as ``{"tenant": "*", "scopes": ["write", "approve"]}``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal

from agentworker.notify.signing import SECRET_PREFIX, secret_key
from runner_core.errors import ConfigurationError

Scope = Literal["read", "write", "approve"]
SCOPES: frozenset[str] = frozenset({"read", "write", "approve"})
#: The tenant of a credential that acts for every tenant.
ANY_TENANT = "*"
__all__ = ["ANY_TENANT", "SECRET_PREFIX", "Credential", "parse_credentials", "secret_key"]


@dataclass(frozen=True)
class Credential:
    """One configured credential: what it is, whom it acts for and what it may do."""

    kind: Literal["token", "secret"]
    #: The token's text, or the secret's key bytes (decoded from ``whsec_<base64>``).
    value: bytes
    tenant: str
    scopes: frozenset[str]
    #: A label for logs and the delivery log (never the credential itself).
    name: str

    def allows(self, scope: str) -> bool:
        """True when the credential carries ``scope``."""
        return scope in self.scopes


def parse_credentials(raw: str | None) -> list[Credential]:
    """The entries of ``AGENTWORKER_CREDENTIALS``; ``ConfigurationError`` naming a bad one."""
    if raw is None or not raw.strip():
        return []
    try:
        entries = json.loads(raw)
    except ValueError:
        raise ConfigurationError("AGENTWORKER_CREDENTIALS is not valid JSON") from None
    if not isinstance(entries, list):
        raise ConfigurationError("AGENTWORKER_CREDENTIALS must be a JSON list")
    return [_entry(n, entry) for n, entry in enumerate(entries)]


def _entry(n: int, entry: object) -> Credential:
    where = f"AGENTWORKER_CREDENTIALS[{n}]"
    if not isinstance(entry, dict):
        raise ConfigurationError(f"{where} must be an object")
    tenant, scopes = entry.get("tenant"), entry.get("scopes")
    if not isinstance(tenant, str) or not tenant:
        raise ConfigurationError(f"{where}: 'tenant' must be a non-empty string ('*': all)")
    if not isinstance(scopes, list) or not scopes or not set(scopes) <= SCOPES:
        raise ConfigurationError(f"{where}: 'scopes' must list some of {sorted(SCOPES)}")
    name = str(entry.get("name") or f"{tenant}#{n}")
    token, secret = entry.get("token"), entry.get("secret")
    if isinstance(token, str) and token and secret is None:
        return Credential("token", token.encode(), tenant, frozenset(scopes), name)
    if isinstance(secret, str) and secret and token is None:
        return Credential("secret", secret_key(secret), tenant, frozenset(scopes), name)
    raise ConfigurationError(f"{where}: give exactly one of 'token' or 'secret'")


def legacy_credentials(token: str | None, secret: str | None) -> list[Credential]:
    """``AGENTWORKER_API_TOKEN`` and ``AGENTWORKER_WEBHOOK_SECRET`` as operator credentials."""
    found = []
    if token:
        found.append(Credential("token", token.encode(), ANY_TENANT, SCOPES, "api_token"))
    if secret:
        scopes = frozenset({"write", "approve"})
        found.append(Credential("secret", secret_key(secret), ANY_TENANT, scopes, "webhook_secret"))
    return found
