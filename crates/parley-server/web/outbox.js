// Messages on their way: each shows at once as pending with its client_msg_id, is sent over
// the WebSocket, and leaves the outbox when its ack (or its pushed event, from this device with
// the same client_msg_id) confirms it. A send whose outcome is unknown (timeout,
// OUTCOME_UNKNOWN, the socket closed before the ack) stays pending and is sent again with the
// SAME client_msg_id, which the server answers as a duplicate if the first one committed. The
// outbox lives in sessionStorage, so a reload sends what was pending too.

const STORAGE_KEY = "parley.outbox";
// Unknown outcomes while connected are tried again after this long.
const RETRY_MS = 2000;
// Codes after which the same send may be tried again; any other code is a refusal.
const RETRYABLE = new Set([
  "SOCKET_DOWN", "SOCKET_CLOSED", "TIMEOUT", "OUTCOME_UNKNOWN", "UNAVAILABLE", "RATE_LIMITED",
  "LEASE_EXPIRED",
]);

export class Outbox {
  // `connection()` returns the current Connection or null; `acked(item, ack)` after an ack;
  // `changed(convId)` after any change.
  constructor({ connection, acked, changed }) {
    this.connection = connection;
    this.acked = acked;
    this.changed = changed;
    this.items = [];
    this.pumping = false;
    this.retryTimer = null;
    this.load();
  }

  load() {
    try {
      const saved = JSON.parse(sessionStorage.getItem(STORAGE_KEY) ?? "[]");
      this.items = Array.isArray(saved) ? saved : [];
    } catch {
      this.items = [];
    }
  }

  save() {
    sessionStorage.setItem(STORAGE_KEY, JSON.stringify(this.items));
  }

  // `relations`: the send's `reply_to`, `thread_root` and `mentions` (docs/RELATIONS.md) and
  // `attachments` (the uploads' descriptions, docs/MEDIA.md; their media ids are sent), each
  // optional; they go again with every retry, so the request stays the same.
  add(convId, body, relations = {}) {
    const item = {
      conv_id: convId,
      client_msg_id: crypto.randomUUID(),
      body,
      created_at: new Date().toISOString(),
      failed: null,
    };
    if (relations.reply_to != null) item.reply_to = relations.reply_to;
    if (relations.thread_root != null) item.thread_root = relations.thread_root;
    if (relations.mentions?.length) item.mentions = relations.mentions;
    if (relations.attachments?.length) item.attachments = relations.attachments;
    this.items.push(item);
    this.save();
    this.changed(convId);
    this.pump();
    return item;
  }

  forConv(convId) {
    return this.items.filter((i) => i.conv_id === convId);
  }

  remove(clientMsgId) {
    const item = this.items.find((i) => i.client_msg_id === clientMsgId);
    if (!item) return;
    this.items = this.items.filter((i) => i !== item);
    this.save();
    this.changed(item.conv_id);
  }

  // A msg event reached a timeline: one of ours is confirmed by it.
  seen(event, me) {
    if (event.sender_device !== me.device_id || event.sender_user !== me.user_id) return;
    const item = this.items.find(
      (i) => i.client_msg_id === event.client_msg_id && i.conv_id === event.conv_id,
    );
    if (item) this.remove(item.client_msg_id);
  }

  // Sends what is pending, one at a time in the order written, while the socket is up.
  async pump() {
    if (this.pumping) return;
    this.pumping = true;
    try {
      for (;;) {
        const conn = this.connection();
        if (!conn?.open) return;
        const next = this.items.find((i) => !i.failed);
        if (!next) return;
        if (next.notBefore > Date.now()) return this.retryLater(next.notBefore - Date.now());
        try {
          const frame = {
            type: "send",
            conv_id: next.conv_id,
            client_msg_id: next.client_msg_id,
            body: next.body,
          };
          for (const k of ["reply_to", "thread_root", "mentions"]) {
            if (next[k] != null) frame[k] = next[k];
          }
          if (next.attachments?.length) frame.attachments = next.attachments.map((a) => a.media_id);
          const ack = await conn.request(frame);
          this.remove(next.client_msg_id);
          this.acked(next, ack);
        } catch (e) {
          if (RETRYABLE.has(e.code)) {
            // Still pending; the same client_msg_id goes again after a pause or a reconnect.
            next.notBefore = Date.now() + (e.retryAfterMs ?? RETRY_MS);
            this.save();
            // Later items wait behind it, so messages keep the order they were written in.
            if (e.code !== "SOCKET_CLOSED" && e.code !== "SOCKET_DOWN") {
              this.retryLater(e.retryAfterMs ?? RETRY_MS);
            }
            return;
          } else {
            next.failed = e.message || e.code;
            this.save();
            this.changed(next.conv_id);
          }
        }
      }
    } finally {
      this.pumping = false;
    }
  }

  retryLater(ms) {
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => this.pump(), ms + 10);
  }

  // After a reconnect every pending item may go at once.
  resume() {
    for (const i of this.items) delete i.notBefore;
    this.pump();
  }

  discard(clientMsgId) {
    this.remove(clientMsgId);
  }

  clear() {
    this.items = [];
    sessionStorage.removeItem(STORAGE_KEY);
  }
}
