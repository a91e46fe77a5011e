// A message composer: the conversation's main one and the thread panel's. Enter sends,
// Shift+Enter starts a new line; a bar above it says when the next send replies to a message
// or when the text replaces one's own message (edit mode: Enter saves, Escape cancels); Up in
// an empty composer edits one's last message; typing `@` offers the conversation's members
// (Up/Down to choose, Enter or Tab to take, Escape to close).

import { el, showError } from "./dom.js";
import { quoteNodes } from "./message_view.js";
import { mentionsIn } from "./relations.js";

// Typing frames go out at most this often while the user types.
const TYPING_EVERY_MS = 2000;
// Most members the mention list offers at once.
const SUGGEST_MAX = 8;

export class Composer {
  // `parts`: the form, its textarea, the context bar, the suggestion list and the error line;
  // `convId()` the open conversation, `threadRoot()` the thread it sends in (or null),
  // `lastOwn()` one's last message there (for Up), `sent()` after a send.
  constructor(app, { form, input, context, suggest, error, convId, threadRoot, lastOwn, sent }) {
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
  }

  // Forgets the text and the mode (another conversation or thread was opened).
  reset() {
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
    if (!body.trim()) return;
    const relations = {};
    const root = this.threadRoot();
    if (root != null) relations.thread_root = root;
    if (this.mode?.kind === "reply") relations.reply_to = this.mode.event.seq;
    const words = mentionsIn(body);
    const mentions = [...this.picked].filter((u) => words.includes(u));
    if (mentions.length) relations.mentions = mentions;
    this.app.send(convId, body, relations);
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
