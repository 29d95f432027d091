"""Pipeline parallelism over the A2V DiT's blocks.

Rank r holds blocks ``boundaries[r] .. boundaries[r+1]`` (on its device; the others stay in
CPU memory so the split can move) and their layers of every session's reference and history
K/V. A forward splits the batch's rows (sessions, and a guided chunk's silent twins) into
micro-batches that flow from stage to stage: while stage 1 runs micro-batch 0, stage 0 runs
micro-batch 1, so with as many rows as stages no stage idles after the first. The last stage
applies the output layer and broadcasts the velocity, which every rank's sampler needs.

Boundaries are given, or start even and are rebalanced from the block times of a short warm-up
run (``balance``: the split that makes the slowest stage fastest) before the engine serves;
``rebalance`` moves them again later while no session holds K/V of the old split.
"""

from __future__ import annotations

import itertools
import time
from collections import Counter, deque
from collections.abc import Sequence

import numpy as np
import torch
import torch.distributed as dist

from engine.modules.dit import A2VDiT, AttnContext

TIMES_KEPT = 64  # per block, the most recent forwards


def even_boundaries(depth: int, stages: int) -> tuple[int, ...]:
    if not 1 <= stages <= depth:
        raise ValueError(f"{depth} blocks cannot make {stages} stages")
    return tuple(round(i * depth / stages) for i in range(stages + 1))


