// A message composer: the conversation's main one and the thread panel's. Enter sends,
// Shift+Enter starts a new line; a bar above it says when the next send replies to a message
// or when the text replaces one's own message (edit mode: Enter saves, Escape cancels); Up in
// an empty composer edits one's last message; typing `@` offers the conversation's members
// (Up/Down to choose, Enter or Tab to take, Escape to close).
//
// Attachments (docs/MEDIA.md): files come from the attach button's file picker, from a paste
// into the text, or from a drop on the conversation (`acceptDrops`). Each is uploaded at once
// and shows as a chip above the text with its name, size and progress, and can be removed
// (which cancels its upload); a refused upload shows the server's reason on its chip, with
// Retry when trying again may help. While any upload runs the send button is disabled and says
// so; a send takes the text and every finished upload, and leaves failed chips in place.

import { el, showError } from "./dom.js";
import { fileTag, humanSize } from "./format.js";
import { quoteNodes } from "./message_view.js";
import { mentionsIn } from "./relations.js";

// Typing frames go out at most this often while the user types.
const TYPING_EVERY_MS = 2000;
// Most members the mention list offers at once.
const SUGGEST_MAX = 8;
// Most attachments one message may carry (docs/MEDIA.md).
export const ATTACHMENTS_MAX = 10;
// Refusals after which the same upload may well succeed.
const UPLOAD_RETRYABLE = new Set([
  "NETWORK", "TIMEOUT", "UPLOAD_INCOMPLETE", "REQUEST_TIMEOUT", "RATE_LIMITED", "UNAVAILABLE",
]);
let uploadSerial = 0;

// Makes `zone` take dropped files for `composer()`, highlighted while files are dragged over it.
export function acceptDrops(zone, composer) {
  let depth = 0;
  const carriesFiles = (e) => [...(e.dataTransfer?.types ?? [])].includes("Files");
  const clear = () => {
    depth = 0;
    zone.classList.remove("dropping");
  };
  zone.classList.add("drop-zone");
  zone.addEventListener("dragenter", (e) => {
    if (!carriesFiles(e)) return;
    e.preventDefault();
    depth += 1;
    zone.classList.add("dropping");
  });
  zone.addEventListener("dragover", (e) => {
    if (!carriesFiles(e)) return;
    e.preventDefault();
    e.dataTransfer.dropEffect = "copy";
    zone.classList.add("dropping");
  });
  zone.addEventListener("dragleave", (e) => {
    if (!carriesFiles(e)) return;
    depth = Math.max(0, depth - 1);
    if (depth === 0) zone.classList.remove("dropping");
  });
  zone.addEventListener("drop", (e) => {
    if (!carriesFiles(e)) return;
    e.preventDefault();
    clear();
    const files = [...(e.dataTransfer.files ?? [])];
    if (files.length) composer().addFiles(files);
  });
  window.addEventListener("dragend", clear);
  window.addEventListener("drop", clear);
}

export class Composer {
  // `parts`: the form, its textarea, the context bar, the suggestion list, the error line and
  // `attach` ({button, picker, tray, status}: the attach button, its file input, the list of
  // chips and the line saying what the uploads do); `convId()` the open conversation,
  // `threadRoot()` the thread it sends in (or null), `lastOwn()` one's last message there (for
  // Up), `sent()` after a send.
  constructor(
    app,
    { form, input, context, suggest, error, attach, convId, threadRoot, lastOwn, sent },
  ) {
    this.app = app;
    this.form = form;
    this.input = input;
    this.context = context;
    this.suggest = suggest;
    this.error = error;
    this.convId = convId;
    this.threadRoot = threadRoot ?? (() => null);
    this.lastOwn = lastOwn;
    this.sent = sent ?? (() => {});
    this.mode = null;
    this.picked = new Set();
    this.options = null;
    this.lastTypingSent = 0;
    this.busy = false;
    this.attach = attach;
    this.uploads = [];
    this.sendButton = form.querySelector("button[type=submit]");
    this.sendLabel = this.sendButton.textContent;

    form.addEventListener("submit", (e) => {
      e.preventDefault();
      this.submit();
    });
    input.addEventListener("keydown", (e) => this.onKey(e));
    input.addEventListener("input", () => {
      this.updateSuggest();
      this.typing();
    });
    input.addEventListener("click", () => this.updateSuggest());
    input.addEventListener("blur", () => setTimeout(() => this.closeSuggest(), 150));
    context.querySelector(".ctx-cancel").addEventListener("click", () => {
      this.cancel();
      input.focus();
    });
    input.setAttribute("aria-autocomplete", "list");
    input.setAttribute("aria-controls", suggest.id);
    input.addEventListener("paste", (e) => {
      const files = [...(e.clipboardData?.files ?? [])];
      if (files.length === 0) return;
      e.preventDefault();
      this.addFiles(files);
    });
    if (attach) {
      attach.button.addEventListener("click", () => attach.picker.click());
      attach.picker.addEventListener("change", () => {
        const files = [...attach.picker.files];
        attach.picker.value = "";
        this.addFiles(files);
        input.focus();
      });
    }
  }

