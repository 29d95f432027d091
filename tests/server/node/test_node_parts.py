"""The node's parts alone: each web process's share of the UDP ports, one exposition of every
process's metrics, and the web processes as the front follows them."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from server.node.members import WebProcesses
from server.node.metrics import merged_metrics
from server.node.supervisor import free_port, port_share


def test_each_web_process_gets_its_own_ports():
    shares = [port_share((40000, 40099), i, 3) for i in range(3)]
    assert shares == [(40000, 40032), (40033, 40065), (40066, 40098)]
    assert port_share(None, 1, 3) is None
    with pytest.raises(ValueError, match="cannot be shared by 4"):
        port_share((40000, 40002), 0, 4)


def exposition(sessions: float, rejected: int) -> str:
    r = CollectorRegistry()
    Gauge("avatar_sessions_active", "Avatar sessions alive now", registry=r).set(sessions)
    c = Counter("avatar_sessions_rejected", "Session creations refused", ["reason"], registry=r)
    c.labels("at_capacity").inc(rejected)
    return generate_latest(r).decode()


def test_every_process_series_in_one_exposition_labelled_by_process():
    text = merged_metrics({"front": exposition(0, 1), "web-0": exposition(2, 0), "web-1": exposition(3, 4)})
    families = {f.name: f for f in text_string_to_metric_families(text.decode())}
    active = {s.labels["process"]: s.value for s in families["avatar_sessions_active"].samples}
    assert active == {"front": 0.0, "web-0": 2.0, "web-1": 3.0}
    rejected = {(s.labels["process"], s.labels["reason"]): s.value
                for s in families["avatar_sessions_rejected"].samples if s.name.endswith("_total")}
    assert rejected == {("front", "at_capacity"): 1.0, ("web-0", "at_capacity"): 0.0, ("web-1", "at_capacity"): 4.0}
    assert text.decode().count("# TYPE avatar_sessions_active gauge") == 1


async def test_a_lost_web_process_takes_its_sessions_out_of_routing():
    members = WebProcesses()
    a, b = members.add("web-0", "http://127.0.0.1:1"), members.add("web-1", "http://127.0.0.1:2")
    a.alive = b.alive = True
    a.sessions, b.sessions = {"s_a"}, {"s_b"}
    assert members.holder("s_b") is b
    members.lose("web-1", "its process exited with -9")
    assert b.lost.is_set() and not b.alive and b.error == "its process exited with -9"
    assert members.holder("s_b") is None and members.holder("s_a") is a
    assert [m.node for m in members.listing()] == ["web-0", "web-1"]  # still listed, with its error


async def test_a_replaced_web_process_follower_leaves_the_new_process_alone():
    members = WebProcesses(report_s=0.01, report_timeout_s=0.5)
    runs = asyncio.create_task(members.run())
    try:
        old = members.add("web-1", f"http://127.0.0.1:{free_port()}")  # nothing answers there now
        old.reports = 5  # it had served
        await asyncio.sleep(0)
        members.lose("web-1", "its process exited with -9")
        stray = asyncio.create_task(members._follow(old))  # as when a cancellation is lost
        new = members.add("web-1", f"http://127.0.0.1:{free_port()}")  # the new process, still importing
        await asyncio.wait_for(stray, 5)
        assert members.nodes["web-1"] is new and new.error is None and not new.lost.is_set()
        assert not members._followers["web-1"].done()  # the new process is still followed
        assert old.error == "its process exited with -9"
    finally:
        runs.cancel()
        await asyncio.gather(runs, return_exceptions=True)


def test_a_new_session_goes_to_the_web_process_with_fewest_sessions_that_has_room():
    from server.front.backends import Backend
    from server.front.placement import spread

    busy = Backend("web-0", alive=True, capacity=9, sessions={"s1", "s2"})
    quiet = Backend("web-1", alive=True, capacity=3, sessions={"s3"})
    full = Backend("web-2", alive=True, capacity=0, sessions=set())
    gone = Backend("web-3", alive=False, capacity=9)
    assert [b.node for b in spread([busy, quiet, full, gone])] == ["web-1", "web-0", "web-2"]
