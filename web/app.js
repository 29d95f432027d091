// Demo page: one avatar session = one RTCPeerConnection + one control websocket.
// No build step; plain ES module. `window.avatarDemo` exposes state for debugging and tests.

import { personalAvatars } from "./enrol.js";
import { FacePicker } from "./face.js";
import { livePlots } from "./plots.js";
import { plainWords, qualityWords } from "./words.js";

const $ = (id) => document.getElementById(id);
// Options come from the query and the fragment (the fragment wins). Links carry the token in the
// fragment, which the browser never sends to the server: no token in access logs or Referer headers.
const params = new URLSearchParams(location.search);
for (const [key, value] of new URLSearchParams(location.hash.slice(1))) params.set(key, value);

// `#session=ID&token=TOKEN` attaches to a session an agent created (examples/agent_echo.py prints
// such a link): the page is a viewer with a read-only event socket; the agent keeps control.
const attached = params.get("session") && params.get("token")
  ? { session_id: params.get("session"), token: params.get("token"), ice_servers: [] } : null;

const state = {
  info: null, session: null, pc: null, ws: null, mic: null,
  startedAt: 0, stats: {}, events: [], timers: [], logged: 0,
  speaking: new Set(), userSpeaking: false, activity: "off", attached,
};
state.plots = livePlots($("plots"), { misses: { color: "#dc2626" }, rtt: { color: "#16a34a" } });
window.avatarDemo = state;

function setStatus(text, kind = text) {
  const el = $("status");
  el.textContent = text;
  el.className = `status ${kind}`;
}

function showMessage(text, isError = false) {
  const el = $("message");
  el.hidden = !text;
  el.textContent = text || "";
  el.classList.toggle("error", isError);
}

// The event log, newest first; each item keeps the number it came with (1, 2, … however many).
function log(text, kind = "") {
  const item = document.createElement("li");
  const number = Object.assign(document.createElement("span"), { className: "n", textContent: `${++state.logged}.` });
  item.append(number, ` ${(performance.now() / 1000).toFixed(2)}s ${text}`);
  item.value = state.logged;
  if (kind) item.className = kind;
  const list = $("log");
  list.prepend(item);
  while (list.children.length > 200) list.lastChild.remove();
}

function authHeaders(token) {
  return token ? { Authorization: `Bearer ${token}` } : {};
}

async function api(path, { method = "GET", body, token } = {}) {
  const res = await fetch(path, {
    method,
    headers: { "Content-Type": "application/json", ...authHeaders(token) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (res.status === 204) return null;
  const data = await res.json().catch(() => ({}));
  if (!res.ok) throw apiError(res, data);
  return data;
}

// An error answer as an Error: the server's message, its code and status, its Retry-After.
function apiError(res, data) {
  const err = data.error || {};
  const error = new Error(err.message || res.statusText);
  error.code = err.code;
  error.status = res.status;
  error.retryAfter = Number(res.headers.get("Retry-After")) || 0;
  return error;
}

// The server answers a creation once it can: where its engine is still measuring the session it
// admitted last, it holds the request until then. Should it still answer that it is measuring
// (a worker another web process just gave a session), the page says so, and waits that long; a
// server that is full says so at once, with its wait.
async function createSession(body, token, attempts = 3) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await api("/v1/sessions", { method: "POST", token, body });
    } catch (err) {
      const measuring = err.code === "at_capacity" && /measuring/.test(err.message) && err.retryAfter <= 5;
      if (!measuring || attempt >= attempts) throw err;
      setStatus(`waiting ${err.retryAfter} s for room`, "connecting");
      showMessage(plainWords(err).replace(/Try again in .*$/, `Trying again in ${err.retryAfter} s…`));
      log(`server busy (${err.code}): ${err.message}; trying again in ${err.retryAfter} s`);
      await new Promise((resolve) => setTimeout(resolve, err.retryAfter * 1000));
      showMessage("");
    }
  }
}

