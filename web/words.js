// Plain words for what the page shows a person. The server answers with precise error codes and
// messages for programs (docs/api.md); the page turns each into one sentence that says what
// happened and what to do, and keeps the code for the event log.

const seconds = (s) => (s === 1 ? "1 second" : `${s} seconds`);
const wait = (err) => (err.retryAfter > 0 ? ` Try again in ${seconds(err.retryAfter)}.` : " Try again in a moment.");
const PHOTO_TYPES = "a JPEG, PNG or WebP photo";

// A photo the server cannot animate, by the reason in its message (engine/face/checks.py,
// engine/face/crop.py, engine/media/image*.py).
function photoWords(message) {
  const m = message.toLowerCase();
  if (m.includes("no face")) return "No face was found in this photo. Pick one where a single person faces the camera.";
  if (m.includes("tightly")) {
    return "This photo is cropped too close to the face. Pick one that shows the whole head with some room around it.";
  }
  if (m.includes("too small to animate")) {
    return "The face in this photo is too small. Pick a closer photo, where the face fills more of the picture.";
  }
  if (m.includes("turned")) return "The face in this photo is turned away. Pick one where the person looks at the camera.";
  if (m.includes("mouth is covered")) return "The mouth is covered in this photo. Pick one with the lips in view.";
  if (m.includes("not a png") || m.includes("base64")) return `This file is not a picture. Pick ${PHOTO_TYPES}.`;
  if (m.includes("corrupt") || m.includes("truncated")) {
    return `This picture is damaged (corrupt or cut short). Pick another file: ${PHOTO_TYPES}.`;
  }
  if (m.includes("need at least")) return "This picture is too small. Pick a larger photo.";
  if (m.includes("bundled avatars only")) return "This server animates its own avatars only, not photos.";
  return `This photo cannot be used: ${message}.`;
}

// A clip that could not be enrolled, by the reason in its message (engine/personal/enroll.py).
function clipWords(message) {
  const m = message.toLowerCase();
  if (m.startsWith("too short")) return `The clip is too short (${message.replace(/^too short:\s*/i, "")}).`;
  if (m.startsWith("too long")) return `The clip is too long (${message.replace(/^too long:\s*/i, "")}).`;
  if (m.includes("empty")) return "The clip is empty. Pick a video of yourself talking.";
  if (m.startsWith("not a") || m.includes("not a readable video") || m.includes("multipart")) {
    return "This file is not a video the server can read. Pick an MP4, MOV, WebM or MKV clip of yourself talking.";
  }
  if (m.includes("no face") || m.includes("no frame shows one face")) {
    return "No face was found in most of the clip. Film one person facing the camera, close enough to fill the frame.";
  }
  if (m.includes("several faces")) return "The clip shows several faces. Film one person alone.";
  if (m.includes("face too small")) return "The face is too small in the clip. Film closer to the camera.";
  if (m.includes("turned away")) return "The face is turned away most of the time. Look into the camera.";
  if (m.includes("too dark")) return "The clip is too dark. Light the face and film again.";
  if (m.includes("mouth is covered")) return "The mouth is covered in the clip. Keep the lips in view.";
  if (m.includes("timeout")) return "The clip took too long to process. Send a shorter or smaller clip.";
  return `The clip could not be used: ${message}.`;
}

function busyWords(err) {
  const m = (err.message || "").toLowerCase();
  if (m.includes("limit of")) {
    const cap = /limit of (\d+)/.exec(m)?.[1];
    const most = cap === "1" ? "one session" : cap ? `${cap} sessions` : "a set number of sessions";
    return `The server is full: it serves at most ${most} and ${cap === "1" ? "it is" : "all are"} in use.${wait(err)}`;
  }
  if (m.includes("event loop")) {
    return `The server is busy: its network side is fully used by the sessions it serves.${wait(err)}`;
  }
  if (m.includes("measuring")) {
    return `The server is measuring the session that just started before it takes another.${wait(err)}`;
  }
  return `The server is busy: one more session would make every stream stutter.${wait(err)}`;
}

/** One sentence for an error from the API (`err.code`, `err.message`, `err.retryAfter`, `err.name`). */
export function plainWords(err, { name } = {}) {
  switch (err.code) {
    case "at_capacity": return busyWords(err);
    case "engine_unavailable": return `The avatar engine is not running right now (it may be restarting).${wait(err)}`;
    case "rate_limited": return `Too many sessions were started from here in the last minute.${wait(err)}`;
    case "bad_token": return "The server asks for an access token: enter it in “Server token” and try again.";
    case "bad_image": return photoWords(err.message || "");
    case "image_too_large": return "This photo is too large. Pick one under 2 MB and at most 4096 pixels a side.";
    case "bad_avatar": return `That face is not available on this server any more. Pick another one.`;
    case "bad_video": return clipWords(err.message || "");
    case "video_too_large": return "The clip is too large: at most 200 MB. Send a shorter clip.";
    case "avatar_exists": return `The name “${name || "this name"}” is taken. Choose another name.`;
    case "bad_avatar_name": return "Names are lowercase letters, digits, - and _ (up to 40), starting with a letter or digit.";
    case "enrolment_running":
    case "enrolment_busy": return "Another avatar is being made right now. Try again when it has finished.";
    case "unknown_avatar": return `There is no avatar named “${name || ""}” any more.`;
    case "upload_busy": return "A clip from here is still being sent. Wait for it to finish, then try again.";
    case "avatar_unreadable": return "This avatar's files on the server are damaged. Delete it and make it again.";
    case "body_too_large": return "What the page sent is too large for the server. Pick a smaller file.";
    case "bad_quality": return "The server does not offer that quality any more. Reload the page.";
    case "bad_request": return "The server did not understand the page's request. Reload the page and try again.";
    case "unknown_session": return "The session ended before the video connected. Press Start again.";
    case "bad_sdp":
    case "sdp_too_large":
    case "already_offered": return "The browser and the server could not set up the video connection. Press Start again.";
    case "no_nodes":
    case "node_unreachable": return `No machine of the cluster can take a session right now.${wait(err)}`;
    default: break;
  }
  if (err.name === "TypeError") return "The server cannot be reached. Check that it is running, then reload the page.";
  return err.message || "Something went wrong.";
}

/** Words for an engine quality step (the `quality` event). */
export function qualityWords(ev) {
  const name = `“${ev.name}”`;
  if (ev.reason === "overload") {
    return `The server is falling behind, so it lowered the picture quality to ${name} to keep the stream smooth.`;
  }
  if (ev.reason === "recovered") return `The server has room again: picture quality back up to ${name}.`;
  if (ev.reason === "warm_start") return `Started at ${name} quality while the engine warms up.`;
  return `Picture quality now ${name} (${ev.reason}).`;
}

export { clipWords, photoWords, PHOTO_TYPES };
