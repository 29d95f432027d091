"""Named engine configurations.

A config fixes every shape in the engine: output size, VAE compression, DiT width and
depth, chunk schedule and sampler. ``tiny`` is the CPU real-time default; ``large`` is
shaped like a 1.3B video DiT for GPU benchmarks; ``puppet`` is the procedural renderer,
the ground truth the learned configs are measured against.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field


@dataclass(frozen=True)
class VAEConfig:
    """Causal video autoencoder: ``spatial_down`` x spatial, ``temporal_down`` x temporal.

    The first latent frame covers one video frame; every later one covers
    ``temporal_down`` frames.
    """

    height: int = 256
    width: int = 256
    latent_channels: int = 8
    spatial_down: int = 16
    temporal_down: int = 4
    enc_channels: tuple[int, ...] = (16, 32, 48, 64)
    dec_channels: tuple[int, ...] = (64, 48, 32)

    @property
    def latent_hw(self) -> tuple[int, int]:
        return self.height // self.spatial_down, self.width // self.spatial_down


@dataclass(frozen=True)
class DiTConfig:
    """Audio-to-video DiT over low-resolution latents (VAE latents pooled ``lr_factor`` x)."""

    width: int = 192
    depth: int = 6
    heads: int = 3
    patch: int = 1
    lr_factor: int = 2
    mlp_ratio: float = 4.0
    audio_tokens: int = 8
    window: int = 3  # previous latent frames kept (as K/V) for N chunks
    rope_theta: float = 10000.0


@dataclass(frozen=True)
class AudioConfig:
    sample_rate: int = 16000
    mel_bins: int = 80
    hop: int = 160  # 100 mel frames per second
    n_fft: int = 400
    context_ms: int = 80  # audio beside a latent frame's span, on average per side: the window is span + 2 x this
    # How much of that context lies after the span (the rest lies before it); None: half. It is the
    # lookahead every chunk waits for beyond its own audio (plus the last mel frame's overhang,
    # n_fft / 2 - hop samples: 2.5 ms).
    lookahead_ms: int | None = None
    width: int = 128


@dataclass(frozen=True)
class SRConfig:
    width: int = 48
    blocks: int = 2
    noise: float = 0.0


@dataclass(frozen=True)
class ScheduleConfig:
    """N/I chunk schedule in latent frames.

    ``chunk`` latents per N chunk; an I chunk replaces ``seam`` latents on each side of
    a boundary, anchored on ``anchor`` clean latents on each side.
    """

    chunk: int = 4
    seam: int = 1
    anchor: int = 1
    interp: bool = True

    def __post_init__(self) -> None:
        if self.chunk < 1 or self.seam < 0 or self.anchor < 0:
            raise ValueError("chunk must be >= 1, seam and anchor >= 0")
        if self.interp and (self.seam < 1 or self.anchor < 1 or 2 * self.seam + self.anchor > self.chunk):
            raise ValueError("interpolation needs 1 <= seam, 1 <= anchor and 2*seam + anchor <= chunk")


@dataclass(frozen=True)
class EngineConfig:
    name: str
    fps: int = 25
    vae: VAEConfig = field(default_factory=VAEConfig)
    dit: DiTConfig = field(default_factory=DiTConfig)
    audio: AudioConfig = field(default_factory=AudioConfig)
    sr: SRConfig = field(default_factory=SRConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    steps: int = 3
    interp_steps: int = 2  # I chunks start from two clean anchors and need fewer steps
    shift: float = 3.0
    dtype: str = "auto"  # compute dtype for DiT, SR and decoder: auto = bf16 on CUDA and on CPUs with bf16 units
    context_sigma: float = 0.05  # noise level given to history/anchor latents (matches training)
    # N chunks shorter than the history window append their own frames' K/V (seen beside the
    # window, as the chunk itself was) instead of rebuilding the whole window in one pass.
    append_history: bool = False
    # Guidance against silence: v = v(silence) + g * (v(audio) - v(silence)). g > 1 pushes the
    # mouth further from its silent pose (one batched pass of two); 1 turns it off. Only the
    # first ``guidance_steps`` sampling steps are guided: the first (highest-noise) step decides
    # the mouth's pose, and later guided steps add cost and seams, not lip sync.
    audio_guidance: float = 1.0
    guidance_steps: int = 1
    # Temporal deblocking (engine.stages.deblock): the share of each latent group's jump
    # carried into the group's first frames; () turns it off.
    deblock: tuple[float, ...] = (0.3, 0.1)
    # The ``fast`` preset's chunk (latent frames, no I chunks); None: the schedule's own. A smaller
    # chunk means less audio to wait for before its first frame (the chunk wait of the latency).
    fast_chunk: int | None = None
    # The ``fast`` preset's denoising steps per N chunk; None: ``steps``. Short chunks run the
    # DiT more often per second of video, so fewer steps keep them real time.
    fast_steps: int | None = None
    # Steps of the N chunks of sessions whose frames are drawn at the motion the latent reader
    # reads off the DiT's latents (drawn, photo), at most the preset's; None: the preset's. No one
    # sees those latents, and the reader reads a 1-step sample's motion as well as a 2-step one's.
    redrawn_steps: int | None = None

    def fast_schedule(self, steps: int) -> tuple[int, int]:
        """The ``fast`` preset's (chunk, steps) for an engine sampling at ``steps``."""
        return self.fast_chunk or self.schedule.chunk, self.fast_steps or steps

    def __post_init__(self) -> None:
        for steps in (self.steps, self.interp_steps, self.fast_steps or self.steps, self.redrawn_steps or self.steps):
            if not 1 <= steps <= 8:
                raise ValueError(f"steps must be in 1..8, got {steps}")
        if self.guidance_steps < 1:
            raise ValueError(f"guidance_steps must be >= 1, got {self.guidance_steps}")
        if not 0.0 <= self.audio_guidance <= 10.0:
            raise ValueError(f"audio_guidance must be in 0..10, got {self.audio_guidance}")
        if len(self.deblock) > self.vae.temporal_down or not all(0.0 <= w < 1.0 for w in self.deblock):
            raise ValueError(f"deblock needs at most temporal_down weights in [0, 1), got {self.deblock}")
        if self.audio.sample_rate % self.fps:
            raise ValueError("sample_rate must be a multiple of fps")
        h, w = self.vae.latent_hw
        if h % (self.dit.lr_factor * self.dit.patch) or w % (self.dit.lr_factor * self.dit.patch):
            raise ValueError("latent size must divide by lr_factor * patch")

    @property
    def samples_per_frame(self) -> int:
        return self.audio.sample_rate // self.fps

    def replace(self, **changes: object) -> EngineConfig:
        return dataclasses.replace(self, **changes)

    def with_schedule(self, **changes: object) -> EngineConfig:
        return dataclasses.replace(self, schedule=dataclasses.replace(self.schedule, **changes))

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> EngineConfig:
        raw = json.loads(text)
        parts = {
            "vae": VAEConfig, "dit": DiTConfig, "audio": AudioConfig, "sr": SRConfig, "schedule": ScheduleConfig,
        }
        for key, kind in parts.items():
            raw[key] = kind(**_tuples(raw[key]))
        return cls(**_tuples(raw))