async function loadInfo() {
  state.info = await api("/v1/info");
  const fill = (select, values, chosen) => {
    select.replaceChildren(...values.map((v) => new Option(v, v, false, v === chosen)));
  };
  state.faces.load(state.info, params.get("avatar"));
  $("faces").hidden = Boolean(state.attached);
  $("enrol").hidden = !state.info.reference_images || Boolean(state.attached);
  $("drawn-label").hidden = !state.info.reference_images;  // only a generating engine draws
  $("drawn").checked = params.has("drawn") ? params.get("drawn") !== "0" : Boolean(state.info.drawn);
  fill($("quality"), state.info.presets, params.get("quality") || state.info.default_preset);
  $("mode").value = params.get("mode") || state.info.default_mode;
  $("token-row").hidden = !state.info.auth_required || Boolean(state.attached);
  $("attached-row").hidden = !state.attached;
  if (state.attached) $("mode").value = "agent";
  syncVoiceDefault();
  setRunning(false);
}

// What the avatar is doing, from the control events: speaking (an utterance is being played out),
// listening (agent mode, nothing playing), or the user is speaking (voice activity on the mic).
function setActivity() {
  let activity = "off";
  if (state.session && state.pc) {
    if ($("mode").value !== "agent") activity = "mirror";
    else if (state.userSpeaking) activity = "user";
    else if (state.speaking.size) activity = "speaking";
    else activity = "listening";
  }
  state.activity = activity;
  const labels = { off: "–", mirror: "mirroring you", listening: "listening", speaking: "speaking",
    user: "you are speaking" };
  $("activity").dataset.state = activity;
  $("activity").textContent = labels[activity];
  $("badge").dataset.state = activity === "mirror" ? "off" : activity;
}

// Barge-in (your voice stops the avatar) is a thing of agent mode: in mirror mode your voice is the avatar's.
function syncModeControls() {
  const agent = $("mode").value === "agent";
  $("barge-in").disabled = Boolean(state.attached) || !agent;
  $("barge-in-why").hidden = agent;
}

function syncVoiceDefault() {
  // In mirror mode the avatar's voice is your own voice, delayed: muted unless asked for.
  $("voice").checked = $("mode").value === "agent";
  $("video").muted = !$("voice").checked;
}

async function openMicrophone(mode) {
  if (!navigator.mediaDevices?.getUserMedia) {
    throw new Error("This page needs a secure context (https or localhost) to use the microphone.");
  }
  try {
    // Browser audio processing would reshape the signal that drives the avatar.
    // In agent mode the mic only feeds barge-in detection: cancel the avatar's own voice from it.
    const agent = mode === "agent";
    return await navigator.mediaDevices.getUserMedia({
      audio: { echoCancellation: agent, noiseSuppression: agent, autoGainControl: false, channelCount: 1 },
    });
  } catch (err) {
    const refused = err.name === "NotAllowedError" || err.name === "SecurityError";
    const why = refused ? "Microphone access was refused." : `No usable microphone (${err.name}).`;
    if (mode === "mirror") {
      throw new Error(`${why} Mirror mode needs it: allow the microphone, or switch to agent mode.`);
    }
    showMessage(`${why} Continuing in agent mode without it.`);
    return null;
  }
}

// The active face's session options ("sharp (drawn)" only where it applies: a bundled drawn avatar).
function chosenAvatar() {
  return state.faces.sessionOptions($("drawn-label").hidden ? undefined : $("drawn").checked);
}

// Controls that do not apply to the active face are disabled, with the reason beside them.
function syncFaceControls() {
  const drawnApplies = state.faces.active?.kind === "drawn";
  $("drawn").disabled = Boolean(state.session) || !drawnApplies;
  $("drawn-why").hidden = drawnApplies || $("drawn-label").hidden;
  $("drawn-label").title = drawnApplies
    ? "a bundled avatar drawn by its renderer at the generated motion: sharper eyes, hair and teeth"
    : "sharp applies to the bundled drawn avatars only";
}

function waitForIceGathering(pc, hostOnly, timeoutMs = 2000) {
  if (pc.iceGatheringState === "complete") return Promise.resolve();
  return new Promise((resolve) => {
    let lull = null;
    const done = () => {
      clearTimeout(lull);
      pc.removeEventListener("icegatheringstatechange", check);
      pc.removeEventListener("icecandidate", onCandidate);
      resolve();
    };
    const check = () => { if (pc.iceGatheringState === "complete") done(); };
    // Without STUN/TURN servers there are only host candidates, and they come together: a short
    // lull after them is as good as "complete", which the browser may announce much later.
    const onCandidate = (ev) => {
      if (!hostOnly || !ev.candidate) return;
      clearTimeout(lull);
      lull = setTimeout(done, 40);
    };
    pc.addEventListener("icegatheringstatechange", check);
    pc.addEventListener("icecandidate", onCandidate);
    setTimeout(done, timeoutMs);
  });
}

