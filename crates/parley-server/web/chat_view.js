// The open conversation: its timeline (newest page first, older pages on scrolling up, live
// events, pending sends from the outbox), the read position (the highest visible seq while the
// tab is visible and focused), the composer (composer.js), typing, recall, and the relations of
// docs/RELATIONS.md: replies quoted above the message, edits, reaction chips and the picker,
// the reply count of a thread (its replies are shown only in the thread panel); files dropped
// on it go to the composer as attachments (docs/MEDIA.md).

import { $, el, showError } from "./dom.js";
import { convName, describeEvent, directPeer, lastSeen } from "./format.js";
import { Composer, acceptDrops } from "./composer.js";
import {
  createKeeper, messageItem, pendingItem, replaceKeepingFocus,
} from "./message_view.js";

// Within this distance of the top, the older page is loaded; of the bottom, the view follows
// new messages.
const NEAR_TOP_PX = 80;
const NEAR_BOTTOM_PX = 60;
const READ_DEBOUNCE_MS = 60;
// How long a message jumped to stays highlighted, and how many older pages a jump may load.
const FLASH_MS = 1600;
const JUMP_PAGES_MAX = 20;
// A jump far back loads pages reaching the message and this many events above it, of at most
// JUMP_PAGE_LEN_MAX events (the server's largest page).
const JUMP_CONTEXT = 25;
const JUMP_PAGE_LEN_MAX = 500;

// Whether the main timeline shows an event: messages that are not thread replies, and the
// lines about members. Edits, reactions and recalls change the message they name.
export function inMainTimeline(e) {
  if (e.kind === "msg") return e.thread_root == null;
  return e.kind === "join" || e.kind === "leave";
}

