// The web client's entry: the tab's session, its WebSocket, and the wiring between what the
// server says (sync.js, outbox.js, presence.js) and what the page shows (the *_view.js files).
//
// The token lives in sessionStorage: each tab is its own device (one WebSocket per device, and
// a newer connection kicks the older), and a reload keeps the tab's session.

import { createApi, describeError } from "./api.js";
import { Connection } from "./connection.js";
import { Sync } from "./sync.js";
import { Outbox } from "./outbox.js";
import { Presence } from "./presence.js";
import { $ } from "./dom.js";
import { directPeer } from "./format.js";
import { createLoginView } from "./login_view.js";
import { createListView } from "./list_view.js";
import { createChatView } from "./chat_view.js";
import { createMembersPanel } from "./members_panel.js";
import { createDialogs } from "./dialogs.js";
import { createThreadPanel } from "./thread_panel.js";
import { mentionsIn } from "./relations.js";
import { createNotifications } from "./notifications.js";
import { createSearch } from "./search.js";

const SESSION_KEY = "parley.session";
const DEVICE_KEY = "parley.device";
// A signed media URL is used until this long before its expiry, then asked for again; and is
// never kept longer than URL_KEEP_MAX_MS nor less than URL_KEEP_MIN_MS (the expiry is the
// server's clock, so a tab whose clock runs ahead does not ask again at every use).
const URL_MARGIN_MS = 30_000;
const URL_KEEP_MAX_MS = 4 * 60_000;
const URL_KEEP_MIN_MS = 30_000;

const app = {
  session: null,
  api: null,
  sync: null,
  outbox: null,
  presence: null,
  conn: null,
  openConvId: null,
  readSent: new Map(),
};

function loadSession() {
  try {
    const s = JSON.parse(sessionStorage.getItem(SESSION_KEY) ?? "null");
    return s?.token && s?.user_id && s?.device_id ? s : null;
  } catch {
    return null;
  }
}

// This tab's device id, kept for the tab's life so a new login in the same tab is the same
// device.
function deviceId() {
  let id = sessionStorage.getItem(DEVICE_KEY);
  if (!id) {
    id = "web-" + crypto.randomUUID().replaceAll("-", "").slice(0, 12);
    sessionStorage.setItem(DEVICE_KEY, id);
  }
  return id;
}

function setStatus(state) {
  const node = $("conn-status");
  node.textContent = state;
  node.dataset.state = state;
}

function notice(message) {
  const node = $("notice");
  node.textContent = message ?? "";
  node.hidden = !message;
}

// Signed URLs of media ids (docs/MEDIA.md), kept per id while they are good: `peek(id)` answers
// a good one at once or null, `get(id, {renew})` a promise of one (one request per id at a
// time); each is {url, thumbnailUrl, goodUntil} in this tab's clock.
function createMediaUrls() {
  const known = new Map();
  const asking = new Map();
  const peek = (id) => {
    const u = known.get(id);
    return u && u.goodUntil > Date.now() ? u : null;
  };
  const get = (id, { renew = false } = {}) => {
    if (!renew) {
      const u = peek(id);
      if (u) return Promise.resolve(u);
    }
    if (asking.has(id)) return asking.get(id);
    const p = app.api
      .mediaUrl(id)
      .then((answer) => {
        const now = Date.now();
        const expires = Date.parse(answer.expires_at);
        const keep = Number.isFinite(expires) ? expires - now - URL_MARGIN_MS : URL_KEEP_MAX_MS;
        const u = {
          url: answer.url,
          thumbnailUrl: answer.thumbnail_url ?? null,
          goodUntil: now + Math.min(URL_KEEP_MAX_MS, Math.max(URL_KEEP_MIN_MS, keep)),
        };
        known.set(id, u);
        return u;
      })
      .finally(() => asking.delete(id));
    asking.set(id, p);
    return p;
  };
  return { peek, get, clear: () => known.clear() };
}

app.me = () => ({ user_id: app.session.user_id, device_id: app.session.device_id });

app.login = async (userId, password) => {
  const answer = await app.api.login(userId, password, deviceId());
  app.session = { user_id: answer.user_id, device_id: answer.device_id, token: answer.token };
  sessionStorage.setItem(SESSION_KEY, JSON.stringify(app.session));
  notice(null);
  enter();
};

app.logout = async () => {
  // The push subscription goes first, while the token still works.
  await app.notifications.forget().catch(() => {});
  try {
    await app.api.logout();
  } catch {
    // the session ends here whatever the server said
  }
  leave(null);
};

