// The face picker: one list of every face a session can stream — the bundled drawn avatars, the
// bundled portraits (with their attribution), the user's own photo (previewed, with a × to remove
// it) and the user's enrolled avatars (with a × to delete them). Exactly one is active, marked as
// such; it is what Start streams.

import { plainWords, PHOTO_TYPES } from "./words.js";

const PHOTO_MIME = ["image/jpeg", "image/png", "image/webp", "image/gif"];

/** An enrolled avatar's face (``GET /v1/avatars/{name}/face``) as a URL an <img> can show, or null.
 * An <img> cannot send the token a server may ask for, so the picture is fetched with it and shown
 * from memory. */
export async function enrolledFace(name, token) {
  try {
    const res = await fetch(`/v1/avatars/${encodeURIComponent(name)}/face`,
      { headers: token ? { Authorization: `Bearer ${token}` } : {}, cache: "no-store" });
    return res.ok ? URL.createObjectURL(await res.blob()) : null;
  } catch {
    return null;
  }
}

export class FacePicker {
  constructor({ $, api, token, log, onChange }) {
    this.$ = $;
    this.api = api;
    this.token = token;
    this.log = log;
    this.onChange = onChange;
    this.info = null;
    this.active = null;  // {kind: drawn | portrait | photo | personal, name, label}
    this.photoUrl = null;
    $("image").onchange = () => this.takePhoto($("image").files?.[0]);
    $("image-pick").onclick = () => (this.photoUrl ? this.select({ kind: "photo" }) : $("image").click());
    $("image-clear").onclick = () => this.clearPhoto();
  }

  /** Cards for what the server offers; ``wanted`` (a name from the URL) is active if it exists. */
  load(info, wanted) {
    this.info = info;
    const list = this.$("face-list");
    list.querySelectorAll(".face:not(.photo)").forEach((el) => el.remove());
    const photo = this.$("image-label");
    for (const name of info.avatars) {
      list.insertBefore(this.card("drawn", name, name, "drawn", info.avatar_urls?.[name]), photo);
    }
    for (const p of info.portraits || []) {
      const card = this.card("portrait", p.name, p.label || p.name, "portrait", p.url);
      card.title = `${p.label || p.name} — ${p.attribution || ""}${p.licence ? ` (${p.licence})` : ""}`;
      list.insertBefore(card, photo);
    }
    for (const name of info.personal_avatars || []) list.append(this.personalCard(name));
    photo.hidden = !info.reference_images;
    const cards = [...list.querySelectorAll(".face:not(.photo)")];
    const pick = cards.find((c) => c.dataset.name === wanted)
      || cards.find((c) => c.dataset.name === (info.page_avatar || info.default_avatar)) || cards[0];
    if (this.active?.kind === "photo" && this.photoUrl) this.select({ kind: "photo" });
    else if (pick) this.select({ kind: pick.dataset.kind, name: pick.dataset.name });
  }

  card(kind, name, label, note, thumb = null) {
    const card = document.createElement("div");
    card.className = `face ${kind}`;
    card.dataset.kind = kind;
    card.dataset.name = name;
    const pick = document.createElement("button");
    pick.type = "button";
    pick.className = "pick";
    pick.setAttribute("role", "radio");
    pick.setAttribute("aria-checked", "false");
    const image = thumb ? Object.assign(document.createElement("img"), { src: thumb, alt: "", loading: "lazy" })
      : Object.assign(document.createElement("span"), { textContent: label.slice(0, 1).toUpperCase() });
    image.className = "thumb";
    const text = Object.assign(document.createElement("span"), { className: "label", textContent: label });
    const small = Object.assign(document.createElement("small"), { textContent: note });
    pick.append(image, text, small);
    pick.onclick = () => this.select({ kind, name });
    card.append(pick);
    return card;
  }

  personalCard(name) {
    const card = this.card("personal", name, name, "your avatar");
    this.loadFace(name, card);
    const remove = Object.assign(document.createElement("button"), {
      type: "button", className: "remove", textContent: "×", title: `Delete the avatar “${name}”`,
    });
    remove.setAttribute("aria-label", `Delete ${name}`);
    remove.onclick = () => this.deletePersonal(name);
    card.append(remove);
    return card;
  }

  /** An enrolled avatar's face as its card's picture; the letter stays if it cannot be had. */
  async loadFace(name, card) {
    const src = await enrolledFace(name, this.token());
    if (!src) return;
    const image = Object.assign(document.createElement("img"), { src, alt: "", className: "thumb" });
    card.querySelector(".thumb")?.replaceWith(image);
    if (card.classList.contains("active")) this.$("video").poster = src;
  }

  /** Make one face active: its card marked, the others not, and the page told. */
  select(face) {
    const list = this.$("face-list");
    let card = null;
    if (face.kind === "photo") card = this.$("image-label");
    else card = [...list.querySelectorAll(".face")].find((c) => c.dataset.kind === face.kind && c.dataset.name === face.name);
    if (!card) return;
    list.querySelectorAll(".face").forEach((c) => {
      const on = c === card;
      c.classList.toggle("active", on);
      c.querySelector(".pick").setAttribute("aria-checked", String(on));
    });
    const label = face.kind === "photo" ? `your photo (${this.$("image").files?.[0]?.name || "photo"})`
      : card.querySelector(".label").textContent;
    this.active = { kind: face.kind, name: face.name ?? null, label };
    this.error("");
    this.describe();
    // Before Start the stage shows the chosen face (where there is a picture of it).
    const picture = card.querySelector("img.thumb:not([hidden])");
    this.$("video").poster = picture?.src || "";
    this.onChange?.(this.active);
  }