export function createChatView(app) {
  const none = $("conv-none");
  const pane = $("conv-open");
  const title = $("conv-title");
  const sub = $("conv-sub");
  const timeline = $("timeline");
  const top = $("timeline-top");
  const messages = $("messages");
  const typing = $("typing");
  const input = $("composer-input");
  const sendError = $("send-error");
  let convId = null;
  let readTimer = null;
  let pickerSeq = null;
  let flashSeq = null;
  let flashTimer = null;
  // Attachment elements kept across redraws (loaded images, playing audio).
  const keeper = createKeeper();

  function conv() {
    return app.sync.conversations.get(convId);
  }

  const composer = new Composer(app, {
    form: $("composer"),
    input,
    context: $("composer-context"),
    suggest: $("composer-suggest"),
    error: sendError,
    attach: {
      button: $("composer-attach"),
      picker: $("composer-files"),
      tray: $("composer-attachments"),
      status: $("composer-att-status"),
    },
    convId: () => convId,
    lastOwn: () => {
      const tl = app.sync.timelines.get(convId);
      const me = app.session.user_id;
      const own = (tl ? tl.ordered() : []).filter(
        (e) => e.kind === "msg" && e.sender_user === me && !e.recalled && e.thread_root == null,
      );
      return own.at(-1) ?? null;
    },
    sent: () => {
      timeline.scrollTop = timeline.scrollHeight;
    },
  });

  function context() {
    return {
      me: app.session.user_id,
      recallWindowMs: conv()?.recall_window_ms ?? 0,
      inThread: false,
      pickerSeq,
      flashSeq,
      lookup: (seq) => app.sync.lookup(convId, seq),
      mentionable: (item) => app.mentionable(item.conv_id, item.body, item.mentions),
      media: app.media,
      keep: (key, make) => keeper.keep(convId + "|" + key, make),
      onReply: (e) => composer.reply(e),
      onThread: (e) => app.openThread(convId, e.seq),
      onEdit: (e) => composer.edit(e),
      onReact: (e, key, remove) => react(e, key, remove),
      onRecall: (e) => recall(e.seq),
      onJump: (seq) => jump(seq),
      onPicker: (e) => {
        pickerSeq = pickerSeq === e.seq ? null : e.seq;
        renderTimeline("keep");
      },
      onDiscard: (item) => app.outbox.discard(item.client_msg_id),
    };
  }

  function renderTimeline(mode) {
    const tl = app.sync.timelines.get(convId);
    const atBottom =
      timeline.scrollHeight - timeline.scrollTop - timeline.clientHeight < NEAR_BOTTOM_PX;
    const before = timeline.scrollHeight;
    const events = tl ? tl.ordered().filter(inMainTimeline) : [];
    const held = new Set(
      (tl ? [...tl.events.values()] : []).map((e) => e.client_msg_id).filter(Boolean),
    );
    const pending = app.outbox
      .forConv(convId)
      .filter((i) => !held.has(i.client_msg_id) && i.thread_root == null);
    const ctx = context();
    const me = ctx.me;
    replaceKeepingFocus(messages, [
      ...events.map((e) =>
        e.kind === "msg"
          ? messageItem(e, ctx)
          : el("li", { class: "system", data: { seq: String(e.seq) } }, describeEvent(e, me)),
      ),
      ...pending.map((i) => pendingItem(i, ctx)),
    ]);
    keeper.drawn();
    composer.refresh((seq) => app.sync.lookup(convId, seq));
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
        // Up to the next line drawn: the thread replies, edits and reactions in between are
        // not lines of their own. The last line reads through the timeline's cursor.
        const next = lines[i + 1];
        const tl = app.sync.timelines.get(convId);
        const seq = next
          ? Number(next.dataset.seq) - 1
          : Math.max(Number(lines[i].dataset.seq), tl?.cursor ?? 0);
        app.markRead(convId, seq);
        return;
      }
    }
  }

  // The page before the oldest held (scrolling up, or a page too short to scroll).
  async function loadOlder() {
    const tl = app.sync.timelines.get(convId);
    if (!tl?.loaded || tl.nextBefore === null || tl.loadingOlder) return;
    const p = app.sync.loadOlder(convId);
    renderTimeline("keep");
    await p.catch(() => {});
  }

  async function recall(seq) {
    showError(sendError, null);
    try {
      await app.recall(convId, seq);
    } catch (e) {
      showError(sendError, app.describeError(e));
    }
  }

  async function react(e, key, remove) {
    showError(sendError, null);
    pickerSeq = null;
    renderTimeline("keep");
    try {
      await app.react(convId, e.seq, key, remove);
    } catch (err) {
      showError(sendError, app.describeError(err));
    }
  }

  function flash(seq) {
    flashSeq = seq;
    clearTimeout(flashTimer);
    flashTimer = setTimeout(() => {
      flashSeq = null;
      messages.querySelector(`li[data-seq="${seq}"]`)?.classList.remove("flash");
    }, FLASH_MS);
  }

  // Scrolls to the message at `seq` (loading older pages until it is held) and highlights it;
  // a thread reply opens its thread. `instant`: no smooth scrolling (a search hit, whose
  // conversation may have just opened and whose older pages may move the view meanwhile).
  async function jump(seq, { instant = false } = {}) {
    const id = convId;
    if (!id) return;
    showError(sendError, null);
    // A conversation just opened: its first page (or catch-up) is waited for; a message newer
    // than the cursor (a hit not pushed yet) is fetched.
    const first = app.sync.timeline(id);
    await first.run(() => {});
    if (convId !== id) return;
    if (first.loaded && seq > first.cursor) await app.sync.catchUp(id).catch(() => {});
    for (let i = 0; i <= JUMP_PAGES_MAX && convId === id; i++) {
      const known = app.sync.lookup(id, seq);
      if (known?.thread_root != null) {
        app.openThread(id, known.thread_root, seq);
        return;
      }
      const line = messages.querySelector(`li[data-seq="${seq}"]`);
      if (line) {
        flash(seq);
        line.classList.add("flash");
        line.scrollIntoView({ block: "center", behavior: instant ? "auto" : "smooth" });
        return;
      }
      const tl = app.sync.timelines.get(id);
      if (!tl?.loaded || tl.nextBefore === null || tl.nextBefore <= seq) break;
      const reach = Math.min(JUMP_PAGE_LEN_MAX, tl.nextBefore - seq + JUMP_CONTEXT);
      await app.sync.loadOlder(id, reach).catch(() => {});
      // A page already on its way (scrolling) is waited for too.
      await tl.run(() => {});
    }
    if (convId === id) showError(sendError, "That message is no longer available.");
  }

  // The picker closes on Escape and on a click anywhere else.
  document.addEventListener("click", (e) => {
    if (pickerSeq === null || e.target.closest?.(".picker, .act-react")) return;
    pickerSeq = null;
    if (convId) renderTimeline("keep");
  });
  messages.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && pickerSeq !== null) {
      const seq = pickerSeq;
      pickerSeq = null;
      renderTimeline("keep");
      messages.querySelector(`[data-key="${seq}:react"]`)?.focus();
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
  acceptDrops(pane, () => composer);

  return {
    open(id) {
      convId = id;
      document.body.classList.add("show-conv");
      none.hidden = true;
      pane.hidden = false;
      pickerSeq = null;
      composer.reset();
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
      keeper.clear();
      composer.reset();
    },
    jump: (seq, options) => jump(seq, options),
    update(what, id) {
      if (!convId) return;
      if (what === "list" || what === "presence") renderHeader();
      if (what === "typing" && id === convId) renderTyping();
      if ((what === "timeline" || what === "outbox") && id === convId) renderTimeline("keep");
      if (what === "older" && id === convId) renderTimeline("older");
      if (what === "list") scheduleRead();
    },
    current: () => convId,
    composer: () => composer,
  };
}
