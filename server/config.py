"""Server settings: small groups by concern, filled from defaults, then ``AVATAR_*`` env vars, then CLI flags.

Every limit the server enforces lives here so that an operator can see (and change) all of
them in one place, and so tests can build an app with tiny limits. Each concern is its own
frozen model (:class:`NetworkSettings`, :class:`EngineSettings`, ...), the one place its
defaults are written; :class:`Settings` holds one of each (``settings.network.port``) and
a layer is handed only the groups it reads. Field names are unique across the groups, so a
field's name alone names it: ``AVATAR_<NAME>`` in the environment (read by pydantic-settings),
``Settings(<name>=...)``, and the flag of the same name.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import EnvSettingsSource
from pydantic_settings.sources.utils import parse_env_vars

from engine.presets import DEFAULT_PRESET, Preset
from server.base.protocol import IceServer, Mode
from server.media.playout import PlayoutConfig
from server.voice.vad import VadConfig

ENV_PREFIX = "AVATAR_"


def _split_commas(value: Any) -> Any:
    return [v.strip() for v in value.split(",") if v.strip()] if isinstance(value, str) else value


def _port_range(value: Any) -> Any:
    """``"40000-40049"`` -> ``(40000, 40049)``; the range must hold at least one unprivileged port."""
    if isinstance(value, str):
        low, sep, high = value.partition("-")
        if not sep or not low.strip().isdigit() or not high.strip().isdigit():
            raise ValueError(f"bad port range {value!r}: expected LOW-HIGH, e.g. 40000-40049")
        value = (int(low), int(high))
    low, high = value
    if not 1024 <= low <= high <= 65535:
        raise ValueError(f"bad port range {low}-{high}: need 1024 <= LOW <= HIGH <= 65535")
    return value


CommaList = Annotated[list[str], BeforeValidator(_split_commas)]
PortRange = Annotated[tuple[int, int], BeforeValidator(_port_range)]


class Group(BaseModel):
    """One concern's settings: frozen, unknown names refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")


def default_engine_threads() -> int:
    """All the cores this process may run on but one. On 2 cores the engine on one thread beside
    the WebRTC stack kept tighter deadlines than on two that it shared (``make soak``, tiny, fast:
    0.11% misses against 0.30%; ``bench/latency.py``: ``speak`` 0.54 s against 0.78 s)."""
    return max(1, len(os.sched_getaffinity(0)) - 1)


