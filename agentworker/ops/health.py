"""Container health checks that need no shell tools: ``python -m agentworker.ops.health ...``.

``http URL``: healthy when the server answers at all (any HTTP status: the API wants a
token, Flower a password). ``beat FILE``: healthy when beat wrote its schedule file in the
last ``BEAT_STALE_SECONDS`` (it does at start and every few minutes while it runs).
Exit status 0 is healthy, 1 is not, with one line saying why.
"""

from __future__ import annotations

import glob
import os
import sys
import time
import urllib.error
import urllib.request

BEAT_STALE_SECONDS = 400.0
"""Beat syncs its schedule every 180 s while it sends tasks; twice that and a margin."""


def http_answers(url: str, timeout: float = 4.0) -> str | None:
    """None when ``url`` answers with any HTTP status, else why not."""
    try:
        with urllib.request.urlopen(url, timeout=timeout):
            return None
    except urllib.error.HTTPError:
        return None
    except (urllib.error.URLError, OSError) as exc:
        return f"{url} does not answer: {exc}"


def beat_is_fresh(path: str, stale_after: float = BEAT_STALE_SECONDS) -> str | None:
    """None when beat's schedule file (any dbm suffix) changed recently, else why not."""
    files = glob.glob(glob.escape(path) + "*")
    if not files:
        return f"no beat schedule at {path}"
    age = time.time() - max(os.path.getmtime(f) for f in files)
    return None if age <= stale_after else f"beat schedule {path} is {age:.0f} s old"


def main(argv: list[str]) -> int:
    """Run one check; print why it failed."""
    if len(argv) != 2 or argv[0] not in ("http", "beat"):
        print("usage: python -m agentworker.ops.health (http URL | beat SCHEDULE_FILE)")
        return 2
    problem = http_answers(argv[1]) if argv[0] == "http" else beat_is_fresh(argv[1])
    if problem:
        print(problem)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