function mark(name) {
  state.stats.marks = { ...(state.stats.marks || {}), [name]: Math.round(performance.now() - state.startedAt) };
}

function watchFirstFrame(video) {
  const onFirst = () => {
    if (state.stats.ttffMs !== undefined) return;
    state.stats.ttffMs = performance.now() - state.startedAt;
    state.stats.ttffFromLoadMs = performance.now();
    mark("firstFrame");
    $("s-ttff").textContent = `${state.stats.ttffMs.toFixed(0)} ms after Start · ${state.stats.ttffFromLoadMs.toFixed(0)} ms after page load`;
    log(`first frame after ${state.stats.ttffMs.toFixed(0)} ms`);
  };
  if (video.requestVideoFrameCallback) video.requestVideoFrameCallback(onFirst);
  else video.addEventListener("loadeddata", onFirst, { once: true });
}

function openControl(session) {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const role = state.attached ? "?role=observer" : "";
  // The token travels as a subprotocol, not in the URL; the server answers with `avatar.v1`.
  const ws = new WebSocket(`${scheme}://${location.host}/v1/sessions/${session.session_id}/control${role}`,
    ["avatar.v1", `avatar.token.${session.token}`]);
  ws.onmessage = (msg) => onEvent(JSON.parse(msg.data));
  ws.onclose = (ev) => {
    if (state.ws === ws && state.session) {
      log(`the server closed the session's control channel (${ev.code}${ev.reason ? ` ${ev.reason}` : ""}): `
        + "events and typed text stop; press Stop, then Start", "warn");
    }
  };
  const ping = setInterval(() => ws.readyState === WebSocket.OPEN && ws.send(JSON.stringify({ type: "ping", id: Date.now() })), 5000);
  state.timers.push(ping);
  return ws;
}

function onEvent(ev) {
  state.events.push(ev);
  if (state.events.length > 500) state.events.shift();
  switch (ev.type) {
    case "metrics": {
      const missed = ev.deadline_misses - (state.stats.server?.deadline_misses ?? 0);
      if (state.stats.server && missed > 0) {
        log(`${missed} frame${missed === 1 ? "" : "s"} came late (the engine fell behind): the picture held `
          + `still for about ${Math.round((missed * 1000) / (state.info?.fps || 25))} ms`, "warn");
      }
      const was = state.stats.server?.playout_delay_ms;
      if (was !== undefined && Math.abs(ev.playout_delay_ms - was) >= 100) {
        log(`playout delay ${ev.playout_delay_ms > was ? "raised" : "lowered"} to ${ev.playout_delay_ms.toFixed(0)} ms `
          + `(${ev.playout_delay_ms > was ? "frames arrive less evenly" : "frames arrive evenly again"})`);
      }
      $("s-delay").textContent = `${ev.playout_delay_ms.toFixed(0)} ms (buffer ${ev.buffer_depth} frames)`;
      $("s-misses").textContent = `${ev.deadline_misses}`;
      $("s-av").textContent = `${ev.av_offset_ms.toFixed(0)} ms`;
      $("s-mic").textContent = `${ev.mic_seconds.toFixed(1)} s`;
      state.plots.delay.push(ev.playout_delay_ms);
      state.plots.misses.push(Math.max(0, ev.deadline_misses - (state.stats.server?.deadline_misses ?? 0)));
      state.stats.server = ev;
      break;
    }
    case "quality":
      log(qualityWords(ev), ev.reason === "overload" ? "warn" : "");
      $("s-quality").textContent = `${ev.name}${ev.reason === "overload" ? " (lowered to keep up)" : ""}`;
      break;
    case "pong":
      state.stats.controlRttMs = Date.now() - Number(ev.id);
      break;
    case "error":
      log(`error ${ev.code}: ${ev.message}`, "error");
      showMessage(plainWords(ev), true);
      break;
    case "playback.started":
      state.speaking.add(ev.utterance_id);
      log(`avatar speaking ${ev.utterance_id} at ${ev.pts.toFixed(2)} s`, "avatar");
      break;
    case "playback.finished":
      state.speaking.delete(ev.utterance_id);
      log(`avatar ${ev.interrupted ? "interrupted" : "done"} ${ev.utterance_id}`
        + `${ev.pts === null ? " (never played)" : ` at ${ev.pts.toFixed(2)} s`}`, "avatar");
      break;
    case "user.speech_started":
      state.userSpeaking = true;
      log(`you started speaking (mic ${ev.mic_time.toFixed(2)} s)${ev.interrupting ? ": interrupting" : ""}`, "user");
      break;
    case "user.speech_stopped":
      state.userSpeaking = false;
      log(`you stopped speaking (${ev.duration_s.toFixed(1)} s)`, "user");
      break;
    case "session.ready":
      if (ev.mode !== $("mode").value) { $("mode").value = ev.mode; syncVoiceDefault(); syncModeControls(); }
      log(`session ready: ${state.faces.active?.label || ev.avatar || "avatar"}, ${ev.mode} mode, `
        + `${ev.width}×${ev.height} at ${ev.fps} fps`);
      break;
    default:
      log(`${ev.type}${ev.utterance_id ? ` ${ev.utterance_id}` : ""}${ev.duration_s !== undefined ? ` ${ev.duration_s.toFixed(1)} s` : ""}`);
  }
  setActivity();
}

