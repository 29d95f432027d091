"""Everything a streaming session keeps between chunks, and nothing more.

``RollingState.nbytes()`` counts the tensors held: the reference conditioning, the
history K/V window, the unpublished latents, the decoder's causal cache and the audio
tail. None of it grows with session length.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np
import torch

from engine.modules.dit import KVBlock
from engine.modules.vae import DecoderCache, DecoderReference
from engine.stages.history import HistoryWindow


@dataclass(frozen=True)
class ReferenceConditioning:
    """Static per-session conditioning: never evicted."""

    hr_latent: torch.Tensor  # (1, c, H, W), used by super-resolution
    kv: KVBlock  # reference tokens' K/V for every DiT layer
    decoder: DecoderReference  # the reference image's features for the VAE decoder

    def nbytes(self) -> int:
        return self.hr_latent.numel() * self.hr_latent.element_size() + self.kv.nbytes() + self.decoder.nbytes()


@dataclass(frozen=True)
class LatentWindow:
    """A contiguous run of low-res latents ``[start, start + len)`` still needed."""

    start: int
    data: torch.Tensor  # (F, c, h, w)
    origin: tuple[str, ...]  # the chunk that produced each latent, e.g. "N3" or "I2"

    @property
    def end(self) -> int:
        return self.start + self.data.shape[0]

    def get(self, lo: int, hi: int) -> torch.Tensor:
        if lo < self.start or hi > self.end:
            raise IndexError(f"latents [{lo}, {hi}) not held (have [{self.start}, {self.end}))")
        return self.data[lo - self.start:hi - self.start]

    def origins(self, lo: int, hi: int) -> tuple[str, ...]:
        return self.origin[lo - self.start:hi - self.start]

    def put(self, lo: int, values: torch.Tensor, origin: str) -> LatentWindow:
        """Write ``values`` at ``lo`` (extending the window at its end if needed)."""
        hi = lo + values.shape[0]
        if lo < self.start or lo > self.end:
            raise IndexError(f"cannot write [{lo}, {hi}) into [{self.start}, {self.end})")
        a, b = lo - self.start, hi - self.start
        data = torch.cat([self.data[:a], values, self.data[b:]])
        return LatentWindow(self.start, data, self.origin[:a] + (origin,) * values.shape[0] + self.origin[b:])

    def drop_before(self, index: int) -> LatentWindow:
        index = max(self.start, min(index, self.end))
        cut = index - self.start
        return LatentWindow(index, self.data[cut:].clone(), self.origin[cut:])

    def nbytes(self) -> int:
        return self.data.numel() * self.data.element_size()


class AudioBuffer:
    """Thread-safe tail of the session's audio (producer: event loop; consumer: engine).

    Holds samples from ``offset`` on; reads outside what was fed are silence before the
    start and past the end once the input is closed.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parts: list[np.ndarray] = []
        self._data = np.zeros(0, dtype=np.float32)
        self.offset = 0
        self.total = 0
        self.closed = False
        self._changed: int | None = None  # the first sample rewritten or silenced since ``take_changed``

    def feed(self, pcm: np.ndarray) -> None:
        pcm = np.asarray(pcm, dtype=np.float32).reshape(-1)
        with self._lock:
            if self.closed:
                raise RuntimeError("audio input already closed")
            self._parts.append(pcm.copy())
            self.total += pcm.size

    def close(self) -> None:
        with self._lock:
            self.closed = True

    def _merge(self) -> None:
        if self._parts:
            self._data = np.concatenate([self._data, *self._parts])
            self._parts = []

    def read(self, start: int, end: int) -> np.ndarray:
        """Samples [start, end) of the global stream, zero outside what exists."""
        out = np.zeros(max(0, end - start), dtype=np.float32)
        with self._lock:
            self._merge()
            lo, hi = max(start, self.offset), min(end, self.offset + self._data.size)
            if min(end, self.offset) > max(start, 0):
                raise IndexError(f"audio before sample {self.offset} was already released")
            if hi > lo:
                out[lo - start:hi - start] = self._data[lo - self.offset:hi - self.offset]
        return out

    def silence_from(self, sample: int) -> int:
        """Zero every held sample at or after ``sample`` (fed, not yet released): an interrupt
        cuts the voice the engine has not turned into frames yet. Returns how many were zeroed."""
        with self._lock:
            self._merge()
            cut = min(max(0, sample - self.offset), self._data.size)
            if cut == self._data.size:
                return 0
            self._data[cut:] = 0.0
            self._mark(self.offset + cut)
            return self._data.size - cut

    def write(self, start: int, pcm: np.ndarray) -> int:
        """Replace the held samples from ``start`` on by ``pcm`` (audio fed again: later news of
        what those samples are); what lies past the end of the audio fed is not fed here, and what
        was already released stays as it was. Returns how many samples were replaced."""
        pcm = np.asarray(pcm, dtype=np.float32).reshape(-1)
        with self._lock:
            self._merge()
            lo, hi = max(start, self.offset), min(start + pcm.size, self.offset + self._data.size)
            if hi <= lo:
                return 0
            self._data[lo - self.offset:hi - self.offset] = pcm[lo - start:hi - start]
            self._mark(lo)
            return hi - lo

    def _mark(self, sample: int) -> None:
        self._changed = sample if self._changed is None else min(self._changed, sample)

    def take_changed(self) -> int | None:
        """The first sample rewritten or silenced since the last call (None: none was): whoever
        already heard audio from there must hear it again."""
        with self._lock:
            changed, self._changed = self._changed, None
            return changed

    def release_before(self, index: int) -> None:
        with self._lock:
            self._merge()
            cut = min(max(0, index - self.offset), self._data.size)
            if cut:
                self._data = self._data[cut:].copy()
                self.offset += cut

    def nbytes(self) -> int:
        with self._lock:
            return self._data.nbytes + sum(p.nbytes for p in self._parts)


