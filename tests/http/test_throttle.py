"""The failure throttle of the HTTP API on its own: a sliding minute per client address."""

from __future__ import annotations

import pytest

from agentworker.http.errors import ApiError
from agentworker.http.throttle import FailureThrottle


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_failures_past_the_limit_wait_for_the_oldest_to_leave_the_minute() -> None:
    clock = Clock()
    throttle = FailureThrottle(per_minute=3, clock=clock)
    for step in (0.0, 10.0, 20.0):
        clock.now += step
        throttle.check("a")
        throttle.failed("a")
    with pytest.raises(ApiError) as refused:
        throttle.check("a")
    assert refused.value.status == 429
    assert refused.value.retry_after == pytest.approx(30.0)  # the first failure, 30 s on
    throttle.check("b")  # another address is not affected
    clock.now += 30.01
    throttle.check("a")  # the first failure left the window: one more try
    throttle.failed("a")
    with pytest.raises(ApiError):
        throttle.check("a")


def test_it_holds_a_bounded_number_of_addresses_and_zero_means_no_limit() -> None:
    throttle = FailureThrottle(per_minute=1, max_clients=2)
    for address in ("a", "b", "c"):
        throttle.failed(address)
    throttle.check("a")  # the least recently failed was forgotten
    with pytest.raises(ApiError):
        throttle.check("c")
    off = FailureThrottle(per_minute=0)
    for _ in range(100):
        off.failed("a")
    off.check("a")