async function pollStats() {
  const pc = state.pc;
  if (!pc) return;
  const report = await pc.getStats();
  const s = state.stats;
  report.forEach((r) => {
    if (r.type === "inbound-rtp" && r.kind === "video") {
      const now = r.timestamp;
      if (s.lastVideo && now > s.lastVideo.timestamp) {
        s.fps = ((r.framesDecoded - s.lastVideo.framesDecoded) * 1000) / (now - s.lastVideo.timestamp);
      }
      s.lastVideo = { timestamp: now, framesDecoded: r.framesDecoded };
      s.framesDecoded = r.framesDecoded;
      s.framesDropped = r.framesDropped ?? 0;
      s.frameWidth = r.frameWidth;
    }
    if (r.type === "inbound-rtp" && r.kind === "audio") s.audioSamplesReceived = r.totalSamplesReceived;
    if (r.type === "outbound-rtp" && r.kind === "audio") s.micPacketsSent = r.packetsSent;
    if (r.type === "candidate-pair" && r.nominated && r.state === "succeeded" && r.currentRoundTripTime !== undefined) {
      s.rttMs = r.currentRoundTripTime * 1000;
    }
  });
  $("s-fps").textContent = s.fps === undefined ? "–" : s.fps.toFixed(1);
  $("s-frames").textContent = `${s.framesDecoded ?? 0} / ${s.framesDropped ?? 0}`;
  $("s-rtt").textContent = s.rttMs === undefined ? "–" : `${s.rttMs.toFixed(0)} ms`;
  if (s.fps !== undefined) state.plots.fps.push(s.fps);
  if (s.rttMs !== undefined) state.plots.rtt.push(s.rttMs);
}

function setRunning(running) {
  $("hint").hidden = running || Boolean(state.attached);
  $("start").disabled = running;
  $("stop").disabled = !running;
  $("mic").disabled = !running || !state.mic;
  $("speak").disabled = !running || Boolean(state.attached);
  $("interrupt").disabled = !running || Boolean(state.attached);
  $("mode").disabled = Boolean(state.attached);
  syncModeControls();
  state.faces.setEnabled(!running);
  $("quality").disabled = running;
  syncFaceControls();
}

// The stats panel and the plots as for no session: nothing from the last one stays on screen.
function resetStats() {
  document.querySelectorAll(".stats dd").forEach((dd) => { dd.textContent = "–"; });
  Object.values(state.plots).forEach((plot) => plot.clear());
}

// The server paces its frames against deadlines already: ask the browser to hold as little
// as it safely can in its own jitter buffer (where the API exists; the browser keeps its floor).
const RECEIVE_DELAY_MS = 0;
function lowReceiveDelay(receiver) {
  if ("jitterBufferTarget" in receiver) {
    try { receiver.jitterBufferTarget = RECEIVE_DELAY_MS; } catch (err) { log(`jitterBufferTarget: ${err.message}`); }
  } else if ("playoutDelayHint" in receiver) {
    receiver.playoutDelayHint = RECEIVE_DELAY_MS / 1000;
  }
  state.stats.jitterBufferTarget = receiver.jitterBufferTarget ?? receiver.playoutDelayHint ?? null;
}

