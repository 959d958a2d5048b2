"""Stream entries waiting for the next commit: taken once, in order, or sent soon by a thread."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Sequence

from stores.redis.riders import Command, StreamRiders


class Sent:
    """The thread's sends, each a list of commands; ``gate`` can hold a send midway."""

    def __init__(self) -> None:
        self.batches: list[list[Command]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.sending = threading.Event()

    def __call__(self, commands: Sequence[Command]) -> None:
        self.sending.set()
        self.gate.wait(5)
        self.batches.append(list(commands))


def xadd(n: int) -> Command:
    return ("XADD", "stream", "*", "event", str(n))


def eventually(check: object, timeout: float = 2.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(check) and check():
            return True
        time.sleep(0.002)
    return False


def test_a_commit_takes_what_waits_once_and_in_order() -> None:
    sent = Sent()
    riders = StreamRiders(sent, delay=5.0)
    riders.put("t1", [xadd(1), xadd(2)])
    riders.put("t1", [xadd(3)])
    assert riders.take("t1") == [xadd(1), xadd(2), xadd(3)]
    assert riders.take("t1") == []
    riders.flush()
    assert sent.batches == []  # nothing left for the thread


def test_a_commit_takes_only_its_own_turns_entries() -> None:
    # another thread's commit of its own turn may be on its way: it must carry that turn's
    sent = Sent()
    riders = StreamRiders(sent, delay=5.0)
    riders.put("t1", [xadd(1)])
    riders.put("t2", [xadd(2)])
    riders.put("t1", [xadd(3)])
    assert riders.take("t2") == [xadd(2)]
    assert riders.take("t3") == []
    riders.flush()
    assert sent.batches == [[xadd(1), xadd(3)]]


def test_what_no_commit_takes_is_sent_after_the_delay() -> None:
    sent = Sent()
    riders = StreamRiders(sent, delay=0.03)
    started = time.monotonic()
    riders.put("t1", [xadd(1)])
    assert eventually(lambda: sent.batches)
    assert time.monotonic() - started >= 0.03
    assert sent.batches == [[xadd(1)]]
    assert riders.take("t1") == []
    # and again after the thread went idle
    riders.put("t1", [xadd(2)])
    assert eventually(lambda: len(sent.batches) == 2)
    assert sent.batches[1] == [xadd(2)]


def test_a_commit_waits_for_a_send_in_flight_so_its_events_land_after() -> None:
    # Given the thread midway through sending what waited
    sent = Sent()
    sent.gate.clear()
    riders = StreamRiders(sent, delay=0.01)
    riders.put("t1", [xadd(1)])
    assert sent.sending.wait(2)
    # When a commit takes (another actor) while that write is in flight
    taken: list[list[Command]] = []
    order: list[str] = []

    def take() -> None:
        taken.append(riders.take("t1"))
        order.append("take")

    commit = threading.Thread(target=take)
    commit.start()
    time.sleep(0.05)
    assert commit.is_alive()  # it waits for the send
    order.append("sent")
    sent.gate.set()
    commit.join(2)
    # Then the commit went after the send, with nothing taken twice
    assert order == ["sent", "take"]
    assert taken == [[]]
    assert sent.batches == [[xadd(1)]]


def test_puts_and_takes_from_many_threads_lose_and_double_nothing() -> None:
    sent = Sent()
    riders = StreamRiders(sent, delay=0.001)
    taken: list[Command] = []
    lock = threading.Lock()

    def actor(base: int) -> None:
        for n in range(200):
            turn = f"t{base}"
            riders.put(turn, [xadd(base + n)])
            if n % 3 == 0:
                got = riders.take(turn)
                with lock:
                    taken.extend(got)

    threads = [threading.Thread(target=actor, args=(k * 1000,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    riders.flush()
    everything = taken + [c for batch in sent.batches for c in batch]
    assert sorted(everything) == sorted(xadd(k * 1000 + n) for k in range(4) for n in range(200))


def test_the_thread_ends_once_its_riders_are_collected() -> None:
    riders = StreamRiders(Sent(), delay=0.01)
    riders.put("t1", [xadd(1)])
    riders.flush()
    assert any(t.name == "stream-riders" for t in threading.enumerate())
    before = sum(t.name == "stream-riders" for t in threading.enumerate())
    del riders
    gc.collect()
    assert eventually(
        lambda: sum(t.name == "stream-riders" for t in threading.enumerate()) < before, 3.0
    )


def test_a_forked_child_starts_its_own_thread() -> None:
    sent = Sent()
    riders = StreamRiders(sent, delay=0.01)
    riders.put("t1", [xadd(1)])
    assert eventually(lambda: sent.batches)
    riders._forked()  # what os.register_at_fork runs in a child
    riders.put("t1", [xadd(2)])
    assert eventually(lambda: len(sent.batches) == 2)


def test_entries_put_back_go_first_and_are_sent_if_no_commit_takes_them() -> None:
    # Given entries a commit took, one more put meanwhile, and the failed write's put back
    sent = Sent()
    riders = StreamRiders(sent, delay=0.05)
    riders.put("t1", [xadd(1), xadd(2)])
    taken = riders.take("t1")
    riders.put("t1", [xadd(3)])
    riders.put_back("t1", taken)

    # Then they wait ahead of what came later, and the thread sends them all in order
    assert eventually(lambda: sent.batches != [])
    assert sent.batches == [[xadd(1), xadd(2), xadd(3)]]
    assert riders.take("t1") == []