  // Uploads `files` at once, each with its chip, up to ATTACHMENTS_MAX in all.
  addFiles(files) {
    if (!this.attach) return;
    showError(this.error, null);
    for (const file of files) {
      if (this.uploads.length >= ATTACHMENTS_MAX) {
        showError(this.error, `At most ${ATTACHMENTS_MAX} files go with one message.`);
        break;
      }
      const u = { key: "up" + ++uploadSerial, file, state: "uploading", sent: 0, error: null };
      u.node = this.chip(u);
      this.uploads.push(u);
      this.attach.tray.append(u.node);
      this.upload(u);
    }
    this.drawUploads();
  }

  upload(u) {
    u.state = "uploading";
    u.sent = 0;
    u.error = null;
    u.retryable = false;
    const { promise, abort } = this.app.api.upload(u.file, (sent) => {
      u.sent = sent;
      this.drawChip(u);
    });
    u.abort = abort;
    promise.then(
      (media) => {
        if (!this.uploads.includes(u)) return;
        u.state = "done";
        u.media = media;
        u.sent = u.file.size;
        this.drawUploads();
        this.chipPreview(u);
      },
      (err) => {
        if (!this.uploads.includes(u) || err.code === "ABORTED") return;
        u.state = "failed";
        u.error = this.app.describeError(err);
        u.retryable = UPLOAD_RETRYABLE.has(err.code);
        this.drawUploads();
      },
    );
  }

  // A chip: icon, name, size, progress and state, Retry (after a refusal that may pass another
  // time) and Remove.
  chip(u) {
    const name = u.file.name || "file";
    const progress = el("progress", {
      class: "att-progress",
      max: Math.max(1, u.file.size),
      value: 0,
      "aria-label": "Upload of " + name,
    });
    const retry = el("button", {
      type: "button",
      class: "quiet att-retry",
      text: "Retry",
      "aria-label": "Upload " + name + " again",
      data: { key: u.key + ":retry" },
      hidden: true,
      onclick: () => {
        this.upload(u);
        this.drawUploads();
        u.node.querySelector(".att-remove").focus();
      },
    });
    const remove = el("button", {
      type: "button",
      class: "quiet att-remove",
      text: "✕",
      title: "Remove",
      "aria-label": "Remove " + name,
      data: { key: u.key + ":remove" },
      onclick: () => this.removeUpload(u),
    });
    return el(
      "li",
      { class: "att-chip", data: { key: u.key, state: u.state } },
      el("span", { class: "att-icon", "aria-hidden": "true" }, fileTag(name, u.file.type)),
      el(
        "span",
        { class: "att-chip-main" },
        el(
          "span",
          { class: "att-chip-line" },
          el("span", { class: "att-name", title: name }, name),
          el("span", { class: "att-size" }, humanSize(u.file.size)),
        ),
        progress,
        el("span", { class: "att-state" }),
      ),
      retry,
      remove,
    );
  }

  drawChip(u) {
    const node = u.node;
    const size = Math.max(1, u.file.size);
    node.dataset.state = u.state;
    const progress = node.querySelector(".att-progress");
    progress.value = u.state === "done" ? size : Math.min(size, u.sent);
    progress.hidden = u.state === "failed";
    const state = node.querySelector(".att-state");
    state.textContent =
      u.state === "uploading"
        ? "uploading " + Math.floor((100 * Math.min(size, u.sent)) / size) + "%"
        : u.state === "done"
          ? "ready"
          : u.error;
    // Progress is not read out at every step (the tray's line says what runs); a refusal is.
    if (u.state === "failed") state.setAttribute("role", "alert");
    else state.removeAttribute("role");
    node.querySelector(".att-retry").hidden = !(u.state === "failed" && u.retryable);
  }

  // A finished image's chip shows its thumbnail (its uploader may see it before it is sent).
  chipPreview(u) {
    const m = u.media;
    if (!m?.thumbnail || !this.app.media) return;
    this.app.media.get(m.media_id).then(
      (url) => {
        if (!url.thumbnailUrl || !this.uploads.includes(u)) return;
        u.node
          .querySelector(".att-icon")
          .replaceChildren(el("img", { src: url.thumbnailUrl, alt: "", width: 28, height: 28 }));
      },
      () => {},
    );
  }

