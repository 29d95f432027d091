"""Engine workers that cannot start: they are started again with capped exponential back-off (not
in a tight loop, and not never), ``/v1/engine`` says why and when the next start is, and
``/healthz`` recovers on its own once a start succeeds."""

from __future__ import annotations

import copy
import time

import pytest
import torch
from server_helpers import admitted_session, engine_pipeline, make_settings, measured_costs, serving, wait_until

from engine.service.pool import WorkerPool
from engine.service.worker import WorkerOptions, core_from
from server.api.app import create_app
from server.api.engine_adapter import Engine

pytestmark = pytest.mark.usefixtures("one_thread")
BACKOFF_S = (0.2, 0.8)


class FlakyLoad:
    """The in-process worker's loader, failing (raising ``fault``) until told to stop."""

    def __init__(self, fault: type[BaseException]) -> None:
        self.fault = fault
        self.failing = True
        self.attempts: list[float] = []

    def __call__(self, options: WorkerOptions):
        self.attempts.append(time.monotonic())
        if self.failing:
            raise self.fault("the weights are not there yet")
        pipe = engine_pipeline("puppet")
        return core_from(pipe, options, costs=copy.deepcopy(measured_costs("puppet", torch.get_num_threads())))


# SystemExit ends the worker's thread as an exit ends a worker process: without a word to the pool.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
@pytest.mark.parametrize("fault", [RuntimeError, SystemExit], ids=["raises-while-loading", "exits-at-start"])
async def test_a_worker_that_cannot_start_is_retried_with_back_off_and_health_recovers(fault):
    load = FlakyLoad(fault)
    engine = Engine(WorkerPool(WorkerOptions(config="puppet", warm_up=False, settle_s=0.0), kind="inprocess",
                               load=load, backoff_s=BACKOFF_S))
    settings = make_settings(max_sessions=1, config="puppet")
    async with serving(create_app(settings, engine), settings) as srv:
        assert (await srv.http.get("/healthz")).status_code == 503
        # The 4th start has failed (not merely begun: its failure reaches the pool a moment later).
        assert await wait_until(lambda: len(load.attempts) >= 4 and engine.workers()[0].state in ("failed", "lost"), 10)
        worker = (await srv.http.get("/v1/engine")).json()["workers"][0]
        assert worker["state"] in ("failed", "lost") and not worker["alive"]
        if fault is RuntimeError:
            assert "the weights are not there yet" in worker["error"]
        assert worker["start_failures"] >= 3 and worker["next_attempt_s"] is not None
        assert 0 <= worker["next_attempt_s"] <= BACKOFF_S[1]
        # Starts back off: 0.2, 0.4, 0.8, 0.8 ... s apart (plus the start itself), not as fast as a worker can fail.
        gaps = [b - a for a, b in zip(load.attempts, load.attempts[1:], strict=False)]
        assert gaps[0] >= 0.15 and gaps[1] >= 0.3 and gaps[2] >= 0.6, gaps
        assert all(gap >= 0.6 for gap in gaps[2:]), gaps  # the cap, 0.8 s, holds once reached
        load.failing = False  # the cause is gone: nobody restarts anything
        assert await wait_until(lambda: srv.manager.engine.available, 10)
        health = await srv.http.get("/healthz")
        assert health.status_code == 200 and health.json()["workers_alive"] == 1
        worker = (await srv.http.get("/v1/engine")).json()["workers"][0]
        assert (worker["state"], worker["start_failures"], worker["next_attempt_s"]) == ("ready", 0, None)
        await admitted_session(srv)
