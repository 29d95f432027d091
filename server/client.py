"""Async client for one avatar session: what a voice agent needs to put the avatar in front of it.

    async with await AvatarSession.create("http://127.0.0.1:8080") as avatar:
        print("watch:", avatar.viewer_url)
        await avatar.say("Hello! How can I help?")
        async for event in avatar.events():
            ...

``create`` makes an agent-mode session and connects its control socket; a viewer (the demo
page at ``viewer_url``, or :meth:`connect_media` for an in-process aiortc peer) shows it.
Nothing plays until a viewer is connected: the session's media clock starts with its peer.
Events are the server's pydantic models (``server.base.protocol``); the user's speech segments
(barge-in VAD, with ``user_audio``) can also go to a callback as PCM, for a recogniser.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import json
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from urllib.parse import quote

import httpx
import numpy as np
import websockets
from pydantic import ValidationError

from server.base.protocol import (
    ErrorEvent,
    PlaybackFinished,
    ServerEvent,
    SessionCreated,
    UserSpeechStopped,
    control_subprotocols,
    server_event,
)

# One binary audio message at most this big: under the server's default control-message cap.
CHUNK_BYTES = 128 * 1024
EVENT_BUFFER = 1024
UserSpeechCallback = Callable[[np.ndarray, int], Awaitable[None] | None]


class AvatarError(RuntimeError):
    """The server refused a request (HTTP error or an ``error`` event awaited by the caller)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class AvatarSession:
    def __init__(
        self,
        base_url: str,
        info: SessionCreated,
        http: httpx.AsyncClient,
        on_user_speech: UserSpeechCallback | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.info = info
        self.on_user_speech = on_user_speech
        self._http = http
        self._ws: websockets.ClientConnection | None = None
        self._reader: asyncio.Task | None = None
        self._events: asyncio.Queue[ServerEvent | None] = asyncio.Queue(EVENT_BUFFER)
        self._waiters: list[tuple[Callable[[ServerEvent], bool], asyncio.Future[ServerEvent]]] = []
        self._ids = itertools.count(1)
        self._prefix = secrets.token_hex(3)
        self._streaming: str | None = None
        self._pc = None
        self._closed = False

    # ---- lifecycle --------------------------------------------------------------------

    @classmethod
    async def create(
        cls,
        base_url: str = "http://127.0.0.1:8080",
        *,
        server_token: str | None = None,
        avatar: str | None = None,
        quality: str | None = None,
        voice: str | None = None,
        barge_in: bool | None = None,
        user_audio: bool | None = None,
        record: bool = False,
        on_user_speech: UserSpeechCallback | None = None,
        connect: bool = True,
    ) -> AvatarSession:
        """Create an agent-mode session (and, by default, connect its control socket)."""
        http = httpx.AsyncClient(base_url=base_url, timeout=20)
        body = {"mode": "agent", "avatar": avatar, "quality": quality, "voice": voice, "barge_in": barge_in,
                "user_audio": True if on_user_speech is not None and user_audio is None else user_audio,
                "record": record}
        headers = {"Authorization": f"Bearer {server_token}"} if server_token else {}
        try:
            res = await http.post("/v1/sessions", json={k: v for k, v in body.items() if v is not None},
                                  headers=headers)
            _raise_for(res)
        except BaseException:
            await http.aclose()
            raise
        session = cls(base_url, SessionCreated.model_validate(res.json()), http, on_user_speech)
        if connect:
            try:
                await session.connect()
            except BaseException:
                await session.close()
                raise
        return session

    async def connect(self) -> None:
        """Open the control socket; events start arriving (``session.ready`` once a viewer is connected)."""
        url = "ws" + self.base_url[len("http"):] + f"/v1/sessions/{self.id}/control"
        self._ws = await websockets.connect(url, max_size=2**24, subprotocols=control_subprotocols(self.token))
        self._reader = asyncio.create_task(self._read(), name=f"avatar-client-{self.id}")

    async def connect_media(self, mic=None, ice_servers: list | None = None):
        """An in-process aiortc viewer (receives the avatar's video and voice; sends ``mic`` if given).

        Returns the ``RTCPeerConnection``; read its receivers' tracks (and keep reading them:
        an unread track buffers without limit). Closed by :meth:`close`.
        """
        from aiortc import RTCConfiguration, RTCIceServer, RTCPeerConnection

        servers = ice_servers if ice_servers is not None else [
            RTCIceServer(urls=s.urls, username=s.username, credential=s.credential) for s in self.info.ice_servers
        ]
        self._pc = pc = RTCPeerConnection(RTCConfiguration(iceServers=servers))
        await offer_media(self._http, self.id, self.token, pc, mic)
        return pc

    async def close(self) -> None:
        """Close the control socket and any media, and delete the session; idempotent."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(httpx.HTTPError):
            await self._http.delete(f"/v1/sessions/{self.id}", headers={"Authorization": f"Bearer {self.token}"})
        await self._http.aclose()
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        if self._pc is not None:
            await self._pc.close()
        self._finish_waiters(AvatarError("closed", "the session was closed"))

    async def __aenter__(self) -> AvatarSession:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # ---- properties -------------------------------------------------------------------

    @property
    def id(self) -> str:
        return self.info.session_id

    @property
    def token(self) -> str:
        return self.info.token

    @property
    def viewer_url(self) -> str:
        """The demo page attached to this session as a viewer (video, voice, events; the agent keeps control).
        The token is in the fragment, which browsers never send to the server."""
        return f"{self.base_url}/#session={self.id}&token={quote(self.token)}"

    # ---- commands -----------------------------------------------------------------------

    async def say(self, text: str, utterance_id: str | None = None, voice: str | None = None) -> str:
        """Speak ``text`` with the server's TTS; returns the utterance id its playback events carry."""
        uid = utterance_id or self._new_id("say")
        await self._send({"type": "speak", "text": text, "utterance_id": uid, "voice": voice})
        return uid

    async def push_audio(self, pcm: bytes | np.ndarray, sample_rate: int, utterance_id: str | None = None) -> str:
        """Stream agent speech (PCM16 bytes, or int16/float32 samples); it plays as it arrives.

        Consecutive pushes form one utterance until :meth:`commit` (or a push with another id).
        """
        data = _pcm16_bytes(pcm)
        if utterance_id is not None and utterance_id != self._streaming:
            self._streaming = utterance_id
        elif self._streaming is None:
            self._streaming = self._new_id("audio")
        for start in range(0, max(len(data), 1), CHUNK_BYTES):
            chunk = data[start : start + CHUNK_BYTES]
            if not chunk:
                break
            await self._send({"type": "audio.append", "sample_rate": sample_rate, "utterance_id": self._streaming})
            await self._send_bytes(chunk)
        return self._streaming

    async def commit(self) -> str | None:
        """End the streamed utterance (it finishes playing when its last sample has played)."""
        uid, self._streaming = self._streaming, None
        if uid is not None:
            await self._send({"type": "audio.commit", "utterance_id": uid})
        return uid

    async def interrupt(self) -> None:
        """Stop the avatar's speech now and drop everything queued."""
        self._streaming = None
        await self._send({"type": "interrupt"})

    async def configure(self, **options) -> None:
        """``mode``, ``voice``, ``barge_in``, ``user_audio`` (see the control API)."""
        await self._send({"type": "config", **options})

    async def ping(self) -> None:
        await self._send({"type": "ping", "id": self._new_id("ping")})

    # ---- events ---------------------------------------------------------------------------

    async def events(self) -> AsyncIterator[ServerEvent]:
        """Every event, in order, until the session's control socket closes."""
        while True:
            event = await self._events.get()
            if event is None:
                self._events.put_nowait(None)
                return
            yield event

    async def wait_for(
        self,
        kind: str,
        utterance_id: str | None = None,
        timeout_s: float | None = 30.0,
        predicate: Callable[[ServerEvent], bool] | None = None,
    ) -> ServerEvent:
        """The next event of ``kind`` (for ``utterance_id``); independent of :meth:`events`."""

        def match(event: ServerEvent) -> bool:
            return (
                event.type == kind
                and (utterance_id is None or getattr(event, "utterance_id", None) == utterance_id)
                and (predicate is None or predicate(event))
            )

        future: asyncio.Future[ServerEvent] = asyncio.get_running_loop().create_future()
        self._waiters.append((match, future))
        try:
            return await asyncio.wait_for(future, timeout_s)
        finally:
            self._waiters = [(m, f) for m, f in self._waiters if f is not future]

    async def say_and_wait(self, text: str, timeout_s: float | None = 60.0) -> PlaybackFinished:
        """Say ``text`` and wait until it has been played out (or interrupted)."""
        uid = self._new_id("say")
        finished = asyncio.ensure_future(self.wait_for("playback.finished", uid, timeout_s))
        await self.say(text, uid)
        return await finished

    async def _read(self) -> None:
        assert self._ws is not None
        try:
            async for raw in self._ws:
                if isinstance(raw, bytes):
                    continue
                try:
                    event = server_event.validate_python(json.loads(raw))
                except (ValidationError, ValueError):
                    continue
                await self._dispatch(event)
        except websockets.ConnectionClosed:
            pass
        finally:
            self._put(None)
            self._finish_waiters(AvatarError("closed", "the control socket closed"))

    async def _dispatch(self, event: ServerEvent) -> None:
        for match, future in list(self._waiters):
            if not future.done() and match(event):
                future.set_result(event)
        self._put(event)
        if isinstance(event, UserSpeechStopped) and self.on_user_speech is not None and event.audio:
            samples = np.frombuffer(event.pcm() or b"", "<i2")
            result = self.on_user_speech(samples, event.sample_rate)
            if inspect.isawaitable(result):
                await result

    def _put(self, event: ServerEvent | None) -> None:
        if self._events.full():
            self._events.get_nowait()
        self._events.put_nowait(event)

    def _finish_waiters(self, error: Exception) -> None:
        for _, future in self._waiters:
            if not future.done():
                future.set_exception(error)

    async def _send(self, message: dict) -> None:
        await self._send_raw(json.dumps({k: v for k, v in message.items() if v is not None}))

    async def _send_bytes(self, data: bytes) -> None:
        await self._send_raw(data)

    async def _send_raw(self, data: str | bytes) -> None:
        if self._closed:
            raise AvatarError("closed", "the session was closed")
        if self._ws is None:
            raise AvatarError("not_connected", "call connect() first")
        try:
            await self._ws.send(data)
        except websockets.ConnectionClosed as exc:
            raise AvatarError("closed", f"the control socket closed: {exc}") from exc

    def _new_id(self, kind: str) -> str:
        return f"{kind}_{self._prefix}_{next(self._ids)}"


async def offer_media(http: httpx.AsyncClient, session_id: str, token: str, pc, mic=None) -> None:
    """Offer the aiortc peer ``pc`` to a session (sending ``mic``, or receiving audio only, and
    receiving the avatar's video) and apply the server's answer; ``http`` has the server as its base URL."""
    from aiortc import RTCSessionDescription

    if mic is not None:
        pc.addTrack(mic)
    else:
        pc.addTransceiver("audio", direction="recvonly")
    pc.addTransceiver("video", direction="recvonly")
    await pc.setLocalDescription(await pc.createOffer())
    res = await http.post(
        f"/v1/sessions/{session_id}/offer",
        json={"sdp": pc.localDescription.sdp, "type": "offer"},
        headers={"Authorization": f"Bearer {token}"},
    )
    _raise_for(res)
    await pc.setRemoteDescription(RTCSessionDescription(**res.json()))


def _pcm16_bytes(pcm: bytes | np.ndarray) -> bytes:
    if isinstance(pcm, bytes | bytearray | memoryview):
        return bytes(pcm)
    samples = np.asarray(pcm)
    if samples.dtype.kind == "f":
        samples = np.clip(samples, -1.0, 32767 / 32768) * 32768.0
    return samples.astype("<i2").tobytes()


def _raise_for(res: httpx.Response) -> None:
    if res.status_code < 400:
        return
    try:
        error = res.json()["error"]
        raise AvatarError(error["code"], error["message"])
    except (ValueError, KeyError, TypeError):
        raise AvatarError(f"http_{res.status_code}", res.text[:200]) from None


__all__ = ["AvatarError", "AvatarSession", "ErrorEvent", "PlaybackFinished", "UserSpeechStopped"]