def _tuples(values: dict) -> dict:
    """JSON arrays back to the tuples the frozen configs hold."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}


PUPPET = "puppet"  # the config name that selects the procedural engine instead of the learned one

CONFIGS: dict[str, EngineConfig] = {
    # Guidance off: with the bundled weights it lowers held-out lip sync (r 0.925 at g 1,
    # 0.921 at 1.5, 0.908 at 2.5) and costs one batch-of-two DiT pass per guided chunk.
    # The fast preset: one latent a chunk (a quarter of the chunk wait of 4) at 2 steps. The bundled
    # weights are trained on N chunks of 1-4 latents and a 30 ms lookahead (32.5 ms with the last
    # mel frame's overhang); held out, at chunks of 1 they score lip sync r 0.928 / seams 0.97 /
    # similarity to the reference 0.998 at 2 steps, r 0.924 / 1.00 at 3 steps, which cost a third
    # more DiT time a chunk.
    # Drawn and photo sessions at 1 step: held out, r 0.924 / seams 0.91 / similarity 0.999 (0.923 /
    # 0.93 / 0.998 at 2), a fifth less compute a chunk. Decoded frames keep 2: at 1 the decoder
    # shows more dark blotches.
    "tiny": EngineConfig(name="tiny", fast_chunk=1, fast_steps=2, redrawn_steps=1, append_history=True,
                         audio=AudioConfig(lookahead_ms=30)),
    "large": EngineConfig(
        name="large",
        vae=VAEConfig(
            height=480, width=832, latent_channels=16, spatial_down=8,
            enc_channels=(64, 128, 256), dec_channels=(256, 128, 64),
        ),
        dit=DiTConfig(width=1536, depth=30, heads=12, patch=1, lr_factor=2, mlp_ratio=8960 / 1536, audio_tokens=16,
                      window=3),
        audio=AudioConfig(width=512),
        sr=SRConfig(width=128, blocks=4),
        schedule=ScheduleConfig(chunk=3, seam=1, anchor=1),
    ),
    # Small enough for long soak tests in CI: every code path of tiny, tiny shapes.
    "micro": EngineConfig(
        name="micro",
        vae=VAEConfig(height=32, width=32, latent_channels=4, spatial_down=8, enc_channels=(8, 8, 8),
                      dec_channels=(8, 8, 8)),
        dit=DiTConfig(width=32, depth=2, heads=2, audio_tokens=2, window=2),
        audio=AudioConfig(width=16),
        sr=SRConfig(width=8, blocks=1),
        schedule=ScheduleConfig(chunk=3, seam=1, anchor=1),
        steps=2,
        dtype="float32",  # one dtype on every machine: its tests compare batched and single runs closely
    ),
    # The procedural renderer as an engine (engine.puppet.engine): 256x256 at 25 fps, no I
    # chunks; it has no model, so the VAE/DiT/sampler fields are unused.
    PUPPET: EngineConfig(name=PUPPET, schedule=ScheduleConfig(interp=False)),
}
# Shaped like a 14B video DiT (5120 wide, 40 blocks of 40 heads, FFN 13824; audio tokens as wide:
# 14.3B parameters), around large's autoencoder and schedule. It exists to exercise sharding over
# several GPUs (avatar bench --shard N): no weights, and never built whole on a CPU.
CONFIGS["xl"] = CONFIGS["large"].replace(
    name="xl",
    dit=DiTConfig(width=5120, depth=40, heads=40, patch=1, lr_factor=2, mlp_ratio=13824 / 5120, audio_tokens=16,
                  window=3),
    audio=AudioConfig(width=5120),
)


class ConfiguredEngine:
    """What every engine (learned or procedural) tells its callers about its output."""

    config: EngineConfig

    @property
    def fps(self) -> int:
        return self.config.fps

    @property
    def sample_rate(self) -> int:
        return self.config.audio.sample_rate

    @property
    def frame_size(self) -> tuple[int, int]:
        return self.config.vae.height, self.config.vae.width


def get_config(name: str) -> EngineConfig:
    try:
        return CONFIGS[name]
    except KeyError:
        raise KeyError(f"unknown config {name!r}; choose one of: {', '.join(sorted(CONFIGS))}") from None
