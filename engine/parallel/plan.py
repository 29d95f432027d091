"""``ParallelPlan``: how one engine spreads over devices, as ``avatar bench`` flags and the
engine worker's options name it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ParallelPlan:
    """One model over ``world_size`` ranks (one device each), or one device with offload.

    ``sequence``: ranks splitting every chunk's tokens (Ulysses attention). ``pipeline``: ranks
    holding consecutive DiT blocks (``boundaries``, or an even split until measured times
    rebalance it), ``microbatches`` rows of a batch in flight. ``shard``: ranks sharding the
    DiT's block weights (FSDP2); with ``sequence`` both use the same ranks. ``offload``: modules
    live in pinned CPU memory, each block copied in just before it runs. ``decoder_device``: SR
    and the decoder on a device of their own, pipelined with the DiT.
    """

    sequence: int = 1
    pipeline: int = 1
    shard: int = 1
    offload: bool = False
    decoder_device: str | None = None
    boundaries: tuple[int, ...] | None = None
    microbatches: int = 0  # 0: as many as the batch has rows

    def __post_init__(self) -> None:
        for name in ("sequence", "pipeline", "shard"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} parallelism must be at least 1")
        if self.pipeline > 1 and (self.sequence > 1 or self.shard > 1):
            raise ValueError("pipeline parallelism does not combine with sequence parallelism or sharding")
        if self.sequence > 1 and self.shard > 1 and self.sequence != self.shard:
            raise ValueError("sequence parallelism and sharding share their ranks: give them the same size")
        if self.offload and self.world_size > 1:
            raise ValueError("offload keeps one model on one device; it does not combine with several ranks")
        if self.boundaries is not None and self.pipeline == 1:
            raise ValueError("stage boundaries need pipeline parallelism")
        if self.microbatches < 0:
            raise ValueError("microbatches must be >= 0")

    @property
    def world_size(self) -> int:
        return max(self.sequence, self.pipeline, self.shard)

    @property
    def single(self) -> bool:
        """Nothing to do: the plain one-device engine."""
        return self.world_size == 1 and not self.offload and self.decoder_device is None

    def devices(self, device: str) -> tuple[str, ...]:
        """One device per rank, from ``device`` on: CPU ranks share the CPU; ``cuda:k`` gives
        ``cuda:k`` .. ``cuda:k+world-1``."""
        if not device.startswith("cuda"):
            return (device,) * self.world_size
        first = int(device.split(":")[1]) if ":" in device else 0
        return tuple(f"cuda:{first + r}" for r in range(self.world_size))

    def describe(self) -> str:
        parts = [f"{name} {n}" for name, n in (("sequence", self.sequence), ("pipeline", self.pipeline),
                                              ("shard", self.shard)) if n > 1]
        if self.offload:
            parts.append("offload")
        if self.decoder_device:
            parts.append(f"decoder on {self.decoder_device}")
        return ", ".join(parts) or "one device"
