"""Entry point of a rank other than 0: ``python -m engine.parallel.follower FD``, started by
``engine.parallel.ranks.RankGroup`` with one end of a socket pair as FD.

It joins the process group, builds its share of the engine, then applies rank 0's commands
until told to stop (exit 0), until rank 0 is gone (end of file, or a new parent process: exit
1), or until a command fails, here or in a collective another rank broke (it says why, then
exits 2).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection

import torch.distributed as dist

from engine.parallel.mirror import Call, Replica, Stop
from engine.parallel.ranks import LOOPBACK, Failed, Hello, RankSpec, Ready, join_group, leave_group, receive, send


def _exit_with_parent(parent: int) -> None:
    """A rank outlives rank 0 by at most half a second, even if it is stuck in a collective."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


def serve(conn: Connection, replica: Replica, context: object) -> int:
    while True:
        try:
            commands = receive(conn)
        except (EOFError, OSError):
            return 1
        for cmd in commands:
            if isinstance(cmd, Stop):
                return 0
            try:
                result = replica.apply(cmd, context)
            except Exception as exc:  # here, or a collective broken by a rank that is gone
                with contextlib.suppress(OSError):
                    send(conn, Failed(context.rank, f"{exc.__class__.__name__}: {exc}\n{traceback.format_exc()}"))
                return 2
            if isinstance(cmd, Call) and cmd.reply:
                send(conn, result)


def main(fd: int) -> int:
    conn = Connection(fd)
    spec, rank = receive(conn)
    assert isinstance(spec, RankSpec)
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    store = dist.TCPStore(LOOPBACK, int(os.environ["MASTER_PORT"]), spec.world_size, False,
                          timeout=datetime.timedelta(seconds=spec.timeout_s))
    send(conn, Hello(rank, os.getpid()))
    join_group(spec, rank, store)
    from engine.parallel.build import build_rank

    try:
        context = build_rank(spec, rank)
    except Exception as exc:
        send(conn, Failed(rank, f"could not build rank {rank}: {exc.__class__.__name__}: {exc}"))
        return 2
    send(conn, Ready(rank))
    try:
        return serve(conn, Replica(context.pipe), context)
    finally:
        leave_group()


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