// The peer connection with its two slots (microphone out, avatar in) and a complete offer.
async function preparePeer(iceServers) {
  const pc = new RTCPeerConnection({ iceServers });
  state.pc = pc;
  const micSlot = pc.addTransceiver("audio", { direction: "sendrecv" });
  pc.addTransceiver("video", { direction: "recvonly" });
  const video = $("video");
  pc.ontrack = (ev) => {
    lowReceiveDelay(ev.receiver);
    const stream = ev.streams[0] || (video.srcObject instanceof MediaStream ? video.srcObject : new MediaStream());
    if (!ev.streams[0]) stream.addTrack(ev.track);
    if (video.srcObject !== stream) {
      video.srcObject = stream;
      watchFirstFrame(video);
    }
    video.play().catch((err) => {
      if (state.pc === pc && err.name === "NotAllowedError") showMessage("Click the video to start playback.");
    });
  };
  let lostAt = null;
  pc.onconnectionstatechange = () => {
    if (state.pc !== pc) return;  // a connection being torn down says nothing about the page
    const st = pc.connectionState;
    if (st === "connected") {
      mark("connected"); setStatus("live"); showMessage(""); setActivity();
      if (lostAt !== null) log(`connection restored after ${((performance.now() - lostAt) / 1000).toFixed(1)} s`);
      else log("connected: the avatar's video is on its way");
      lostAt = null;
    }
    if (st === "failed") {
      setStatus("failed", "error");
      log("connection failed: no media path to the server", "error");
      showMessage("The media connection failed. If the server runs on another machine or behind NAT, "
        + "start it with a STUN/TURN server (--ice-server).", true);
    }
    if (st === "disconnected") {
      lostAt = performance.now();
      setStatus("reconnecting", "connecting");
      log("connection interrupted: trying to reconnect", "warn");
      showMessage("Connection interrupted… trying to recover.");
    }
  };
  await pc.setLocalDescription(await pc.createOffer());
  await waitForIceGathering(pc, !iceServers.length);
  return { pc, micSlot };
}

async function start() {
  showMessage("");
  state.faces.error("");
  setStatus("connecting");
  setRunning(true);
  state.startedAt = performance.now();
  state.stats = { startedFromLoadMs: Math.round(state.startedAt) };
  resetStats();
  state.speaking.clear();
  state.userSpeaking = false;
  const mode = $("mode").value;
  const token = $("token").value || undefined;
  let micOpening = null;
  try {
    // Everything slow runs at once: the server warms the engine up, the browser opens the
    // microphone, and the connection is negotiated; the mic track joins its slot when ready.
    const created = state.attached ? Promise.resolve(state.attached) : createSession({
      mode, quality: $("quality").value || null, ...(await chosenAvatar()),
      barge_in: $("barge-in").checked,
    }, token);
    // A creation the server holds (its engine measures the session admitted just before) is said so.
    const slow = setTimeout(() => {
      setStatus("waiting for room", "connecting");
      showMessage("The server is making room for this session: it measures the session that started just before.");
    }, 1000);
    created.finally(() => clearTimeout(slow)).catch(() => {});
    micOpening = openMicrophone(mode);
    micOpening.catch(() => {});  // awaited below, once the connection is under way
    // With no STUN/TURN servers configured the session's ICE servers are known to be none, so
    // the offer (and the browser's slow first ICE gathering) need not wait for the session.
    const early = state.info?.ice_server_count === 0 ? preparePeer([]) : null;
    early?.catch(() => {});  // awaited below, unless the session cannot be created
    state.session = await created;
    mark("session");
    $("s-quality").textContent = `${$("quality").value || state.info.default_preset} preset, full quality`;
    setStatus("connecting");
    showMessage("");
    state.ws = openControl(state.session);
    const { pc, micSlot } = await (early || preparePeer(state.session.ice_servers || []));
    mark("gathered");
    const answer = await api(`/v1/sessions/${state.session.session_id}/offer`, {
      method: "POST", token: state.session.token,
      body: { sdp: pc.localDescription.sdp, type: "offer" },
    });
    mark("answer");
    await pc.setRemoteDescription(answer);
    state.mic = await micOpening;
    mark("microphone");
    if (state.mic) await micSlot.sender.replaceTrack(state.mic.getAudioTracks()[0]);
    state.timers.push(setInterval(() => pollStats().catch(() => {}), 1000));
    $("mic").textContent = "Microphone on";
    $("mic").setAttribute("aria-pressed", "true");
    setRunning(true);
  } catch (err) {
    if (!state.mic) micOpening?.then((m) => m?.getTracks().forEach((t) => t.stop())).catch(() => {});
    setStatus("error");
    const words = plainWords(err);
    // A photo the server cannot use is said beside the photo, where it is fixed; the rest over the video.
    if (err.code === "bad_image" || err.code === "image_too_large") state.faces.error(words);
    else showMessage(`Could not start: ${words}`, true);
    log(`start failed${err.code ? ` (${err.code}${err.status ? ` ${err.status}` : ""})` : ""}: ${err.message}`, "error");
    await stop({ keepMessage: true });
  }
}

