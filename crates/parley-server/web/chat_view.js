// The open conversation: its timeline (newest page first, older pages on scrolling up, live
// events, pending sends from the outbox), the read position (the highest visible seq while the
// tab is visible and focused), the composer (Enter sends, Shift+Enter a new line), typing and
// recall.

import { $, el, showError } from "./dom.js";
import { clock, convName, describeEvent, directPeer, lastSeen } from "./format.js";

// Typing frames go out at most this often while the user types.
const TYPING_EVERY_MS = 2000;
// Within this distance of the top, the older page is loaded; of the bottom, the view follows
// new messages.
const NEAR_TOP_PX = 80;
const NEAR_BOTTOM_PX = 60;
const READ_DEBOUNCE_MS = 60;

export function createChatView(app) {
  const none = $("conv-none");
  const pane = $("conv-open");
  const title = $("conv-title");
  const sub = $("conv-sub");
  const timeline = $("timeline");
  const top = $("timeline-top");
  const messages = $("messages");
  const typing = $("typing");
  const composer = $("composer");
  const input = $("composer-input");
  const sendError = $("send-error");
  let convId = null;
  let lastTypingSent = 0;
  let readTimer = null;

  function conv() {
    return app.sync.conversations.get(convId);
  }

  function messageItem(e, me, recallWindowMs) {
    if (e.kind !== "msg") {
      return el("li", { class: "system", data: { seq: String(e.seq) } }, describeEvent(e, me));
    }
    const mine = e.sender_user === me;
    const recallable =
      mine && !e.recalled && Date.now() < Date.parse(e.created_at) + recallWindowMs;
    const classes = ["msg"];
    if (mine) classes.push("mine");
    if (e.recalled) classes.push("recalled");
    return el(
      "li",
      { class: classes.join(" "), data: { seq: String(e.seq), clientMsgId: e.client_msg_id ?? "" } },
      mine ? null : el("span", { class: "who" }, e.sender_user),
      el("p", { class: "body" }, e.recalled ? "message recalled" : e.body ?? ""),
      el(
        "span",
        { class: "meta" },
        el("time", { datetime: e.created_at }, clock(e.created_at)),
        recallable
          ? el("button", {
              type: "button",
              class: "quiet recall",
              text: "Recall",
              "aria-label": "Recall this message",
              onclick: () => recall(e.seq),
            })
          : null,
      ),
    );
  }

  function pendingItem(item) {
    const failed = !!item.failed;
    return el(
      "li",
      {
        class: failed ? "msg mine failed" : "msg mine pending",
        data: { clientMsgId: item.client_msg_id, pending: "true" },
      },
      el("p", { class: "body" }, item.body),
      el(
        "span",
        { class: "meta" },
        el("span", { class: "state" }, failed ? "not sent: " + item.failed : "pending"),
        failed
          ? el("button", {
              type: "button",
              class: "quiet",
              text: "Discard",
              onclick: () => app.outbox.discard(item.client_msg_id),
            })
          : null,
      ),
    );
  }

  function renderTimeline(mode) {
    const c = conv();
    const tl = app.sync.timelines.get(convId);
    const me = app.session.user_id;
    const atBottom =
      timeline.scrollHeight - timeline.scrollTop - timeline.clientHeight < NEAR_BOTTOM_PX;
    const before = timeline.scrollHeight;
    const events = tl ? tl.ordered().filter((e) => e.kind !== "recall") : [];
    const held = new Set(events.map((e) => e.client_msg_id).filter(Boolean));
    const pending = app.outbox.forConv(convId).filter((i) => !held.has(i.client_msg_id));
    const windowMs = c?.recall_window_ms ?? 0;
    messages.replaceChildren(
      ...events.map((e) => messageItem(e, me, windowMs)),
      ...pending.map(pendingItem),
    );
    if (!tl?.loaded) top.textContent = "Loading…";
    else if (tl.nextBefore === null) top.textContent = "Beginning of the conversation";
    else top.textContent = tl.loadingOlder ? "Loading older messages…" : "Scroll up for older messages";
    if (mode === "older") timeline.scrollTop += timeline.scrollHeight - before;
    else if (atBottom || mode === "first") timeline.scrollTop = timeline.scrollHeight;
    // A page too short to scroll cannot be scrolled up: the older page comes by itself.
    if (tl?.loaded && tl.nextBefore !== null && timeline.scrollHeight <= timeline.clientHeight) {
      loadOlder();
    }
    scheduleRead();
  }

  function renderHeader() {
    const c = conv();
    if (!c) return;
    const me = app.session.user_id;
    title.textContent = convName(c, me);
    const peer = directPeer(c, me);
    if (peer) {
      const state = app.presence.status(peer);
      sub.replaceChildren(
        el("span", { class: state?.online ? "dot online" : "dot" }),
        state ? lastSeen(state) : "direct chat",
      );
    } else {
      const n = c.members?.length;
      sub.textContent = n ? n + " members" : "group";
    }
  }

  function renderTyping() {
    const typers = app.presence.typers(convId);
    typing.textContent =
      typers.length === 0
        ? ""
        : typers.length === 1
          ? typers[0] + " is typing…"
          : typers.join(", ") + " are typing…";
  }

  // The highest seq whose line is on screen, once the tab is seen by someone.
  function scheduleRead() {
    clearTimeout(readTimer);
    readTimer = setTimeout(markRead, READ_DEBOUNCE_MS);
  }

  function markRead() {
    if (!convId || document.visibilityState !== "visible" || !document.hasFocus()) return;
    if (pane.hidden || pane.offsetParent === null) return;
    const box = timeline.getBoundingClientRect();
    const lines = messages.querySelectorAll("li[data-seq]");
    for (let i = lines.length - 1; i >= 0; i--) {
      const r = lines[i].getBoundingClientRect();
      if (r.top < box.bottom && r.bottom > box.top) {
        app.markRead(convId, Number(lines[i].dataset.seq));
        return;
      }
    }
  }

  async function recall(seq) {
    showError(sendError, null);
    try {
      await app.recall(convId, seq);
    } catch (e) {
      showError(sendError, app.describeError(e));
    }
  }

  async function loadOlder() {
    const tl = app.sync.timelines.get(convId);
    if (!tl?.loaded || tl.nextBefore === null || tl.loadingOlder) return;
    const p = app.sync.loadOlder(convId);
    renderTimeline("keep");
    await p.catch(() => {});
  }

  function submit() {
    const body = input.value;
    if (!body.trim() || !convId) return;
    showError(sendError, null);
    app.send(convId, body);
    input.value = "";
    lastTypingSent = 0;
    timeline.scrollTop = timeline.scrollHeight;
  }

  composer.addEventListener("submit", (e) => {
    e.preventDefault();
    submit();
  });
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      submit();
    }
  });
  input.addEventListener("input", () => {
    if (!convId || !input.value) return;
    const now = Date.now();
    if (now - lastTypingSent >= TYPING_EVERY_MS) {
      lastTypingSent = now;
      app.typing(convId);
    }
  });
  timeline.addEventListener("scroll", () => {
    if (timeline.scrollTop < NEAR_TOP_PX) loadOlder();
    scheduleRead();
  });
  document.addEventListener("visibilitychange", scheduleRead);
  window.addEventListener("focus", scheduleRead);
  window.addEventListener("resize", scheduleRead);
  $("back").addEventListener("click", () => app.closeConversation());

  return {
    open(id) {
      convId = id;
      document.body.classList.add("show-conv");
      none.hidden = true;
      pane.hidden = false;
      showError(sendError, null);
      input.value = "";
      renderHeader();
      renderTyping();
      app.membersPanel.close();
      const tl = app.sync.timeline(id);
      if (tl.loaded) {
        renderTimeline("first");
        app.sync.catchUp(id).catch(() => {});
      } else {
        renderTimeline("first");
        app.sync
          .loadNewest(id)
          .then(() => renderTimeline("first"))
          .catch((e) => showError(sendError, app.describeError(e)));
      }
      // The member list (for the header and presence) comes with the single conversation.
      app.api
        .conversation(id)
        .then((c) => {
          const known = app.sync.conversations.get(id);
          app.sync.conversations.set(id, { ...known, ...c });
          if (convId === id) renderHeader();
          app.presence.fetch((c.members ?? []).map((m) => m.user_id));
        })
        .catch(() => {});
      input.focus();
    },
    close() {
      convId = null;
      document.body.classList.remove("show-conv");
      pane.hidden = true;
      none.hidden = false;
      app.membersPanel.close();
    },
    reset() {
      convId = null;
      pane.hidden = true;
      none.hidden = false;
      messages.replaceChildren();
    },
    update(what, id) {
      if (!convId) return;
      if (what === "list" || what === "presence") renderHeader();
      if (what === "typing" && id === convId) renderTyping();
      if ((what === "timeline" || what === "outbox") && id === convId) renderTimeline("keep");
      if (what === "older" && id === convId) renderTimeline("older");
      if (what === "list") scheduleRead();
    },
    current: () => convId,
  };
}