def balance(times: Sequence[float], stages: int) -> tuple[int, ...]:
    """Boundaries splitting blocks of these times into ``stages`` contiguous, non-empty stages
    so that the slowest stage takes the least time (ties: the earliest boundaries)."""
    n = len(times)
    even_boundaries(n, stages)  # refuses impossible splits
    prefix = [0.0]
    for t in times:
        prefix.append(prefix[-1] + t)
    inf = float("inf")
    # best[k][j]: the slowest stage's time when the first j blocks make k stages
    best = [[inf] * (n + 1) for _ in range(stages + 1)]
    cut = [[0] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = 0.0
    for k in range(1, stages + 1):
        for j in range(k, n - (stages - k) + 1):
            for i in range(k - 1, j):
                cost = max(best[k - 1][i], prefix[j] - prefix[i])
                if cost < best[k][j] - 1e-12:
                    best[k][j], cut[k][j] = cost, i
    bounds = [n]
    for k in range(stages, 0, -1):
        bounds.append(cut[k][bounds[-1]])
    return tuple(reversed(bounds))


class BlockClock:
    """Time of each block's forward here. On a GPU the times come from CUDA events read only
    when asked, so measuring adds no host synchronisation to a forward."""

    def __init__(self, depth: int, cuda: bool) -> None:
        self.cuda = cuda
        self.samples: list[deque] = [deque(maxlen=TIMES_KEPT) for _ in range(depth)]

    def start(self) -> object:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def stop(self, block: int, started: object) -> None:
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self.samples[block].append((started, end))
        else:
            self.samples[block].append(time.perf_counter() - started)

    def seconds(self) -> list[float | None]:
        """Mean seconds per block (None for blocks not run here since the last reset)."""
        if self.cuda:
            torch.cuda.synchronize()
        out: list[float | None] = []
        for samples in self.samples:
            values = [a.elapsed_time(b) / 1000 for a, b in samples] if self.cuda else list(samples)
            out.append(sum(values) / len(values) if values else None)
        return out

    def reset(self) -> None:
        for samples in self.samples:
            samples.clear()


class StagePipeline:
    """The ``Trunk`` of one rank's DiT: its stage of blocks, fed by the previous rank."""

    def __init__(self, dit: A2VDiT, rank: int, world: int, boundaries: Sequence[int] | None = None,
                 microbatches: int = 0) -> None:
        self.rank, self.world = rank, world
        self.microbatches = microbatches
        self.clock = BlockClock(len(dit.blocks), dit.device.type == "cuda")
        self.in_flight: Counter[int] = Counter()  # forwards run, by how many micro-batches they had
        self.boundaries: tuple[int, ...] = ()
        self.assign(dit, boundaries or even_boundaries(len(dit.blocks), world))

    @property
    def blocks(self) -> range:
        return range(self.boundaries[self.rank], self.boundaries[self.rank + 1])

    def assign(self, dit: A2VDiT, boundaries: Sequence[int]) -> None:
        """Hold the blocks of this rank's stage on its device, the others in CPU memory."""
        b = tuple(boundaries)
        depth = len(dit.blocks)
        if len(b) != self.world + 1 or b[0] != 0 or b[-1] != depth or any(x >= y for x, y in itertools.pairwise(b)):
            raise ValueError(f"boundaries {b} do not split {depth} blocks into {self.world} non-empty stages")
        self.boundaries = b
        device = dit.device
        for i, block in enumerate(dit.blocks):
            block.to(device if i in self.blocks else "cpu")

    def _run(self, dit: A2VDiT, x: torch.Tensor, mod: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
             ctx: AttnContext | None, audio: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """This stage's blocks over one micro-batch, each timed."""
        ks, vs = [], []
        for j, i in enumerate(self.blocks):
            layer = AttnContext(ctx.k[j:j + 1], ctx.v[j:j + 1], ctx.base) if ctx is not None else None
            started = self.clock.start()
            x, k, v = dit.run_blocks([i], x, mod, cos, sin, layer, audio)
            self.clock.stop(i, started)
            ks.append(k)
            vs.append(v)
        return x, torch.cat(ks), torch.cat(vs)

    def __call__(self, dit: A2VDiT, x: torch.Tensor, mod: torch.Tensor, emb: torch.Tensor, cos: torch.Tensor,
                 sin: torch.Tensor, ctx: AttnContext | None,
                 audio: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        rows = x.shape[0]
        first, last = self.rank == 0, self.rank == self.world - 1
        parts = min(rows, self.microbatches or rows)
        self.in_flight[parts] += 1
        outs, ks, vs, sending = [], [], [], []
        for part in torch.arange(rows).tensor_split(parts):
            r = slice(int(part[0]), int(part[-1]) + 1)
            if first:
                xm = x[r]
            else:
                xm = torch.empty_like(x[r])
                dist.recv(xm, src=self.rank - 1)
            part_ctx = AttnContext(ctx.k[:, r], ctx.v[:, r], ctx.base) if ctx is not None else None
            xm, k, v = self._run(dit, xm, mod[r], cos, sin, part_ctx, audio[r] if audio is not None else None)
            ks.append(k)
            vs.append(v)
            if last:
                outs.append(dit.final(xm, emb[r]))
            else:
                xm = xm.contiguous()
                sending.append((dist.isend(xm, dst=self.rank + 1), xm))
        for work, _ in sending:
            work.wait()
        out = torch.cat(outs) if last else x.new_empty(*x.shape[:3], dit.in_dim)
        dist.broadcast(out, src=self.world - 1)
        return out, torch.cat(ks, 1), torch.cat(vs, 1)


def block_seconds(context: object) -> list[float | None]:
    """(On every rank) this rank's measured seconds per block; None where it runs none."""
    return context.pipe.models.dit.trunk.clock.seconds()


def rebalance(context: object) -> tuple[int, ...]:
    """(On every rank at once) move the stage boundaries to what the measured block times say.
    Only while no session is open: K/V held so far belong to the old split."""
    dit = context.pipe.models.dit
    trunk: StagePipeline = dit.trunk
    mine = trunk.clock.seconds()
    everyone: list[list[float | None]] = [[] for _ in range(trunk.world)]
    dist.all_gather_object(everyone, mine)
    times = [next((t[i] for t in everyone if t[i] is not None), 0.0) for i in range(len(dit.blocks))]
    boundaries = balance(times, trunk.world)
    trunk.assign(dit, boundaries)
    trunk.clock.reset()
    context.pipe.forget_references()  # bundled avatars' reference K/V, encoded on the old split
    return boundaries


def rebalance_stages(pipe: object) -> tuple[int, ...]:
    """Rebalance an engine spread over pipeline stages (``MirroredPipeline``); refused while a
    session is open."""
    if pipe.open_sessions:
        raise RuntimeError(f"{pipe.open_sessions} sessions hold K/V of the current split: close them first")
    return pipe.call(rebalance)[0]


def measure_and_rebalance(pipe: object, chunks: int = 2) -> tuple[int, ...]:
    """A short silent session on the even split, then boundaries from its block times: what an
    engine spread over stages does before it serves, unless its boundaries were given."""
    warm = pipe.open_session()
    warm.feed(np.zeros(pipe.first_chunk_samples + chunks * pipe.frames_per_chunk * pipe.config.samples_per_frame,
                       np.float32))
    warm.close_input()
    while not warm.finished:
        warm.step()
    del warm
    return rebalance_stages(pipe)


def stage_boundaries(context: object) -> tuple[int, ...]:
    """(On every rank) the boundaries this rank's stage follows."""
    return context.pipe.models.dit.trunk.boundaries
