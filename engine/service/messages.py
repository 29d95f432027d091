"""What crosses the boundary between the web process and an engine worker.

Small picklable dataclasses over one duplex connection per worker (handed over as they are to
a worker thread); pixels and audio of published frames do not travel here but through the
session's frame slots (``engine.service.slots``), referenced by slot number.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from engine.batch import Render
from engine.presets import DEFAULT_PRESET

if TYPE_CHECKING:
    from engine.photo.avatar import PhotoAvatar


@dataclass(frozen=True)
class SessionSpec:
    """What a session is opened with: a bundled avatar or a photo avatar, a seed, a preset.

    A photo session's ``avatar`` (default: the engine's default) is the face whose motion the
    photo copies. ``drawn``: a bundled avatar's frames are drawn by its renderer at the
    generated motion (``engine.stages.redraw``) instead of the decoder's."""

    avatar: str | None = None
    photo: PhotoAvatar | None = None  # found and cropped where the photo arrived
    seed: int = 0
    preset: str = DEFAULT_PRESET
    drawn: bool = False

    @property
    def render(self) -> Render:
        return Render.PHOTO if self.photo is not None else Render.DRAWN if self.drawn else Render.DECODED

    def frame_size(self, info: EngineInfo) -> tuple[int, int]:
        """(height, width) of this session's frames."""
        return self.photo.frame_size if self.photo is not None else info.frame_size


@dataclass(frozen=True)
class EngineInfo:
    """What the web process needs to know of the engine to serve it."""

    config: str
    fps: int
    sample_rate: int
    frame_size: tuple[int, int]  # (height, width)
    accepts_images: bool
    presets: tuple[str, ...]
    avatars: tuple[str, ...]
    default_avatar: str
    frames_per_chunk: int  # video frames one N chunk adds
    step_frames: int  # video frames one step publishes at most: the credit a session needs to run
    first_chunk_samples: int  # audio the first chunk needs (lookahead included) before it can run

    @property
    def samples_per_frame(self) -> int:
        return self.sample_rate // self.fps


# ---- web process -> worker ------------------------------------------------------------


@dataclass(frozen=True)
class OpenSession:
    session: str
    spec: SessionSpec
    slots_address: str  # where the worker finds the slots: a slot file's path, or in-process slots' name
    slot_count: int


@dataclass(frozen=True)
class PushAudio:
    session: str
    start: int  # sample index of samples[0] on the session's timeline
    samples: np.ndarray  # float32 mono at the engine's sample rate


@dataclass(frozen=True)
class SilenceFrom:
    """Interrupt: audio held by the engine from ``sample`` on becomes silence."""

    session: str
    sample: int


@dataclass(frozen=True)
class SetOrigin:
    """Frame ``n`` of the session is due at ``origin + n / fps`` (monotonic clock seconds)."""

    session: str
    origin: float


@dataclass(frozen=True)
class ReleaseSlots:
    session: str
    slots: tuple[int, ...]


@dataclass(frozen=True)
class CloseSession:
    session: str


@dataclass(frozen=True)
class Shutdown:
    pass


# ---- worker -> web process ------------------------------------------------------------


@dataclass(frozen=True)
class WorkerReady:
    pid: int
    device: str
    info: EngineInfo
    # What its start-up calibration measured (seconds per cost key and batch size): a replacement
    # for this worker starts from it instead of measuring again.
    calibration: dict = field(default_factory=dict)


@dataclass(frozen=True)
class WorkerFailed:
    """The worker could not start (bad weights, device error): the message says why."""

    message: str


@dataclass(frozen=True)
class SessionOpened:
    session: str
    error: str | None = None  # set when the session could not be opened (the request's fault)
    quality_level: int = 0
    quality_name: str = ""
    frames_per_chunk: int = 0  # of this session's preset
    first_chunk_samples: int = 0  # audio its first chunk needs before it can run
    lookahead_samples: int = 0  # audio pushed again this far back from the end still reaches its frames
    code: str = "bad_request"  # the API error code of a refusal: bad_request, or at_capacity (the worker is full)
    retry_after_s: int = 5  # an at_capacity refusal: when asking again may succeed


@dataclass(frozen=True)
class FrameRef:
    slot: int
    index: int  # global video frame number; pts = index / fps
    chunk: str  # the chunk that produced it, e.g. "N3" or "I2"


@dataclass(frozen=True)
class FramesReady:
    session: str
    frames: tuple[FrameRef, ...]


@dataclass(frozen=True)
class QualityLevelChanged:
    session: str
    level: int
    name: str
    reason: str


@dataclass(frozen=True)
class SessionFailed:
    session: str
    message: str


@dataclass(frozen=True)
class WorkerStats:
    """Sent every half second; doubles as the worker's heartbeat."""

    pid: int
    device: str
    sessions: int
    capacity: int  # more sessions this worker can hold in real time (an idle one: at least 1)
    batches: int  # batches run so far: progress, for the watchdog
    due: bool  # some session has work that can run now
    batch_mean: float
    chunk_ms: dict[str, float] = field(default_factory=dict)
    quality_levels: dict[str, int] = field(default_factory=dict)  # session -> level
    quality_changes: dict[str, int] = field(default_factory=dict)  # reason -> count
    state_bytes: dict[str, int] = field(default_factory=dict)  # session -> bytes held between chunks
    costs: dict = field(default_factory=dict)
    real_time: int = 0  # sessions its estimates hold in real time at best quality (0: a machine too slow)
    real_time_by_render: dict[str, int] = field(default_factory=dict)  # the same, for each way frames are made
    # Of ``sessions``, those the receiving web process opened (a node's worker serves several);
    # ``quality_levels`` and ``state_bytes`` list only these to a guest (see engine.service.worker_clients).
    client_sessions: int = 0
    shared_batches: int = 0  # batches whose sessions belonged to more than one web process
