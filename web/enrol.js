// Personal avatars on the demo page: upload a clip of yourself, or record one from the camera
// while reading a short script aloud (a countdown, a live microphone level, a cancel button); the
// server enrols it (POST /v1/avatars) and the page polls its progress, then shows the enrolled face
// and adds it to the face picker, active.

import { enrolledFace } from "./face.js";
import { clipWords, plainWords } from "./words.js";

const RECORD_SECONDS = 20;
const MAX_CLIP_BYTES = 200 * 1024 * 1024;  // the server's limit (docs/api.md)
const CLIP_TYPES = /^video\//;
const CLIP_NAMES = /\.(mp4|m4v|mov|webm|mkv)$/i;
const SCRIPT = "Hello! I'm recording my own avatar. The quick brown fox jumps over the lazy dog. " +
  "Peter picked a peck of pickled peppers. How are you today? Oh, wow, that's wonderful. " +
  "Let me count: one, two, three, four, five. Bye for now!";

class Cancelled extends Error {}
class Plain extends Error {}  // already in plain words

export function personalAvatars({ $, api, authHeaders, token, log, onReady, recordSeconds = RECORD_SECONDS }) {
  const status = (text, isError = false) => {
    $("enrol-status").textContent = text;
    $("enrol-status").classList.toggle("error", isError);
  };
  let cancel = null;  // ends the recording under way, if any

  async function upload(blob, name) {
    const res = await fetch(`/v1/avatars?name=${encodeURIComponent(name)}`, {
      method: "POST", body: blob, headers: { "Content-Type": blob.type || "video/mp4", ...authHeaders(token()) },
    });
    const data = await res.json().catch(() => ({}));
    if (!res.ok) {
      const err = new Error(data.error?.message || res.statusText);
      Object.assign(err, { code: data.error?.code, status: res.status });
      throw err;
    }
    status("making your avatar: 0%");
    log(`enrolling ${name}`);
    for (;;) {
      await new Promise((resolve) => setTimeout(resolve, 500));
      const job = await api(`/v1/avatars/${encodeURIComponent(name)}`, { token: token() });
      if (job.status === "ready") {
        const note = job.coverage < 1 ? " Wider mouth openings than your clip shows are drawn." : "";
        showFace(name, `Your avatar “${name}”: ${job.entries} mouth shapes from ${job.seconds.toFixed(0)} s.${note}`);
        status(`Ready: “${name}” is now the face to stream. Press Start.`);
        log(`enrolled ${name}: coverage ${(100 * job.coverage).toFixed(0)}%`);
        onReady(name);
        return;
      }
      if (job.status === "failed") {
        const err = new Error(job.error?.message || "enrolment failed");
        err.code = job.error?.code || "bad_video";
        throw err;
      }
      status(`making your avatar (${job.stage}): ${(100 * job.progress).toFixed(0)}%`);
    }
  }

  // The enrolled face as sessions will animate it, before it is used.
  async function showFace(name, caption) {
    const src = await enrolledFace(name, token());
    $("enrol-face-img").hidden = !src;
    if (src) $("enrol-face-img").src = src;
    $("enrol-face-caption").textContent = caption;
    $("enrol-face").hidden = false;
  }

  async function guarded(action) {
    const name = $("enrol-name").value.trim();
    $("enrol-face").hidden = true;
    if (!name) { status("Give the avatar a name first.", true); return; }
    if (!/^[a-z0-9][a-z0-9_-]{0,39}$/.test(name)) {
      status(plainWords({ code: "bad_avatar_name" }), true);
      return;
    }
    $("enrol-upload").disabled = $("enrol-record").disabled = true;
    try {
      await action(name);
    } catch (err) {
      if (err instanceof Cancelled) {
        status("Recording cancelled: nothing was sent.");
        log("recording cancelled");
      } else {
        let words = err instanceof Plain ? err.message : clipWords(err.message);
        if (err.code || err.name === "TypeError") words = plainWords(err, { name });
        status(words, true);
        log(`enrolment failed${err.code ? ` (${err.code})` : ""}: ${err.message}`, "error");
      }
    } finally {
      $("enrol-upload").disabled = $("enrol-record").disabled = false;
    }
  }

  // The microphone's level, 0..1, on the meter while the camera records.
  function levelMeter(stream) {
    const audio = new AudioContext();
    const analyser = audio.createAnalyser();
    analyser.fftSize = 1024;
    audio.createMediaStreamSource(stream).connect(analyser);
    const samples = new Float32Array(analyser.fftSize);
    let peak = 0;
    const timer = setInterval(() => {
      analyser.getFloatTimeDomainData(samples);
      let sum = 0;
      for (const x of samples) sum += x * x;
      const level = Math.min(1, Math.sqrt(sum / samples.length) * 4);
      peak = Math.max(peak, level);
      $("enrol-level").value = level;
      $("enrol-heard").textContent = peak > 0.05 ? "your voice is heard" : "no sound yet: is the microphone on?";
    }, 100);
    return () => { clearInterval(timer); audio.close(); $("enrol-level").value = 0; };
  }

  async function record(name) {
    let camera;
    try {
      camera = await navigator.mediaDevices.getUserMedia({ video: { width: 640, height: 480 }, audio: true });
    } catch (err) {
      const refused = err.name === "NotAllowedError" || err.name === "SecurityError";
      throw new Plain(refused ? "The camera or microphone was refused: allow both to record here."
        : `No usable camera or microphone (${err.name}).`);
    }
    const preview = $("enrol-preview");
    preview.srcObject = camera;
    $("enrol-live").hidden = $("enrol-script").hidden = $("enrol-cancel").hidden = false;
    $("enrol-script").textContent = SCRIPT;
    $("enrol-live").scrollIntoView({ block: "nearest" });
    const stopMeter = levelMeter(camera);
    const type = ["video/webm;codecs=vp8", "video/webm"].find((t) => MediaRecorder.isTypeSupported(t)) || "";
    const recorder = new MediaRecorder(camera, type ? { mimeType: type } : {});
    const parts = [];
    recorder.ondataavailable = (ev) => ev.data.size && parts.push(ev.data);
    const stopped = new Promise((resolve) => { recorder.onstop = resolve; });
    let cancelled = false;
    let wake = null;
    cancel = () => { cancelled = true; wake?.(); };
    try {
      recorder.start(1000);
      for (let left = recordSeconds; left > 0 && !cancelled; left--) {
        $("enrol-countdown").textContent = `${left} s`;
        status(`Recording: read the text aloud, facing the camera (${left} s left).`);
        await new Promise((resolve) => { wake = resolve; setTimeout(resolve, 1000); });
      }
      recorder.stop();
      await stopped;
    } finally {
      cancel = null;
      stopMeter();
      camera.getTracks().forEach((t) => t.stop());
      preview.srcObject = null;
      $("enrol-live").hidden = $("enrol-script").hidden = $("enrol-cancel").hidden = true;
      $("enrol-countdown").textContent = "";
    }
    if (cancelled) throw new Cancelled();
    await upload(new Blob(parts, { type: "video/webm" }), name);
  }

  // What the browser can tell about a picked clip before sending it.
  function checkClip(file) {
    if (!CLIP_TYPES.test(file.type) && !CLIP_NAMES.test(file.name)) {
      return `“${file.name}” is not a video. Pick an MP4, MOV, WebM or MKV clip of yourself talking.`;
    }
    if (file.size > MAX_CLIP_BYTES) {
      return `“${file.name}” is ${(file.size / 2 ** 20).toFixed(0)} MB: clips up to 200 MB are taken. Send a shorter one.`;
    }
    return null;
  }

  $("enrol-file").onchange = () => {
    const file = $("enrol-file").files?.[0];
    const problem = file && checkClip(file);
    if (problem) { $("enrol-file").value = ""; status(problem, true); log(`clip refused: ${problem}`, "error"); }
    else if (file) status("");
  };
  $("enrol-upload").onclick = () => guarded(async (name) => {
    const file = $("enrol-file").files?.[0];
    if (!file) throw new Plain("Choose a video of yourself talking first.");
    const problem = checkClip(file);
    if (problem) throw new Plain(problem);
    await upload(file, name);
  });
  $("enrol-record").onclick = () => guarded(record);
  $("enrol-record").textContent = `Record ${recordSeconds} s`;
  $("enrol-cancel").onclick = () => cancel?.();
}
