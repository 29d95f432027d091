"""Wire types: HTTP bodies and websocket control messages, all validated with pydantic.

Control messages are JSON objects discriminated by ``type``. Client audio may also arrive
as a binary websocket message: raw PCM16 little-endian mono, announced by the
``audio.append`` message just before it (which then carries no ``audio`` field), so the
sample rate always travels in a typed message.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter, field_validator

Mode = Literal["mirror", "agent"]
# What speak text may not hold: C0 controls but tab, newline and carriage return; DEL and C1; lone surrogates.
_NOT_TEXT = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
MIN_RATE, MAX_RATE = 8_000, 96_000
Voice = Annotated[str, StringConstraints(max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_+\-]*$")]
# The control socket's subprotocols: a client offers both, the server selects the first. The
# session token rides in the second, so it never appears in a URL (nor in an access log).
CONTROL_SUBPROTOCOL = "avatar.v1"
TOKEN_SUBPROTOCOL = "avatar.token."


def control_subprotocols(token: str) -> list[str]:
    return [CONTROL_SUBPROTOCOL, TOKEN_SUBPROTOCOL + token]


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---- HTTP ----------------------------------------------------------------------------


class IceServer(BaseModel):
    """One STUN/TURN server, in the shape both aiortc and the browser's RTCIceServer accept."""

    urls: list[str]
    username: str | None = None
    credential: str | None = None

    @classmethod
    def parse(cls, spec: str) -> IceServer:
        """``stun:host:port`` or ``turn:user:secret@host:port[?transport=udp]``."""
        scheme, sep, rest = spec.partition(":")
        if not sep or scheme not in ("stun", "stuns", "turn", "turns") or not rest:
            raise ValueError(f"bad ICE server {spec!r}: expected stun:host:port or turn:user:pass@host:port")
        if "@" not in rest:
            return cls(urls=[spec])
        creds, _, hostport = rest.rpartition("@")
        username, _, credential = creds.partition(":")
        return cls(urls=[f"{scheme}:{hostport}"], username=username or None, credential=credential or None)


class SessionCreate(_Message):
    avatar: str | None = Field(None, description="built-in identity name; server default when omitted")
    image: str | None = Field(
        None, description="instead of avatar: a reference image of a stylised avatar, base64 PNG/JPEG/WebP"
    )
    mode: Mode | None = Field(None, description="mirror: the microphone drives the avatar; agent: the control API")
    quality: str | None = Field(None, description="engine preset; the server's configured one when omitted")
    drawn: bool | None = Field(
        None, description="a bundled avatar drawn by its renderer at the generated motion (sharp) instead of the "
        "decoder's frames; server default when omitted; a photo's frames are always its own pixels"
    )
    record: bool = Field(False, description="write the session as H.264/AAC MP4 to the server's record folder")
    voice: Voice | None = Field(None, description="voice for `speak`: an espeak-ng voice, or a Piper voice name")
    barge_in: bool | None = Field(None, description="agent mode: user speech interrupts the avatar (server default)")
    user_audio: bool | None = Field(None, description="agent mode: user.speech_stopped carries the segment's PCM")
    seed: int = 0


class SessionCreated(BaseModel):
    session_id: str
    token: str
    ice_servers: list[IceServer]
    mode: Mode
    avatar: str | None
    drawn: bool = Field(description="the bundled avatar is drawn by its renderer at the generated motion")
    fps: int
    sample_rate: int
    width: int
    height: int


class SessionDescription(_Message):
    sdp: str
    type: Literal["offer", "answer"]


class ErrorBody(BaseModel):
    code: str
    message: str


class ErrorResponse(BaseModel):
    error: ErrorBody


# ---- control: client -> server -------------------------------------------------------


class Speak(_Message):
    type: Literal["speak"]
    text: str = Field(min_length=1, description="plain text: control characters other than tab, newline and "
                      "carriage return are refused (bad_message), as are unpaired surrogates")
    utterance_id: str | None = Field(None, max_length=64)
    voice: Voice | None = None

    @field_validator("text")
    @classmethod
    def _plain(cls, value: str) -> str:
        """A TTS backend handed a NUL (or any control byte) may fail in native code: refused here, at
        the message, with its position, rather than somewhere in synthesis."""
        found = _NOT_TEXT.search(value)
        if found is not None:
            raise ValueError(f"control character U+{ord(found.group()):04X} at position {found.start()}; "
                             f"send plain text (tab and newline allowed)")
        return value