class NetworkSettings(Group):
    """Where the server listens, and how WebRTC peers reach it (STUN/TURN, UDP ports, announced address)."""

    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    ice_servers: list[IceServer] = Field(default_factory=list)
    ice_ports: PortRange | None = Field(None, description="UDP ports for media, LOW-HIGH (default: any free port)")
    public_address: ipaddress.IPv4Address | None = Field(
        None, description="the IPv4 address ICE announces instead of the interfaces' own (a NAT's or container host's)"
    )

    @field_validator("ice_servers", mode="before")
    @classmethod
    def _parse_ice(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [s for s in value.replace(",", " ").split() if s]
        if isinstance(value, list):
            return [IceServer.parse(v) if isinstance(v, str) else v for v in value]
        return value

    @property
    def exposed(self) -> bool:
        """Bound to an address other machines may reach (a container's 0.0.0.0 included)."""
        return not _is_loopback(self.host)


class AccessSettings(Group):
    """Who may use the server: the bearer token, the pages allowed to call it, and per-client session rates."""

    auth_token: str | None = Field(None, description="required as a bearer token to create sessions")
    cors_origins: CommaList = Field(
        default_factory=list, description="origins (scheme://host[:port]) whose pages may call the API, WHIP and WHEP"
    )
    proxy_headers: bool = Field(
        False, description="trust X-Forwarded-For from 127.0.0.1 (a reverse proxy on this machine) for client limits"
    )
    client_sessions_per_minute: int = Field(30, ge=1, description="session creations per client in any 60 s")
    client_max_unoffered: int = Field(4, ge=1, description="sessions of one client waiting for their offer")


class EngineSettings(Group):
    """The engine: its config and devices, its workers and their parallel plan, admission and guidance."""

    config: str = "tiny"
    device: str = "cpu"
    engine_threads: int = Field(
        default_factory=default_engine_threads, ge=1,
        description="torch threads for the engine; default all cores but one, which the WebRTC encoders, "
        "decoders and the TTS use beside it",
    )
    engine: Literal["subprocess", "inprocess", "node"] = Field(
        "subprocess", description="where engine workers run: their own processes, a thread of the server, or "
        "the node's shared workers (a web process of `--web-processes`, at node_sockets)"
    )
    engine_workers: int | None = Field(None, ge=1, description="engine worker processes; default one per device")
    sequence_parallel: int = Field(1, ge=1, description="ranks (devices) that split each chunk's tokens, per worker")
    pipeline_parallel: int = Field(1, ge=1, description="ranks (devices) holding consecutive DiT blocks, per worker")
    shard: int = Field(1, ge=1, description="ranks (devices) sharding the DiT's weights (FSDP2), per worker")
    offload: bool = Field(False, description="modules in pinned CPU memory, each block copied in as it runs")
    engine_settle_s: float | None = Field(
        None, ge=0, description="after admitting a session a worker admits the next only once its live cost is "
        "measured, this long later; default 2 s on a CPU, 0.5 s on an accelerator"
    )
    max_sessions: int | None = Field(
        None, ge=1, description="an upper cap on sessions; admission follows the engine's measured capacity"
    )
    engine_capacity_margin: float | None = Field(
        None, ge=-1, lt=1, description="share of each chunk period a worker keeps free when counting its capacity; "
        "default 0.35 on a CPU whose cores the web process shares, 0.2 otherwise; below 0 admits sessions up to "
        "max_sessions whatever the live estimate says"
    )
    guidance: float | None = Field(None, ge=0, le=10, description="audio guidance; None: the engine config's")
    warm_up: bool = Field(True, description="run a silent session at start-up so the first user's frames come fast")


class SessionSettings(Group):
    """What a session gets when it does not say (mode, preset, avatar, render), and where its files go."""

    default_mode: Mode = "mirror"
    default_quality: Preset = Field(
        DEFAULT_PRESET, description="preset for sessions that name none; on 2 CPU cores only `fast` keeps real time"
    )
    default_avatar: str | None = Field(None, description="the engine's default identity when unset")
    page_avatar: str | None = Field(
        "grace_hopper", description="the face the demo page starts on: a bundled real person (or any avatar "
        "name); where the engine does not offer it, the default avatar"
    )
    drawn: bool = Field(
        True, description="bundled avatars drawn by their renderer at the generated motion (sharp) for sessions "
        "that do not say; false: the decoder's frames (less CPU a frame)"
    )
    record_dir: Path = Path("recordings")
    avatar_store: str | None = Field(
        None, description="folder of the personal avatars (default: AVATAR_STORE, else the user's data folder); "
        "cluster nodes share one"
    )


class VoiceSettings(Group):
    """The avatar's speech (TTS backend, voice, agent speech queues) and agent mode's listening (VAD, barge-in)."""

    voice: str | None = Field(None, description="voice for speak; the TTS backend's default when unset")
    tts: Literal["espeak", "piper"] = Field(
        "piper", description="built-in TTS for speak: Piper's bundled joe voice (wheels only), or espeak-ng"
    )
    piper_model: Path | None = Field(None, description="a Piper .onnx voice (with its .onnx.json) to use")
    max_audio_backlog_s: float = Field(60.0, gt=0, description="queued + uncommitted agent speech per session")
    max_queued_utterances: int = Field(
        64, ge=1, description="agent utterances queued per session (spoken, pushed or waiting for synthesis)"
    )
    vad: bool = Field(True, description="agent mode: voice activity detection on the user's microphone")
    barge_in: bool = Field(
        False, description="agent mode: user speech interrupts the avatar (sessions and the demo page turn it on)"
    )
    user_audio: bool = Field(False, description="agent mode: user.speech_stopped carries the segment's PCM")
    vad_threshold: float = Field(0.5, gt=0, lt=1, description="speech probability that starts a segment")
    vad_min_silence_ms: int = Field(480, ge=32, description="silence that ends a user speech segment")

    def vad_config(self) -> VadConfig | None:
        """Agent mode's voice activity detection on the user's microphone; None when turned off."""
        if not self.vad:
            return None
        return VadConfig(
            threshold=self.vad_threshold,
            neg_threshold=max(0.01, self.vad_threshold - 0.15),
            min_silence_ms=self.vad_min_silence_ms,
        )


class FeedSettings(Group):
    """Audio into the engine: the microphone's buffers, the real-time feed clock, the engine's audio backlog."""

    mic_buffer_s: float = Field(0.3, gt=0, description="inbound microphone audio kept waiting for the feed clock")
    mic_jitter_packets: int = Field(
        2, ge=0, le=15, description="later 20 ms microphone packets a missing one is waited for before it is "
        "given up: room for reordered packets, costing 20 ms each only while a packet is missing"
    )
    feed_holdback_s: float = Field(0.04, ge=0, description="feed clock runs this far behind wall time (mic jitter)")
    feed_tick_s: float = Field(0.02, gt=0)
    max_engine_backlog_s: float = Field(
        8.0, gt=0, description="memory guard: audio fed to the engine but not yet turned into frames"
    )
    agent_engine_backlog_s: float = Field(
        2.0,
        gt=0,
        description="agent mode: audio fed to the engine ahead of its frames, at most; when the engine runs "
        "late, speech waits in the intake (and can still be interrupted) instead of queueing behind silence",
    )


class PlayoutSettings(Group):
    """The jitter buffer between the engine's frames and the peer: its delay bounds and capacity."""

    playout_delay_s: float = Field(PlayoutConfig.initial_delay, ge=0, description="initial playout delay L")
    playout_preview: bool = Field(
        True, description="show the first frame as soon as it is in, held until playout reaches it (one L sooner)"
    )
    playout_min_delay_s: float = Field(PlayoutConfig.min_delay, ge=0)
    playout_max_delay_s: float = Field(PlayoutConfig.max_delay, gt=0)
    playout_capacity_frames: int = Field(PlayoutConfig.capacity_frames, ge=4)

    def playout(self, fps: int, sample_rate: int) -> PlayoutConfig:
        return PlayoutConfig(
            fps=fps,
            sample_rate=sample_rate,
            initial_delay=self.playout_delay_s,
            min_delay=self.playout_min_delay_s,
            max_delay=self.playout_max_delay_s,
            capacity_frames=self.playout_capacity_frames,
            preview=self.playout_preview,
        )


class InputLimits(Group):
    """Caps on what a client sends or opens: SDP, trickle ICE, control messages, text, images, viewers."""

    max_sdp_bytes: int = Field(32_768, ge=1024)
    max_trickle_fragments: int = Field(64, ge=1, description="trickle ICE fragments (PATCHes) per WHIP/WHEP resource")
    max_trickle_candidates: int = Field(
        64, ge=1, description="trickled ICE candidates per WHIP/WHEP resource, all fragments together "
        "(each fragment carries at most 32, as each section of an offer)"
    )
    max_control_bytes: int = Field(512 * 1024, ge=1024, description="largest websocket message, text or binary")
    max_control_depth: int = Field(32, ge=2, description="nesting of a control message's JSON (arrays and objects)")
    control_messages_per_s: float = Field(
        200.0, gt=0, description="control socket messages (text or binary) read per second; a burst of two "
        "seconds' worth is read at once, past it the socket is read no faster (the client's sends back up)"
    )
    max_text_chars: int = Field(2_000, ge=1)
    max_image_bytes: int = Field(2 * 1024 * 1024, ge=1024, description="largest reference image file (bytes)")
    max_image_side: int = Field(4096, ge=64, description="reference image width and height, read from its header")
    max_image_pixels: int = Field(4096 * 4096, ge=4096, description="reference image pixels, read from its header")
    max_viewers: int = Field(4, ge=0, description="WHEP viewers per session")


class EnrolmentSettings(Group):
    """Personal avatars' uploads and enrolments: how many at once, per client, for how long, and where."""

    max_enrolments: int = Field(
        1, ge=1, description="enrolments at once, uploads still arriving counted with those running (429 past it)"
    )
    client_max_uploads: int = Field(1, ge=1, description="uploads one client may have arriving at once")
    enrolment_timeout_s: float = Field(
        300.0, gt=0, description="an enrolment running longer fails with `timeout` (its slot freed)"
    )
    upload_dir: Path | None = Field(
        None, description="folder the uploads lie in while they arrive and are enrolled (default: the "
        "system's temporary folder's avatar-uploads)"
    )


def default_web_processes() -> int:
    """One web process per four cores this process may run on, at least one: on a small machine the
    engine needs the cores more than a second event loop would."""
    return max(1, len(os.sched_getaffinity(0)) // 4)


class NodeSettings(Group):
    """How the node's work is split between processes: web processes behind one front, their shared
    engine workers, and what a web process's event loop may carry."""

    web_processes: int = Field(
        default_factory=default_web_processes, ge=1,
        description="web processes behind one HTTP front, sharing the node's engine workers; default one per "
        "four cores",
    )
    node_sockets: str | None = Field(None, description="the node's engine worker sockets (set by the node)")
    node_key: str | None = Field(None, description="the key to the node's engine workers, hex (set by the node)")
    web_loop_budget: float = Field(
        0.7, gt=0, le=1, description="share of its event loop thread a web process fills before it refuses new "
        "sessions (measured; a process with no session always takes one)",
    )


class TimingSettings(Group):
    """Deadlines that close stalled requests, sessions and peers, and how often a session reports its figures."""

    header_timeout_s: float = Field(10.0, gt=0, description="an HTTP request's line and headers arrive within this")
    body_timeout_s: float = Field(30.0, gt=0, description="an HTTP request's body arrives within this after them")
    offer_timeout_s: float = Field(10.0, gt=0, description="a created session that never gets an offer is reaped")
    connect_timeout_s: float = Field(8.0, gt=0, description="offer answered but ICE/DTLS never connects")
    peer_timeout_s: float = Field(6.0, gt=0, description="no RTCP or media from the peer for this long: it is gone")
    control_handover_s: float = Field(
        1.0, ge=0, description="a new control socket waits this long for the previous one to finish closing"
    )
    ws_ping_interval_s: float = Field(5.0, gt=0, description="a websocket's keepalive ping is sent this often")
    ws_ping_timeout_s: float = Field(
        5.0, gt=0, description="a websocket whose client neither answers a ping nor sends anything for this long is "
        "closed (the wait runs on while the server is itself behind reading that client)"
    )
    metrics_interval_s: float = Field(1.0, gt=0)
    shutdown_grace_s: float = Field(
        5.0, gt=0, description="on shutdown, open requests and sockets get this long to end before they are "
        "cancelled (a flooding client's unread backlog would otherwise hold the shutdown)"
    )


class Settings(BaseModel):
    """Everything ``avatar serve`` can be told, one group per concern; env var for field ``x`` is ``AVATAR_X``.

    Built from field names, whichever group holds them (``Settings(port=0, vad=False)``), or from
    the groups themselves (``Settings(network=NetworkSettings(port=0))``); a name no group has is
    refused.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    network: NetworkSettings = NetworkSettings()
    access: AccessSettings = AccessSettings()
    engine: EngineSettings = Field(default_factory=EngineSettings)
    session: SessionSettings = SessionSettings()
    speech: VoiceSettings = VoiceSettings()
    feed: FeedSettings = FeedSettings()
    jitter: PlayoutSettings = PlayoutSettings()
    limits: InputLimits = InputLimits()
    enrolment: EnrolmentSettings = EnrolmentSettings()
    timing: TimingSettings = TimingSettings()
    node: NodeSettings = Field(default_factory=NodeSettings)

    @model_validator(mode="before")
    @classmethod
    def _by_group(cls, values: Any) -> Any:
        """Field names sorted into their groups; a group given whole (as its model) kept as it is."""
        if not isinstance(values, Mapping):
            return values
        grouped: dict[str, Any] = {}
        for name, value in values.items():
            if name in cls.model_fields and isinstance(value, BaseModel):
                grouped[name] = value
            elif name in GROUP_OF:
                grouped.setdefault(GROUP_OF[name], {})[name] = value
            else:
                grouped[name] = value  # refused by extra="forbid", under its own name
        return grouped

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Defaults, then ``AVATAR_*`` variables, then explicit overrides (CLI flags that were given)."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for group in SETTING_GROUPS.values():
            values.update(_Environment(group, environ)())
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls.model_validate(values)

    def replace(self, **changes: Any) -> Settings:
        """These settings with some fields (by name) changed, validated."""
        return Settings.model_validate({**self.given(), **changes})

    def given(self) -> dict[str, Any]:
        """The fields given explicitly (not defaults), by name, as JSON values: what travels to a node."""
        return {name: value for group in SETTING_GROUPS for name, value in
                getattr(self, group).model_dump(mode="json", exclude_unset=True).items()}

    def check_bind(self) -> None:
        """Refuse to expose an unauthenticated server beyond this machine."""
        if self.access.auth_token or not self.network.exposed:
            return
        raise ValueError(
            f"binding {self.network.host!r} exposes the server beyond this machine: "
            f"set an auth token (--auth-token or {ENV_PREFIX}AUTH_TOKEN)"
        )


class _Environment(EnvSettingsSource):
    """pydantic-settings' reading of one group's ``AVATAR_<FIELD>`` variables (empty ones unset),
    from ``environ``: the process's, a node's or a test's. Values are taken as written, never as
    JSON: each field parses its own (a list by commas or spaces, a port range as LOW-HIGH)."""

    def __init__(self, group: type[Group], environ: Mapping[str, str]) -> None:
        super().__init__(group, env_prefix=ENV_PREFIX, env_ignore_empty=True)  # type: ignore[arg-type]
        self.env_vars = parse_env_vars(environ, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str)

    def decode_complex_value(self, field_name: str, field: Any, value: Any) -> Any:
        return value


SETTING_GROUPS: dict[str, type[Group]] = {
    name: field.annotation for name, field in Settings.model_fields.items()  # type: ignore[misc]
}
GROUP_OF: dict[str, str] = {field: group for group, model in SETTING_GROUPS.items() for field in model.model_fields}
FIELDS: tuple[str, ...] = tuple(GROUP_OF)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
