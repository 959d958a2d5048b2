"""A 409 about a request id cuts the id it echoes, whatever its length."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable

import pytest
from redis import asyncio as aioredis

from agentworker.http.auth import Caller, RequestLedger, StoredResponse
from agentworker.http.errors import ApiError
from tests.support.servers import RedisServer

pytestmark = pytest.mark.redis

HUGE = "r" * 100_000


def refusal(server: RedisServer, request_id: str, finish: bool) -> ApiError:
    async def scenario(ledger: RequestLedger) -> ApiError:
        caller = Caller("token", "acme", frozenset({"write"}), "test", request_id)
        assert await ledger.begin(caller, "fp") is None
        if finish:
            await ledger.finish(caller, "fp", StoredResponse(200, {}))
            other = "another request"
        else:
            other = "fp"
        with pytest.raises(ApiError) as caught:
            await ledger.begin(caller, other)
        return caught.value

    return run(server, scenario)


def run(server: RedisServer, scenario: Callable[[RequestLedger], Awaitable[ApiError]]) -> ApiError:
    async def main() -> ApiError:
        client = aioredis.Redis.from_url(server.url)
        try:
            return await scenario(RequestLedger(client, "ns-" + uuid.uuid4().hex[:6], 60))
        finally:
            await client.aclose()

    return asyncio.run(main())


@pytest.mark.parametrize(
    ("finish", "said"), [(True, "already used"), (False, "still being processed")]
)
def test_a_huge_request_id_is_cut_in_the_409(server: RedisServer, finish: bool, said: str) -> None:
    error = refusal(server, HUGE, finish)

    assert error.status == 409 and said in str(error.message)
    assert len(str(error.message)) < 200, str(error.message)[:300]
    assert "100000 chars" in str(error.message)


def test_a_short_request_id_is_shown_whole(server: RedisServer) -> None:
    assert "'r-1'" in str(refusal(server, "r-1", True).message)
