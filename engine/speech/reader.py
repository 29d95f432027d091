"""Encoder features of each video frame of a stream, read in windows.

The encoder attends both ways, so a frame's features depend on the audio around it. A stream is
read in blocks of ``block_frames`` video frames counted from its start: a block is read once the
audio ``lookahead_frames`` past its end is in, from a window of ``window_seconds`` ending there.
A stream begins after a window of silence, so every window is as long: a frame's features never
depend on how the audio was split, one encoder pass of the same cost serves each block, and what
is kept between blocks is one window of audio, the same size all along.

Over the held-out real clips (a linear mouth read of the features, r against the real lip gap):
a whole clip read at once 0.54; blocks of 4 frames with 2 frames of lookahead, 3 s windows 0.495,
2 s windows 0.491 (for two thirds of the cost); 4 frames of lookahead buy 0.01.

Blocks of 2 frames with 3 of lookahead (what a redrawn session's heard mouth reads,
``engine.stages.redraw``): a block's first frame waits for 4 frames of audio past its end (160 ms),
not the 5 of blocks of 4 with 2 (200 ms: mirror mode's mouth-to-screen latency pays it all), every
frame is read with 3 or 4 frames of audio after it, never only 2, and the encoder runs twice as
often. The mouth head, fitted on blocks of 4, reads the real mouths about alike from both
(docs/figures.md); fitted again on blocks of 2 it reads them no better.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from engine.speech.encoder import POSITION_SAMPLES, SAMPLE_RATE, SpeechEncoder, load_encoder, log_mel

BLOCK_FRAMES = 4  # one encoder pass per 160 ms of audio (10-30 ms of one core, by machine and dtype)
LOOKAHEAD_FRAMES = 2  # audio past a block's end its window holds
WINDOW_SECONDS = 2.0
END_MARGIN = 2  # samples short of a frame edge a window ends: a resampled stream lags its input by one


@dataclass
class SpeechReader:
    """16 kHz audio pushed in pieces of any length -> (frames, width) features of its video frames."""

    fps: int
    block_frames: int = BLOCK_FRAMES
    lookahead_frames: int = LOOKAHEAD_FRAMES
    window_seconds: float = WINDOW_SECONDS
    encoder: SpeechEncoder = field(default_factory=load_encoder, repr=False)
    heard: int = field(default=0, init=False)  # samples pushed
    start: int = field(default=0, init=False)  # the sample ``audio`` begins at (below 0: silence before the stream)
    audio: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32), init=False, repr=False)
    blocks: dict[int, np.ndarray] = field(default_factory=dict, init=False, repr=False)  # read, not yet all used

    def __post_init__(self) -> None:
        if self.block_frames < 1 or self.lookahead_frames < 0:
            raise ValueError(f"need blocks of at least one frame and no negative lookahead, got "
                             f"{self.block_frames} and {self.lookahead_frames}")
        self.start = self._window_start(0)
        self.audio = np.zeros(-self.start, np.float32)

    @property
    def wait_frames(self) -> int:
        """Frames of audio past a frame's end its features may wait for (a block's first frame's)."""
        return self.block_frames + self.lookahead_frames - 1

    def push(self, pcm: np.ndarray) -> None:
        x = np.asarray(pcm, np.float32).reshape(-1)
        self.audio = np.concatenate([self.audio, x])
        self.heard += x.size

    def rewind(self, sample: int) -> None:
        """Forget the audio from ``sample`` on (it changed): blocks not yet used are read again."""
        if sample < self.heard:
            self.audio = self.audio[:max(sample - self.start, 0)]
            self.heard = max(sample, self.start)  # a rewind before the window kept hears silence from there
            self.blocks.clear()

    def ready(self, frame: int) -> bool:
        """Whether the audio frame ``frame``'s block is read from is all in."""
        return self.heard >= self._window_end(frame // self.block_frames)

    def features(self, first: int, count: int, final: bool = False) -> np.ndarray:
        """(count, width) features of frames ``first`` ..; ``final``: the audio ends where it is
        (silence after it). Earlier frames are not asked for again, so their audio is let go."""
        out = np.zeros((count, self.encoder.width), np.float32)
        for k in range(count):
            block, at = divmod(first + k, self.block_frames)
            if block not in self.blocks:
                self.blocks[block] = self._read(block, final)
            out[k] = self.blocks[block][at]
        following = (first + count) // self.block_frames
        for block in [b for b in self.blocks if b < following]:
            del self.blocks[block]
        keep = self._window_start(following)
        if keep > self.start:
            self.audio = self.audio[keep - self.start:]
            self.start = keep
        return out

    def _edge(self, frame: int) -> int:
        return frame * SAMPLE_RATE // self.fps

    def _window_end(self, block: int) -> int:
        return self._edge((block + 1) * self.block_frames + self.lookahead_frames) - END_MARGIN

    def _window_start(self, block: int) -> int:
        begin = self._window_end(block) - int(self.window_seconds * SAMPLE_RATE)
        return begin // POSITION_SAMPLES * POSITION_SAMPLES

    @torch.no_grad()
    def _read(self, block: int, final: bool) -> np.ndarray:
        end, begin = self._window_end(block), self._window_start(block)
        if end > self.heard and not final:
            raise RuntimeError(f"block {block} needs audio up to sample {end}; {self.heard} heard")
        x = self.audio[begin - self.start:end - self.start]
        x = np.concatenate([x, np.zeros(end - begin - x.size, np.float32)])
        mel = log_mel(x)
        count = (mel.shape[1] + 1) // 2  # encoder positions
        spans = []
        for k in range(self.block_frames):
            frame = block * self.block_frames + k
            lo = min((self._edge(frame) - begin) // POSITION_SAMPLES, count - 1)
            hi = min(max((self._edge(frame + 1) - begin) // POSITION_SAMPLES, lo + 1), count)
            spans.append((lo, hi))
        first = spans[0][0]
        positions = self.encoder(mel, slice(first, spans[-1][1])).numpy()  # the block's positions only
        return np.stack([positions[lo - first:hi - first].mean(axis=0) for lo, hi in spans]).astype(np.float32)