function enter() {
  const me = app.me();
  app.sync = new Sync(app.api, me, {
    changed: (what, convId) => draw(what, convId),
    seen: (event) => {
      app.outbox.seen(event, me);
      app.presence.stopTyping(event.conv_id, event.sender_user);
    },
  });
  app.presence = new Presence(app.api, (what, convId) => draw(what, convId));
  app.outbox = new Outbox({
    connection: () => app.conn,
    acked: (item, ack) => {
      // The ack means committed: the event takes its seq in the timeline now, and its push
      // (or a page holding it) is dropped as a duplicate when it comes.
      const event = {
        conv_id: item.conv_id,
        seq: ack.seq,
        kind: "msg",
        message_id: ack.message_id,
        sender_user: me.user_id,
        sender_device: me.device_id,
        client_msg_id: item.client_msg_id,
        body: item.body,
        created_at: item.created_at,
      };
      if (item.reply_to != null) event.reply_to = item.reply_to;
      if (item.thread_root != null) event.thread_root = item.thread_root;
      if (item.attachments?.length) event.attachments = item.attachments;
      const mentioned = app.mentionable(item.conv_id, item.body, item.mentions);
      if (mentioned.length) event.mentions = mentioned;
      app.sync.onEvent(event);
    },
    changed: (convId) => draw("outbox", convId),
  });
  app.readSent = new Map();
  app.media = createMediaUrls();
  $("whoami").textContent = me.user_id;
  $("logout").hidden = false;
  app.loginView.hide();
  $("chat-view").hidden = false;
  app.listView.render();
  app.chatView.reset();
  setStatus("connecting");
  app.conn = new Connection(app.session.token, {
    onOpen: onConnected,
    onDown: () => {
      if (app.conn && !app.conn.stopped) setStatus("reconnecting");
    },
    onRefused: () => {
      // The upgrade's 401 is not visible to a page: ask over HTTP whether the token still works
      // (a 401 there ends the session).
      app.api.me().catch(() => {});
    },
    onStopped: (reason) => {
      if (reason === "kicked") {
        setStatus("kicked");
        notice("This tab was disconnected: a newer connection of the same device took over. Reload to use it here.");
      } else if (reason === "revoked") {
        leave("Your session was ended. Log in again.");
      }
    },
    onFrame,
  });
  app.conn.start();
  const feed = app.sync.refreshFeed();
  feed.catch(() => {});
  app.notifications.entered(feed);
}

async function onConnected() {
  setStatus("connected");
  app.outbox.resume();
  try {
    await app.sync.resync();
    await app.presence.fetch(peers());
    if (app.conn?.open) setStatus("caught up");
  } catch {
    // the next reconnect resyncs again
  }
}

// Users whose presence the page shows: direct peers and the open conversation's members.
function peers() {
  const me = app.session.user_id;
  const ids = [];
  for (const c of app.sync.conversations.values()) {
    const peer = directPeer(c, me);
    if (peer) ids.push(peer);
  }
  const open = app.openConvId && app.sync.conversations.get(app.openConvId);
  for (const m of open?.members ?? []) if (m.user_id !== me) ids.push(m.user_id);
  return ids;
}

function onFrame(frame) {
  switch (frame.type) {
    case "event":
      app.sync.onEvent(frame.event);
      break;
    case "hint":
      app.sync.onHint(frame.conv_id);
      break;
    case "read":
      app.sync.onRead(frame.conv_id, frame.read_seq);
      break;
    case "typing":
      if (frame.user_id !== app.session.user_id) app.presence.onTyping(frame);
      break;
    case "presence":
      app.presence.onPresence(frame);
      break;
    default:
      break;
  }
}

function draw(what, convId) {
  if (!app.session) return;
  if (what === "list" || what === "presence" || what === "outbox") app.listView.render();
  app.chatView.update(what, convId);
  app.threadPanel.update(what, convId);
  if (what === "list" && app.openConvId) app.membersPanel.refresh();
}

// Ends the tab's session: the socket closes, the token and outbox are forgotten.
function leave(message) {
  app.conn?.stop();
  app.conn = null;
  app.outbox?.clear();
  app.media?.clear();
  app.session = null;
  app.openConvId = null;
  sessionStorage.removeItem(SESSION_KEY);
  $("chat-view").hidden = true;
  $("logout").hidden = true;
  $("whoami").textContent = "";
  document.body.classList.remove("show-conv");
  app.membersPanel.close();
  app.threadPanel.close();
  app.notifications.left();
  app.search.reset();
  setStatus("offline");
  notice(message);
  app.loginView.show();
}

app.open = (convId) => {
  if (app.threadPanel.convId() !== convId) app.threadPanel.close();
  app.openConvId = convId;
  app.chatView.open(convId);
  app.notifications.opened(convId);
  app.listView.render();
  app.presence.fetch(peers());
  app.search.opened();
};

// Opens a conversation at the message `seq` (a search hit): its history is loaded back to it
// when needed, and it is scrolled into view and highlighted.
app.openAt = async (convId, seq) => {
  if (app.openConvId !== convId) app.open(convId);
  await app.chatView.jump(seq, { instant: true });
};

