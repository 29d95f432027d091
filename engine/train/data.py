"""Procedural talking-head clips: an identity, its speech, the face track and frames."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from engine.config import EngineConfig
from engine.photo.crops import CROP
from engine.puppet import FaceState, Identity, reference_image, render
from engine.puppet.mouth import phone_track
from engine.puppet.stream import face_track_from_mouth
from engine.train.speech import VOICES, utterance

TRAIN_IDENTITY_SEEDS = range(0, 10_000)  # evaluation identities use seeds >= 10_000


@dataclass
class TrainingClip:
    identity: Identity
    audio: np.ndarray  # float32 mono, exactly frames * samples_per_frame samples
    states: list[FaceState]

    def frames(self, lo: int, hi: int, size: int) -> np.ndarray:
        return np.stack([render(self.identity, s, size) for s in self.states[lo:hi]])

    @property
    def num_frames(self) -> int:
        return len(self.states)


def make_clip(config: EngineConfig, seed: int, seconds: float = 8.0,
              voices: tuple[str, ...] = VOICES) -> TrainingClip:
    rng = np.random.default_rng(seed)
    identity = Identity.sample(rng, name=f"train{seed}")
    spf, td = config.samples_per_frame, config.vae.temporal_down
    speech = utterance(rng, config.audio.sample_rate, voices, seconds)
    frames = 1 + (speech.pcm.size // spf - 1) // td * td  # 1 + k*T frames: whole latents
    pcm = speech.pcm[: frames * spf]
    truth = phone_track(speech.phones, pcm, config.audio.sample_rate, config.fps)
    states = face_track_from_mouth(truth, seed=seed)[:frames]
    return TrainingClip(identity, pcm, states)


def to_tensor(frames: np.ndarray) -> torch.Tensor:
    """(T, H, W, 3) uint8 -> (T, 3, H, W) in [-1, 1]."""
    return torch.from_numpy(frames).permute(0, 3, 1, 2).float() / 127.5 - 1


def reference_tensor(identity: Identity, size: int) -> torch.Tensor:
    return to_tensor(reference_image(identity, size)[None])


EYES = (0.32, 0.50, 0.28, 0.72)  # top, bottom, left, right: where the eyes and brows move (gaze, blinks)


def eyes_weight(height: int, width: int, extra: float) -> torch.Tensor:
    """(height, width): ``extra`` over the eyes' region, 0 elsewhere (added to a weight map)."""
    return _box(torch.zeros(height, width), EYES, extra)


def _box(w: torch.Tensor, box: tuple[float, float, float, float], extra: float) -> torch.Tensor:
    """``w`` (height, width) with ``extra`` added over ``box`` (top, bottom, left, right, as fractions)."""
    height, width = w.shape
    t, b, left, r = box
    w[int(t * height):math.ceil(b * height), int(left * width):math.ceil(r * width)] += extra
    return w


def mouth_weight(height: int, width: int, extra: float) -> torch.Tensor:
    """(height, width) loss weight: 1, plus ``extra`` over the mouth region the lip-sync probe
    reads (``engine.photo.crops.CROP``), on any grid (pixels, latent tokens). Lip sync lives in
    a few percent of the frame, which a uniform loss would drown out."""
    return _box(torch.ones(height, width), CROP, extra)