  removeUpload(u) {
    const i = this.uploads.indexOf(u);
    if (i < 0) return;
    if (u.state === "uploading") u.abort?.();
    this.uploads.splice(i, 1);
    u.node.remove();
    // The keyboard goes on to the next chip's Remove, else back to the text.
    const next = this.uploads[i] ?? this.uploads[i - 1];
    (next ? next.node.querySelector(".att-remove") : this.input).focus();
    this.drawUploads();
  }

  clearUploads(which = () => true) {
    for (const u of this.uploads.filter(which)) {
      if (u.state === "uploading") u.abort?.();
      u.node.remove();
    }
    this.uploads = this.uploads.filter((u) => !which(u));
    this.drawUploads();
  }

  // The chips, the tray's state line and the send button, after any change of an upload.
  drawUploads() {
    if (!this.attach) return;
    for (const u of this.uploads) this.drawChip(u);
    const { tray, status } = this.attach;
    tray.hidden = this.uploads.length === 0;
    const running = this.uploads.filter((u) => u.state === "uploading").length;
    const failed = this.uploads.filter((u) => u.state === "failed").length;
    this.sendButton.disabled = running > 0;
    this.sendButton.textContent = running > 0 ? "Uploading…" : this.sendLabel;
    this.sendButton.title = running > 0 ? "Send waits until the files are uploaded" : "";
    const files = (n) => (n === 1 ? "1 file" : n + " files");
    const says = [];
    if (running) says.push(`Uploading ${files(running)}; Send waits for them.`);
    if (failed) says.push(`${files(failed)} could not be uploaded and will not be sent.`);
    status.textContent = says.join(" ");
    status.hidden = says.length === 0;
  }

  // Forgets the text, the mode and the attachments (another conversation or thread was opened).
  reset() {
    this.clearUploads();
    this.input.value = "";
    this.picked.clear();
    this.setMode(null);
    this.closeSuggest();
    showError(this.error, null);
  }

  reply(event) {
    this.setMode({ kind: "reply", event });
    this.input.focus();
  }

  edit(event) {
    this.setMode({ kind: "edit", event, draft: this.input.value });
    this.input.value = event.body ?? "";
    this.input.focus();
    this.input.setSelectionRange(this.input.value.length, this.input.value.length);
  }

  // Leaves reply or edit mode; an edit gives back the text that was there before it.
  cancel() {
    if (this.mode?.kind === "edit") this.input.value = this.mode.draft ?? "";
    this.setMode(null);
  }

  setMode(mode) {
    this.mode = mode;
    this.form.classList.toggle("editing", mode?.kind === "edit");
    const label = this.context.querySelector(".ctx-label");
    const quote = this.context.querySelector(".ctx-quote");
    if (!mode) {
      this.context.hidden = true;
      label.textContent = "";
      quote.replaceChildren();
      return;
    }
    this.context.hidden = false;
    this.context.dataset.mode = mode.kind;
    label.textContent = mode.kind === "edit" ? "Editing your message" : "Replying to";
    quote.replaceChildren(
      ...(mode.kind === "reply" ? quoteNodes(mode.event, this.app.session.user_id) : []),
    );
  }

  // The message being replied to or edited changed (an edit, a recall): follow it.
  refresh(lookup) {
    if (!this.mode) return;
    const now = lookup(this.mode.event.seq);
    if (!now) return;
    if (now.recalled) {
      this.cancel();
      return;
    }
    if (this.mode.kind === "reply") this.setMode({ ...this.mode, event: now });
  }

  async submit() {
    const convId = this.convId();
    const body = this.input.value;
    if (!convId || this.busy) return;
    showError(this.error, null);
    this.closeSuggest();
    if (this.mode?.kind === "edit") {
      const target = this.mode.event;
      if (!body.trim() || body === target.body) {
        this.cancel();
        return;
      }
      this.busy = true;
      try {
        await this.app.edit(convId, target.seq, body);
        if (this.mode?.event === target) {
          this.input.value = this.mode.draft ?? "";
          this.setMode(null);
        }
      } catch (e) {
        showError(this.error, this.app.describeError(e));
      } finally {
        this.busy = false;
      }
      return;
    }
    if (this.uploads.some((u) => u.state === "uploading")) {
      this.attach.status.textContent = "Wait for the uploads to finish, then send.";
      this.attach.status.hidden = false;
      return;
    }
    const ready = this.uploads.filter((u) => u.state === "done");
    if (!body.trim() && ready.length === 0) return;
    const relations = {};
    if (ready.length) relations.attachments = ready.map((u) => u.media);
    const root = this.threadRoot();
    if (root != null) relations.thread_root = root;
    if (this.mode?.kind === "reply") relations.reply_to = this.mode.event.seq;
    const words = mentionsIn(body);
    const mentions = [...this.picked].filter((u) => words.includes(u));
    if (mentions.length) relations.mentions = mentions;
    this.app.send(convId, body.trim() ? body : "", relations);
    this.clearUploads((u) => u.state === "done");
    this.input.value = "";
    this.picked.clear();
    this.lastTypingSent = 0;
    this.setMode(null);
    this.sent();
  }