class AudioAppend(_Message):
    type: Literal["audio.append"]
    sample_rate: int = Field(ge=MIN_RATE, le=MAX_RATE)
    audio: str | None = Field(None, description="base64 PCM16 LE mono; omitted: the next binary message carries it")
    utterance_id: str | None = Field(
        None, max_length=64, description="names the streamed utterance; a new id commits the previous one"
    )

    @field_validator("audio")
    @classmethod
    def _b64(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise ValueError("audio is not valid base64") from exc
        return value

    def pcm(self) -> bytes | None:
        return None if self.audio is None else base64.b64decode(self.audio)


class AudioCommit(_Message):
    type: Literal["audio.commit"]
    utterance_id: str | None = Field(None, max_length=64)


class Interrupt(_Message):
    type: Literal["interrupt"]


class Configure(_Message):
    type: Literal["config"]
    mode: Mode | None = None
    voice: Voice | None = None
    barge_in: bool | None = None
    user_audio: bool | None = None


class Ping(_Message):
    type: Literal["ping"]
    id: str | int | None = None


ClientMessage = Annotated[Speak | AudioAppend | AudioCommit | Interrupt | Configure | Ping, Field(discriminator="type")]
client_message: TypeAdapter[ClientMessage] = TypeAdapter(ClientMessage)


# ---- control: server -> client -------------------------------------------------------


class SessionReady(BaseModel):
    type: Literal["session.ready"] = "session.ready"
    session_id: str
    mode: Mode
    avatar: str | None
    fps: int
    sample_rate: int
    width: int
    height: int


class UtteranceQueued(BaseModel):
    type: Literal["utterance.queued"] = "utterance.queued"
    utterance_id: str
    duration_s: float


class PlaybackStarted(BaseModel):
    type: Literal["playback.started"] = "playback.started"
    utterance_id: str
    pts: float = Field(description="media time (s) of the utterance's first frame played out")


class PlaybackFinished(BaseModel):
    type: Literal["playback.finished"] = "playback.finished"
    utterance_id: str
    pts: float | None = Field(description="media time (s) of the last frame played; null if never played")
    interrupted: bool = False


class MetricsEvent(BaseModel):
    type: Literal["metrics"] = "metrics"
    fps: float
    playout_delay_ms: float
    buffer_depth: int
    deadline_misses: int
    frames_played: int = Field(description="fresh frames shown (repeats excluded)")
    frames_generated: int
    engine_backlog_ms: float
    av_offset_ms: float = Field(description="audio minus video release phase, measured; positive: audio later")
    mic_seconds: float
    mic_buffer_ms: float = Field(0.0, description="microphone audio waiting for the feed clock (grows with its jitter)")
    mic_underruns: int = Field(0, description="times the microphone's due audio was not in yet")
    engine_state_bytes: int = Field(description="bytes the engine holds between chunks (flat over a session)")


class UserSpeechStarted(BaseModel):
    """Voice activity began on the user's microphone (agent mode)."""

    type: Literal["user.speech_started"] = "user.speech_started"
    mic_time: float = Field(description="media time (s) of the onset on the microphone stream (0 = its first sample)")
    pts: float = Field(description="avatar media time (s) being heard when it was detected")
    interrupting: bool = Field(description="barge-in: the avatar was speaking and is being interrupted")


class UserSpeechStopped(BaseModel):
    """Voice activity ended; with ``user_audio`` on, the segment's audio for a speech recogniser."""

    type: Literal["user.speech_stopped"] = "user.speech_stopped"
    mic_time: float = Field(description="media time (s) on the microphone stream where the speech ended")
    duration_s: float
    pts: float = Field(description="avatar media time (s) being heard when it was detected")
    sample_rate: int
    audio: str | None = Field(None, description="base64 PCM16 LE mono of the segment (with a short pre-roll)")

    def pcm(self) -> bytes | None:
        return None if self.audio is None else base64.b64decode(self.audio)


class Pong(BaseModel):
    type: Literal["pong"] = "pong"
    id: str | int | None = None
    server_time: float


class ErrorEvent(BaseModel):
    type: Literal["error"] = "error"
    code: str
    message: str
    utterance_id: str | None = Field(None, description="the utterance the error is about, if any")


class QualityChanged(BaseModel):
    """The engine moved this session up or down its quality ladder (level 0 is the best)."""

    type: Literal["quality"] = "quality"
    level: int
    name: str = Field(description="what the level keeps, e.g. 'no-interp,steps=3,guided'")
    reason: str = Field(description="overload | recovered | warm_start")


ServerEvent = (
    SessionReady
    | UtteranceQueued
    | PlaybackStarted
    | PlaybackFinished
    | UserSpeechStarted
    | UserSpeechStopped
    | MetricsEvent
    | Pong
    | QualityChanged
    | ErrorEvent
)
server_event: TypeAdapter[ServerEvent] = TypeAdapter(
    Annotated[ServerEvent, Field(discriminator="type")]  # type: ignore[valid-type]
)