class AudioFed:
    """A session fed its audio in order through an :class:`AudioBuffer` (``audio``), ``spf``
    samples a frame: what the model's sessions and the puppet's share."""

    audio: AudioBuffer
    _spf: int

    def feed(self, pcm: np.ndarray) -> None:
        """Float32 mono samples at the pipeline's sample rate (thread-safe)."""
        self.audio.feed(pcm)

    def close_input(self) -> None:
        self.audio.close()

    def silence_from(self, sample: int) -> int:
        """Zero the audio fed at or after ``sample`` that no frame was made of yet (an
        interrupt: the face stops speaking where the voice was cut). Thread-safe."""
        return self.audio.silence_from(sample)

    def rewrite(self, start: int, pcm: np.ndarray) -> int:
        """Audio fed again from ``start`` on (``pcm`` replaces what was fed there): frames not made
        yet take it, mouths and all. Audio within ``lookahead_samples`` of the end of what was fed
        belongs to frames not made yet. Returns how many samples were replaced. Thread-safe."""
        return self.audio.write(start, pcm)

    def frame_limit(self) -> int | None:
        """Frames the stream has in all, once the input is closed (a partial last frame counts)."""
        return -(-self.audio.total // self._spf) if self.audio.closed else None


@dataclass
class Counters:
    next_n: int = 0  # next N chunk to run
    pending_i: int | None = None  # I chunk that must run before the next N
    published: int = 0  # latents published so far
    frames: int = 0  # video frames published so far
    chunks: int = 0  # chunks executed (N and I)


@dataclass
class RollingState:
    reference: ReferenceConditioning
    decoder: DecoderCache
    history: HistoryWindow | None = None
    latents: LatentWindow | None = None
    last_frame: torch.Tensor | None = None  # the last published frame, for temporal deblocking
    counters: Counters = field(default_factory=Counters)

    def nbytes(self) -> int:
        held = self.reference.nbytes() + self.decoder.nbytes()
        if self.last_frame is not None:
            held += self.last_frame.numel() * self.last_frame.element_size()
        if self.history is not None:
            held += self.history.nbytes()
        if self.latents is not None:
            held += self.latents.nbytes()
        return held