  typing() {
    const convId = this.convId();
    if (!convId || !this.input.value || this.mode?.kind === "edit") return;
    const now = Date.now();
    if (now - this.lastTypingSent >= TYPING_EVERY_MS) {
      this.lastTypingSent = now;
      this.app.typing(convId);
    }
  }

  onKey(e) {
    if (this.options) {
      if (e.key === "ArrowDown" || e.key === "ArrowUp") {
        e.preventDefault();
        const n = this.options.ids.length;
        this.options.active = (this.options.active + (e.key === "ArrowDown" ? 1 : n - 1)) % n;
        this.drawSuggest();
        return;
      }
      if ((e.key === "Enter" && !e.shiftKey) || e.key === "Tab") {
        e.preventDefault();
        this.pick(this.options.ids[this.options.active]);
        return;
      }
      if (e.key === "Escape") {
        e.preventDefault();
        this.closeSuggest();
        return;
      }
    }
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      this.submit();
    } else if (e.key === "Escape" && this.mode) {
      e.preventDefault();
      this.cancel();
    } else if (e.key === "ArrowUp" && this.input.value === "" && !this.mode) {
      const last = this.lastOwn();
      if (last) {
        e.preventDefault();
        this.edit(last);
      }
    }
  }

  // The members whose id starts (or, after those, contains) what follows the `@` before the
  // caret.
  updateSuggest() {
    const { input } = this;
    const caret = input.selectionStart;
    if (caret !== input.selectionEnd) return this.closeSuggest();
    const m = /(^|[^A-Za-z0-9._@-])@([A-Za-z0-9._-]*)$/.exec(input.value.slice(0, caret));
    if (!m) return this.closeSuggest();
    const query = m[2].toLowerCase();
    const me = this.app.session.user_id;
    const members = (this.app.sync.conversations.get(this.convId())?.members ?? [])
      .map((x) => x.user_id)
      .filter((u) => u !== me);
    const starts = members.filter((u) => u.toLowerCase().startsWith(query));
    const contains = members.filter((u) => !starts.includes(u) && u.toLowerCase().includes(query));
    const ids = [...starts.sort(), ...contains.sort()].slice(0, SUGGEST_MAX);
    if (ids.length === 0) return this.closeSuggest();
    const active = Math.min(this.options?.active ?? 0, ids.length - 1);
    this.options = { ids, active, start: caret - m[2].length - 1, end: caret };
    this.drawSuggest();
  }

  drawSuggest() {
    const { ids, active } = this.options;
    const base = this.suggest.id + "-";
    this.suggest.replaceChildren(
      ...ids.map((u, i) =>
        el(
          "li",
          {
            id: base + i,
            role: "option",
            class: i === active ? "active" : null,
            "aria-selected": i === active ? "true" : "false",
            data: { userId: u },
            onmousedown: (e) => e.preventDefault(),
            onclick: () => this.pick(u),
          },
          el("span", { class: "at" }, "@"),
          u,
        ),
      ),
    );
    this.suggest.hidden = false;
    this.input.setAttribute("aria-expanded", "true");
    this.input.setAttribute("aria-activedescendant", base + active);
  }

  closeSuggest() {
    this.options = null;
    this.suggest.hidden = true;
    this.suggest.replaceChildren();
    this.input.setAttribute("aria-expanded", "false");
    this.input.removeAttribute("aria-activedescendant");
  }

  // Puts `@user ` in place of the word being typed.
  pick(userId) {
    const { start, end } = this.options;
    const value = this.input.value;
    const rest = value.slice(end).replace(/^[A-Za-z0-9._-]*/, "");
    const insert = "@" + userId + (rest.startsWith(" ") ? "" : " ");
    this.input.value = value.slice(0, start) + insert + rest;
    const caret = start + insert.length;
    this.input.setSelectionRange(caret, caret);
    this.picked.add(userId);
    this.closeSuggest();
    this.input.focus();
  }
}