async function stop({ keepMessage = false } = {}) {
  const { session, pc, ws, mic } = state;
  state.session = state.pc = state.ws = state.mic = null;
  state.timers.forEach(clearInterval);
  state.timers = [];
  state.speaking.clear();
  state.userSpeaking = false;
  setActivity();
  if (session && !state.attached) {
    await api(`/v1/sessions/${session.session_id}`, { method: "DELETE", token: session.token }).catch(() => {});
  }
  ws?.close();
  pc?.close();
  mic?.getTracks().forEach((t) => t.stop());
  $("video").srcObject = null;
  if (session) log("stopped");
  state.stats = {};
  resetStats();
  setRunning(false);
  if (!keepMessage) { setStatus("idle"); showMessage(""); }
}

function wire() {
  $("start").onclick = () => start();
  $("stop").onclick = () => stop();
  $("mic").onclick = () => {
    const track = state.mic?.getAudioTracks()[0];
    if (!track) return;
    track.enabled = !track.enabled;
    $("mic").textContent = track.enabled ? "Microphone on" : "Microphone off";
    $("mic").setAttribute("aria-pressed", String(track.enabled));
  };
  $("mode").onchange = () => {
    syncVoiceDefault();
    syncModeControls();
    setActivity();
    state.ws?.readyState === WebSocket.OPEN && state.ws.send(JSON.stringify({ type: "config", mode: $("mode").value }));
  };
  $("voice").onchange = () => { $("video").muted = !$("voice").checked; $("video").play().catch(() => {}); };
  $("video").onclick = () => $("video").play().catch(() => {});
  $("speak-form").onsubmit = (ev) => {
    ev.preventDefault();
    const text = $("text").value.trim();
    if (!text || state.ws?.readyState !== WebSocket.OPEN) return;
    if ($("mode").value !== "agent") {
      $("mode").value = "agent";
      $("mode").onchange();
    }
    state.ws.send(JSON.stringify({ type: "speak", text }));
    $("text").value = "";
  };
  $("interrupt").onclick = () => state.ws?.send(JSON.stringify({ type: "interrupt" }));
  $("barge-in").onchange = () => state.ws?.readyState === WebSocket.OPEN
    && state.ws.send(JSON.stringify({ type: "config", barge_in: $("barge-in").checked }));
  window.addEventListener("pagehide", () => {
    const s = state.session;
    if (s && !state.attached) fetch(`/v1/sessions/${s.session_id}`, { method: "DELETE", keepalive: true, headers: authHeaders(s.token) });
  });
}

state.faces = new FacePicker({
  $, api, log, token: () => $("token").value || null,
  onChange: (face) => { syncFaceControls(); log(`face: ${face.label}`); },
});
wire();
personalAvatars({
  $, api, authHeaders, log, token: () => $("token").value || null,
  ...(params.get("record_seconds") ? { recordSeconds: Number(params.get("record_seconds")) } : {}),
  onReady: (name) => state.faces.addPersonal(name),
});
loadInfo()
  .then(() => { if (params.get("autostart") === "1") start(); })
  .catch((err) => { setStatus("error"); showMessage(plainWords(err), true); });
