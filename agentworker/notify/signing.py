"""Standard Webhooks signatures: the one HMAC both directions use (no web framework needed).

A message is signed as ``v1,<base64 HMAC-SHA256 of f"{id}.{timestamp}.{body}">`` under the
secret's key; a secret ``whsec_<base64>`` is the base64 of its key (any other string is
used as its UTF-8 bytes).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac

from runner_core.errors import ConfigurationError

SECRET_PREFIX = "whsec_"


def secret_key(secret: str) -> bytes:
    """The HMAC key of a signing secret: ``whsec_<base64>`` decoded, else its UTF-8 bytes."""
    if secret.startswith(SECRET_PREFIX):
        try:
            key = base64.b64decode(secret[len(SECRET_PREFIX) :] + "==", validate=False)
        except (binascii.Error, ValueError):
            raise ConfigurationError("a whsec_ secret must be base64 after the prefix") from None
        if key:
            return key
    if not secret:
        raise ConfigurationError("a signing secret may not be empty")
    return secret.encode()


def sign(secret: bytes | str, message_id: str, timestamp: int | str, body: bytes) -> str:
    """The ``webhook-signature`` value of a message: ``v1,<base64 HMAC-SHA256>``."""
    key = secret.encode() if isinstance(secret, str) else secret
    message = f"{message_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, message, hashlib.sha256).digest()).decode()
