"""A node's engine worker shared by several web processes' pools: their sessions are batched
together, each hears only of its own sessions, one that goes costs only its own, and a process
without the node's key is refused."""

from __future__ import annotations

import asyncio
import dataclasses
import queue
import time
from multiprocessing import Pipe

import pytest
from server_helpers import wait_until
from test_pool import feed, frames

from engine.service.client import EngineError
from engine.service.messages import CloseSession, SessionSpec
from engine.service.pool import WorkerPool
from engine.service.wire import SEND_TIMEOUT_S
from engine.service.worker import WorkerOptions
from engine.service.worker_clients import OWNER, ClientGone, Clients

# Uncalibrated (it starts in half the time) and bounded by nothing but max_sessions; the batching
# test measures batches of 2, since the scheduler batches only what it has seen pay.
MICRO = WorkerOptions(config="micro", threads=1, warm_up=False, calibrate=(), settle_s=0.0, capacity_margin=-1.0)


async def until(check, timeout_s: float = 20.0) -> None:
    assert await wait_until(check, timeout_s), "timed out"


@pytest.fixture
async def node(tmp_path, request):
    """The node's own pool (it starts the worker) and a factory of guest pools (web processes);
    ``@pytest.mark.worker(**changes)`` changes the worker's options."""
    marker = request.node.get_closest_marker("worker")
    options = dataclasses.replace(MICRO, socket_dir=str(tmp_path / "run"), key=b"node-key",
                                  **(marker.kwargs if marker else {}))
    owner = WorkerPool(options)
    await owner.start()
    guests: list[WorkerPool] = []

    async def guest(key: bytes = b"node-key") -> WorkerPool:
        pool = WorkerPool(dataclasses.replace(options, key=key), kind="node", start_timeout_s=20)
        guests.append(pool)
        await pool.start()
        return pool

    yield owner, guest
    for pool in guests:
        await pool.close()
    await owner.close()


@pytest.mark.worker(calibrate=(1, 2))
async def test_two_web_processes_sessions_run_in_one_batch_and_one_leaving_costs_only_its_own(node):
    owner, guest = node
    a, b = await guest(), await guest()
    assert a.info == owner.info and a.workers()[0].state == "ready"
    sa = await a.open(SessionSpec(avatar="ben", seed=1))
    sb = await b.open(SessionSpec(avatar="ben", seed=2))
    await asyncio.gather(feed(sa, 6.0), feed(sb, 6.0, seed=1))
    # Both sessions run until their frame slots are full, then wait for playout; taking both
    # sessions' frames at once frees their slots together, so the worker finds both due.
    got_a, got_b = [], []
    blocked = sa.slots.count - sa.info.step_frames
    while owner.workers()[0].stats.shared_batches == 0 and len(got_a) < 120:
        await until(lambda: sa.pending() > blocked and sb.pending() > blocked)
        got_a += [await sa.next_frame() for _ in range(sa.pending())]
        got_b += [await sb.next_frame() for _ in range(sb.pending())]
        await until(lambda: owner.workers()[0].stats.batches > 0)
    assert [f.index for f in got_a] == list(range(len(got_a))) and [f.index for f in got_b] == list(range(len(got_b)))
    view = owner.workers()[0]
    assert view.sessions == 2 and view.stats.shared_batches > 0 and view.stats.batch_mean > 1.0, view.stats
    # Each web process hears of its own session only; the node's pool, of both.
    await until(lambda: set(a.workers()[0].stats.state_bytes) == {sa.id})
    assert set(b.workers()[0].stats.state_bytes) == {sb.id}
    assert set(view.stats.state_bytes) == {sa.id, sb.id}
    assert a.workers()[0].sessions == 2  # its own, and the other process's as last reported

    b.links[0].send(CloseSession(sa.id))  # not b's to close: ignored
    a.links[0].kill()  # a's connection ends, as when its process dies
    await asyncio.wait_for(sa.lost.wait(), 5)
    assert sa.error.code == "engine_lost"
    await until(lambda: owner.workers()[0].stats.sessions == 1)  # the worker closed a's session
    assert set(owner.workers()[0].stats.state_bytes) == {sb.id}
    more = await frames(sb, 20)
    start = got_b[-1].index + 1
    assert [f.index for f in more] == list(range(start, start + 20))


async def test_a_process_without_the_node_key_is_refused(node):
    owner, guest = node
    stranger = await guest(key=b"wrong")
    view = stranger.workers()[0]
    assert view.state == "failed" and "cannot be reached" in view.error, view
    assert owner.workers()[0].alive
    with pytest.raises(EngineError) as refused:
        await stranger.open(SessionSpec())
    assert refused.value.code == "engine_unavailable"


# No margin left for any session: the worker takes exactly one at a time (an idle worker always takes one).
@pytest.mark.worker(capacity_margin=1.0)
async def test_a_full_worker_refuses_the_web_process_that_asks_last(node):
    owner, guest = node
    a, b = await guest(), await guest()
    assert owner.workers()[0].capacity == 1
    await until(lambda: a.workers()[0].capacity == 1)  # a's view too: its first report may come later
    first = await a.open(SessionSpec())
    await until(lambda: owner.workers()[0].stats.sessions == 1)
    b.links[0].stats = dataclasses.replace(b.links[0].stats, capacity=1)  # as if b's last report predated a's open
    with pytest.raises(EngineError) as full:
        await b.open(SessionSpec())
    assert full.value.code == "at_capacity" and "real-time capacity" in full.value.message  # the worker's refusal
    await first.close()
    # The worker has closed a's session (its report says so), and b's view has room.
    await until(lambda: owner.workers()[0].stats.sessions == 0 and b.workers()[0].capacity == 1)
    assert (await b.open(SessionSpec())).id


def test_the_owner_is_sent_to_through_an_outbox_in_order_and_what_is_queued_goes_before_the_end() -> None:
    inbox: queue.SimpleQueue = queue.SimpleQueue()
    web, owner_end = Pipe()
    clients = Clients(inbox, owner_end)
    for i in range(3):
        clients.send(OWNER, ("frames", i))
    clients.close()  # the worker ends: what was queued is written first
    assert [web.recv() for _ in range(3)] == [("frames", 0), ("frames", 1), ("frames", 2)]
    assert inbox.empty()


def test_an_owner_that_reads_nothing_never_holds_up_the_worker_and_ends_it() -> None:
    """Sends to the owner return at once however much waits; once it has taken nothing for
    ``wire.SEND_TIMEOUT_S`` the worker hears that its owner is gone (and stops, as when the owner's
    connection closes)."""
    inbox: queue.SimpleQueue = queue.SimpleQueue()
    _web, owner_end = Pipe()  # the web process reads nothing
    clients = Clients(inbox, owner_end)
    t0 = time.monotonic()
    for _ in range(8):
        clients.send(OWNER, bytes(1 << 20))
    sent_s = time.monotonic() - t0
    gone = inbox.get(timeout=SEND_TIMEOUT_S + 5)
    gone_s = time.monotonic() - t0
    clients.close()
    assert sent_s < 0.5, sent_s
    assert isinstance(gone, ClientGone) and gone.client == OWNER and SEND_TIMEOUT_S - 0.2 < gone_s, gone_s
