// The thread panel: a thread's root and its replies (`GET …/events?thread=ROOT`, older replies
// on demand), kept live by every event the conversation's timeline takes in (sync.js views),
// with a composer that sends with `thread_root` (and takes files dropped on the panel). Replies
// are shown here only, not in the main timeline, where the root shows how many there are.

import { $, el, showError } from "./dom.js";
import { convName } from "./format.js";
import { Composer, acceptDrops } from "./composer.js";
import {
  createKeeper, messageItem, pendingItem, replaceKeepingFocus,
} from "./message_view.js";

const PAGE_LEN = 50;
const NEAR_BOTTOM_PX = 60;
const FLASH_MS = 1600;

export function createThreadPanel(app) {
  const panel = $("thread-panel");
  const box = $("thread-timeline");
  const list = $("thread-messages");
  const sub = $("thread-sub");
  const older = $("thread-older");
  const error = $("thread-error");
  const input = $("thread-input");
  // {convId, root, view, remove, loaded, nextBefore, loadingOlder} of the open thread.
  let state = null;
  let pickerSeq = null;
  let flashSeq = null;
  let flashTimer = null;
  // Attachment elements kept across redraws (loaded images, playing audio).
  const keeper = createKeeper();

  const composer = new Composer(app, {
    form: $("thread-composer"),
    input,
    context: $("thread-context"),
    suggest: $("thread-suggest"),
    error,
    attach: {
      button: $("thread-attach"),
      picker: $("thread-files"),
      tray: $("thread-attachments"),
      status: $("thread-att-status"),
    },
    convId: () => state?.convId ?? null,
    threadRoot: () => state?.root ?? null,
    lastOwn: () => {
      const me = app.session.user_id;
      const own = replies().filter((e) => e.sender_user === me && !e.recalled);
      return own.at(-1) ?? null;
    },
    sent: () => {
      box.scrollTop = box.scrollHeight;
    },
  });

  function replies() {
    if (!state) return [];
    return [...state.view.events.values()]
      .filter((e) => e.kind === "msg" && e.thread_root === state.root)
      .sort((a, b) => a.seq - b.seq);
  }

  function context() {
    const convId = state.convId;
    return {
      me: app.session.user_id,
      recallWindowMs: app.sync.conversations.get(convId)?.recall_window_ms ?? 0,
      inThread: true,
      pickerSeq,
      flashSeq,
      lookup: (seq) => app.sync.lookup(convId, seq),
      mentionable: (item) => app.mentionable(item.conv_id, item.body, item.mentions),
      media: app.media,
      keep: (key, make) => keeper.keep(convId + "|" + key, make),
      onReply: () => {},
      onThread: () => {},
      onEdit: (e) => composer.edit(e),
      onReact: async (e, key, remove) => {
        showError(error, null);
        pickerSeq = null;
        render("keep");
        try {
          await app.react(convId, e.seq, key, remove);
        } catch (err) {
          showError(error, app.describeError(err));
        }
      },
      onRecall: async (e) => {
        showError(error, null);
        try {
          await app.recall(convId, e.seq);
        } catch (err) {
          showError(error, app.describeError(err));
        }
      },
      onJump: (seq) => {
        if (!scrollTo(seq)) app.chatView.jump(seq);
      },
      onPicker: (e) => {
        pickerSeq = pickerSeq === e.seq ? null : e.seq;
        render("keep");
      },
      onDiscard: (item) => app.outbox.discard(item.client_msg_id),
    };
  }

  function render(mode) {
    if (!state) return;
    const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < NEAR_BOTTOM_PX;
    const ctx = context();
    const root = app.sync.lookup(state.convId, state.root);
    const shown = replies();
    const held = new Set(shown.map((e) => e.client_msg_id).filter(Boolean));
    const pending = app.outbox
      .forConv(state.convId)
      .filter((i) => i.thread_root === state.root && !held.has(i.client_msg_id));
    const count = root?.thread?.reply_count ?? shown.filter((e) => !e.recalled).length;
    const items = [];
    if (root) {
      const item = messageItem(root, ctx);
      item.classList.add("thread-root");
      items.push(item);
    } else {
      items.push(el("li", { class: "system" }, root === null ? "message unavailable" : "Loading…"));
    }
    items.push(
      el("li", { class: "thread-divider", data: { count: String(count) } },
        count === 0 ? "No replies yet" : count === 1 ? "1 reply" : count + " replies"),
    );
    items.push(...shown.map((e) => messageItem(e, ctx)), ...pending.map((i) => pendingItem(i, ctx)));
    replaceKeepingFocus(list, items);
    keeper.drawn();
    older.hidden = !state.loaded || state.nextBefore === null;
    older.disabled = !!state.loadingOlder;
    composer.refresh((seq) => app.sync.lookup(state.convId, seq));
    if (mode === "first" || atBottom) box.scrollTop = box.scrollHeight;
  }

  function scrollTo(seq) {
    const line = list.querySelector(`li[data-seq="${seq}"]`);
    if (!line) return false;
    flashSeq = seq;
    line.classList.add("flash");
    clearTimeout(flashTimer);
    flashTimer = setTimeout(() => {
      flashSeq = null;
      list.querySelector(`li[data-seq="${seq}"]`)?.classList.remove("flash");
    }, FLASH_MS);
    line.scrollIntoView({ block: "center" });
    return true;
  }

  async function load(params) {
    const s = state;
    try {
      const page = await app.sync.loadInto(s.view, { thread: s.root, limit: PAGE_LEN, ...params });
      if (state !== s) return;
      s.loaded = true;
      // The older replies' cursor: the first page sets it, each older page moves it.
      s.nextBefore = page.next_before;
    } catch (e) {
      if (state === s) showError(error, app.describeError(e));
    }
  }

  function close() {
    state?.remove();
    state = null;
    pickerSeq = null;
    panel.hidden = true;
    document.body.classList.remove("show-thread");
    composer.reset();
    list.replaceChildren();
    keeper.clear();
  }

  async function open(convId, root, focusSeq) {
    if (state?.convId !== convId || state.root !== root) {
      close();
      const view = {
        convId,
        root,
        events: new Map(),
        accepts: (e) => e.thread_root === root,
      };
      state = { convId, root, view, remove: app.sync.addView(view), loaded: false, nextBefore: null };
      const c = app.sync.conversations.get(convId);
      sub.textContent = c ? convName(c, app.session.user_id) : "";
      panel.hidden = false;
      document.body.classList.add("show-thread");
      showError(error, null);
      render("first");
      input.focus();
      const s = state;
      await load({});
      if (state !== s) return;
      render("first");
    } else {
      input.focus();
    }
    if (focusSeq != null) scrollTo(focusSeq);
  }

  older.addEventListener("click", async () => {
    const s = state;
    if (!s || s.nextBefore === null || s.loadingOlder) return;
    s.loadingOlder = true;
    render("keep");
    await load({ before: s.nextBefore });
    s.loadingOlder = false;
    if (state === s) render("keep");
  });
  acceptDrops(panel, () => composer);
  $("thread-close").addEventListener("click", () => {
    close();
    $("composer-input").focus();
  });
  document.addEventListener("click", (e) => {
    if (pickerSeq === null || e.target.closest?.(".picker, .act-react")) return;
    pickerSeq = null;
    render("keep");
  });
  panel.addEventListener("keydown", (e) => {
    if (e.key !== "Escape" || e.defaultPrevented) return;
    if (pickerSeq !== null) {
      pickerSeq = null;
      render("keep");
    } else {
      close();
      $("composer-input").focus();
    }
  });

  return {
    open,
    close,
    convId: () => state?.convId ?? null,
    root: () => state?.root ?? null,
    update(what, convId) {
      if (!state || convId !== state.convId) return;
      if (what === "timeline" || what === "outbox" || what === "older") render("keep");
    },
  };
}