app.closeConversation = () => {
  app.openConvId = null;
  app.threadPanel.close();
  app.chatView.close();
  app.listView.render();
  app.search.opened();
};

// `relations`: {reply_to, thread_root, mentions, attachments}, each optional
// (docs/RELATIONS.md, docs/MEDIA.md); `attachments` are the uploads' descriptions.
app.send = (convId, body, relations) => app.outbox.add(convId, body, relations);

// Who a body mentions as the server will keep it: the given ids and the body's `@user` words,
// those who are members other than the sender.
app.mentionable = (convId, body, given = []) => {
  const members = new Set((app.sync.conversations.get(convId)?.members ?? []).map((m) => m.user_id));
  const ids = [...new Set([...given, ...mentionsIn(body)])];
  return ids.filter((u) => members.has(u) && u !== app.session.user_id);
};

// A request over the socket when it is up, else over HTTP; both answer the same fields.
async function request(frame, overHttp) {
  return app.conn?.open ? app.conn.request(frame) : overHttp();
}

// A new body for one's own message. The ack's event is taken in at once (its push, when it
// comes, is a duplicate).
app.edit = async (convId, seq, body) => {
  const clientMsgId = crypto.randomUUID();
  const ack = await request(
    { type: "edit", conv_id: convId, seq, client_msg_id: clientMsgId, body },
    () => app.api.edit(convId, seq, clientMsgId, body),
  );
  app.sync.onEvent({
    conv_id: convId,
    seq: ack.seq,
    kind: "edit",
    message_id: ack.message_id,
    sender_user: app.session.user_id,
    sender_device: app.session.device_id,
    client_msg_id: clientMsgId,
    target_seq: seq,
    body,
    created_at: new Date().toISOString(),
  });
};

// Adds (or, `remove`, takes back) a reaction; a change is taken in at once like an edit.
app.react = async (convId, seq, key, remove = false) => {
  const frame = { type: "react", conv_id: convId, seq, key };
  if (remove) frame.remove = true;
  const ack = await request(frame, () =>
    remove ? app.api.unreact(convId, seq, key) : app.api.react(convId, seq, key),
  );
  if (!ack.changed || ack.seq == null) return;
  app.sync.onEvent({
    conv_id: convId,
    seq: ack.seq,
    kind: remove ? "unreact" : "react",
    sender_user: app.session.user_id,
    target_seq: seq,
    key,
    created_at: new Date().toISOString(),
  });
};

app.openThread = (convId, rootSeq, focusSeq) => app.threadPanel.open(convId, rootSeq, focusSeq);

// Moves the read position to `seq` when it is ahead of what the server and this tab know.
app.markRead = async (convId, seq) => {
  const conv = app.sync.conversations.get(convId);
  if (!conv || seq <= conv.read_seq || seq <= (app.readSent.get(convId) ?? 0)) return;
  app.readSent.set(convId, seq);
  try {
    const ack = app.conn?.open
      ? await app.conn.request({ type: "read", conv_id: convId, seq })
      : await app.api.read(convId, seq);
    const c = app.sync.conversations.get(convId);
    if (c && ack.read_seq > c.read_seq) {
      c.read_seq = ack.read_seq;
      // Read up to the head: nothing is unread, whatever the next feed answer adds.
      if (ack.read_seq >= c.head) c.unread = c.mentions = 0;
      app.listView.render();
    }
  } catch {
    app.readSent.delete(convId);
  }
  app.sync.scheduleFeed();
};

app.typing = (convId) => app.conn?.notify({ type: "typing", conv_id: convId });

app.recall = async (convId, seq) => {
  await app.api.recall(convId, seq);
  app.sync.catchUp(convId).catch(() => {});
  app.sync.scheduleFeed();
};

app.describeError = describeError;

function start() {
  app.api = createApi({
    token: () => app.session?.token,
    onUnauthenticated: () => {
      if (app.session) leave("Your session has ended. Log in again.");
    },
  });
  app.loginView = createLoginView(app);
  app.listView = createListView(app);
  app.chatView = createChatView(app);
  app.membersPanel = createMembersPanel(app);
  app.threadPanel = createThreadPanel(app);
  createDialogs(app);
  app.notifications = createNotifications(app);
  app.search = createSearch(app);
  $("logout").addEventListener("click", () => app.logout());
  // Files dropped outside a conversation (acceptDrops, composer.js) are not opened by the
  // browser in place of the page.
  for (const type of ["dragover", "drop"]) {
    window.addEventListener(type, (e) => {
      if (e.defaultPrevented || ![...(e.dataTransfer?.types ?? [])].includes("Files")) return;
      e.preventDefault();
      e.dataTransfer.dropEffect = "none";
    });
  }
  app.session = loadSession();
  if (app.session) enter();
  else app.loginView.show();
}

start();
