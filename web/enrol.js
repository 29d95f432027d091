// Personal avatars on the demo page: upload a clip of yourself, or record one from the camera
// while reading a short script aloud; the server enrols it (POST /v1/avatars) and the page polls
// its progress, then adds the new avatar to the avatar list, chosen.

const RECORD_SECONDS = 20;
const SCRIPT = "Hello! I'm recording my own avatar. The quick brown fox jumps over the lazy dog. " +
  "Peter picked a peck of pickled peppers. How are you today? Oh, wow, that's wonderful. " +
  "Let me count: one, two, three, four, five. Bye for now!";

export function personalAvatars({ $, api, authHeaders, token, log, onReady, recordSeconds = RECORD_SECONDS }) {
  const status = (text, isError = false) => {
    $("enrol-status").textContent = text;
    $("enrol-status").classList.toggle("error", isError);
  };

  async function upload(blob, name) {
    const res = await fetch(`/v1/avatars?name=${encodeURIComponent(name)}`, {
      method: "POST", body: blob, headers: { "Content-Type": blob.type || "video/mp4", ...authHeaders(token()) },
    });
    const data = await res.json().catch(() => ({}));
    if (!res.ok) throw new Error(`${data.error?.message || res.statusText} (${res.status})`);
    status("enrolling: 0%");
    log(`enrolling ${name}`);
    for (;;) {
      await new Promise((resolve) => setTimeout(resolve, 500));
      const job = await api(`/v1/avatars/${encodeURIComponent(name)}`, { token: token() });
      if (job.status === "ready") {
        const note = job.coverage < 1 ? " (wider openings than your clip shows are drawn)" : "";
        status(`ready: ${name}, ${job.entries} mouths from ${job.seconds.toFixed(0)} s${note}. Press Start.`);
        log(`enrolled ${name}: coverage ${(100 * job.coverage).toFixed(0)}%`);
        onReady(name);
        return;
      }
      if (job.status === "failed") throw new Error(job.error?.message || "enrolment failed");
      status(`enrolling (${job.stage}): ${(100 * job.progress).toFixed(0)}%`);
    }
  }

  async function guarded(action) {
    const name = $("enrol-name").value.trim();
    if (!name) { status("Give the avatar a name first.", true); return; }
    $("enrol-upload").disabled = $("enrol-record").disabled = true;
    try {
      await action(name);
    } catch (err) {
      status(`Could not enrol: ${err.message}`, true);
      log(`enrolment failed: ${err.message}`, "error");
    } finally {
      $("enrol-upload").disabled = $("enrol-record").disabled = false;
    }
  }

  async function record(name) {
    const camera = await navigator.mediaDevices.getUserMedia({ video: { width: 640, height: 480 }, audio: true });
    const preview = $("enrol-preview");
    preview.srcObject = camera;
    preview.hidden = $("enrol-script").hidden = false;
    $("enrol-script").textContent = SCRIPT;
    const type = ["video/webm;codecs=vp8", "video/webm"].find((t) => MediaRecorder.isTypeSupported(t)) || "";
    const recorder = new MediaRecorder(camera, type ? { mimeType: type } : {});
    const parts = [];
    recorder.ondataavailable = (ev) => ev.data.size && parts.push(ev.data);
    const stopped = new Promise((resolve) => { recorder.onstop = resolve; });
    recorder.start(1000);
    for (let left = recordSeconds; left > 0; left--) {
      status(`recording: read the text aloud, facing the camera (${left} s)`);
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
    recorder.stop();
    await stopped;
    camera.getTracks().forEach((t) => t.stop());
    preview.srcObject = null;
    preview.hidden = $("enrol-script").hidden = true;
    await upload(new Blob(parts, { type: "video/webm" }), name);
  }

  $("enrol-upload").onclick = () => guarded(async (name) => {
    const file = $("enrol-file").files?.[0];
    if (!file) throw new Error("choose a video of yourself talking first");
    await upload(file, name);
  });
  $("enrol-record").onclick = () => guarded(record);
}