  describe() {
    const { kind, name, label } = this.active;
    const what = { drawn: "drawn avatar", portrait: "portrait", photo: "", personal: "your avatar" }[kind];
    const running = this.$("faces").classList.contains("live");
    this.$("face-active").textContent = `${running ? "Streaming" : "Chosen"}: ${label}${what ? ` (${what})` : ""}`;
    const portrait = kind === "portrait" ? (this.info.portraits || []).find((p) => p.name === name) : null;
    this.$("face-credit").textContent = portrait
      ? `${portrait.label || portrait.name}: ${portrait.attribution || ""}${portrait.licence ? ` — ${portrait.licence}` : ""}` : "";
    this.$("face-credit").hidden = !portrait;
  }

  error(text) {
    this.$("face-error").textContent = text;
    this.$("face-error").hidden = !text;
  }

  /** A photo picked in the file input: checked here where the browser can tell, then previewed and active. */
  async takePhoto(file) {
    if (!file) return;
    const refuse = (text) => {
      this.$("image").value = "";
      this.error(text);
      this.log(`photo refused: ${file.name}: ${text}`, "error");
    };
    if (!PHOTO_MIME.includes(file.type)) return refuse(`“${file.name}” is not a photo. Pick ${PHOTO_TYPES}.`);
    const limit = this.info?.max_image_bytes ?? Infinity;
    if (file.size > limit) {
      return refuse(`“${file.name}” is ${(file.size / 2 ** 20).toFixed(1)} MB: photos up to ${(limit / 2 ** 20).toFixed(0)} MB are taken.`);
    }
    try {
      (await createImageBitmap(file)).close();
    } catch {
      return refuse(`“${file.name}” could not be read as a picture (damaged or not really ${PHOTO_TYPES}).`);
    }
    let framed;
    try {
      framed = await this.framing(file);
    } catch (err) {
      return refuse(plainWords(err));
    }
    if (this.photoUrl) URL.revokeObjectURL(this.photoUrl);
    this.photoUrl = URL.createObjectURL(framed);
    const preview = this.$("image-preview");
    preview.src = this.photoUrl;
    preview.hidden = false;
    this.$("image-placeholder").hidden = true;
    this.$("image-clear").hidden = false;
    this.$("image-pick").querySelector(".label").textContent = "your photo";
    this.select({ kind: "photo" });
  }

  /** The photo as a session of it starts: the server finds and frames its face (the preview shows
   * that square), or answers why it cannot — before Start, so a bad photo is refused when picked. */
  async framing(file) {
    const token = this.token();
    const res = await fetch("/v1/photos/framing", {
      method: "POST", body: file,
      headers: { "Content-Type": file.type, ...(token ? { Authorization: `Bearer ${token}` } : {}) },
    });
    if (res.ok) return res.blob();
    const data = await res.json().catch(() => ({}));
    const error = new Error(data.error?.message || res.statusText);
    error.code = data.error?.code;
    error.status = res.status;
    throw error;
  }

  clearPhoto() {
    this.$("image").value = "";
    if (this.photoUrl) URL.revokeObjectURL(this.photoUrl);
    this.photoUrl = null;
    this.$("image-preview").hidden = true;
    this.$("image-preview").removeAttribute("src");
    this.$("image-placeholder").hidden = false;
    this.$("image-clear").hidden = true;
    this.$("image-pick").querySelector(".label").textContent = "your photo…";
    if (this.active?.kind === "photo") this.selectDefault();
  }

  selectDefault() {
    const cards = [...this.$("face-list").querySelectorAll(".face:not(.photo)")];
    const info = this.info || {};
    const pick = cards.find((c) => c.dataset.name === (info.page_avatar || info.default_avatar)) || cards[0];
    if (pick) this.select({ kind: pick.dataset.kind, name: pick.dataset.name });
  }

  addPersonal(name) {
    const list = this.$("face-list");
    let card = [...list.querySelectorAll(".face.personal")].find((c) => c.dataset.name === name);
    if (!card) list.append(card = this.personalCard(name));
    this.select({ kind: "personal", name });
  }

  async deletePersonal(name) {
    if (!window.confirm(`Delete your avatar “${name}”? It cannot be undone.`)) return;
    try {
      await this.api(`/v1/avatars/${encodeURIComponent(name)}`, { method: "DELETE", token: this.token() });
    } catch (err) {
      if (err.code !== "unknown_avatar") {
        this.error(plainWords(err, { name }));
        return;
      }
    }
    this.log(`deleted your avatar ${name}`);
    const card = [...this.$("face-list").querySelectorAll(".face.personal")].find((c) => c.dataset.name === name);
    card?.remove();
    if (this.active?.kind === "personal" && this.active.name === name) this.selectDefault();
  }

  /** The session options for the active face; a photo is sent as the API takes it (base64). */
  async sessionOptions(drawn) {
    const { kind, name } = this.active || {};
    if (kind === "drawn") return { avatar: name, ...(drawn === undefined ? {} : { drawn }) };
    if (kind !== "photo") return name ? { avatar: name } : {};
    const file = this.$("image").files?.[0];
    const bytes = new Uint8Array(await file.arrayBuffer());
    let binary = "";
    for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
    return { image: btoa(binary) };
  }

  /** While a session runs its face is fixed: the picker is disabled, and says so. */
  setEnabled(enabled) {
    this.$("face-list").querySelectorAll("button").forEach((b) => { b.disabled = !enabled; });
    this.$("image").disabled = !enabled;
    this.$("faces").title = enabled ? "" : "Stop the session to change the face";
    this.$("faces").classList.toggle("live", !enabled);
    if (this.active) this.describe();
  }
}
