"""What every HTTP model adapter reads off a failed request, whatever its SDK.

``parse_retry_after`` gives the least delay a server asked for; ``cause`` names the
underlying exception of a timeout or a refused connection.
"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Mapping
from datetime import UTC


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or HTTP date)."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        raw = headers.get(name)
        if raw is None:
            continue
        seconds = _float(raw)
        if seconds is None and scale == 1.0:
            seconds = _seconds_until(raw)
        if seconds is not None and math.isfinite(seconds):
            return max(0.0, seconds * scale)
    return None


def cause(err: BaseException) -> str:
    """The error, and the exception under it when there is one."""
    under = err.__cause__
    return f"{err} ({type(under).__name__}: {under})" if under else str(err)


def _float(raw: str) -> float | None:
    try:
        return float(raw.strip())
    except ValueError:
        return None


def _seconds_until(http_date: str) -> float | None:
    try:
        when = email.utils.parsedate_to_datetime(http_date)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # "-0000" means UTC with no claim about the local zone
        when = when.replace(tzinfo=UTC)
    return when.timestamp() - time.time()
