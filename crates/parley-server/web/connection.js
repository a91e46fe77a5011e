// The tab's one WebSocket (SPEC §7): authentication by subprotocol, requests matched to their
// answers by req_id, a heartbeat that notices a dead network, and reconnection with capped
// exponential backoff and jitter. Close code 4001 (a newer connection of this device took
// over) and 4003 (token revoked) stop it for good.

const BACKOFF_FIRST_MS = 500;
const BACKOFF_MAX_MS = 15000;
// A ping after this much silence; a connection that answers nothing within the wait is dead.
const PING_EVERY_MS = 10000;
const PONG_WAIT_MS = 5000;
const REQUEST_TIMEOUT_MS = 10000;
const CLOSE_KICKED = 4001;
const CLOSE_REVOKED = 4003;

export class RequestError extends Error {
  constructor(code, message, retryAfterMs = null) {
    super(message || code);
    this.code = code;
    this.retryAfterMs = retryAfterMs;
  }
}

export class Connection {
  // `handlers`: onFrame(frame) for pushes, onOpen(), onDown(), onStopped(reason),
  // onRefused() after a connection that never opened.
  constructor(token, handlers) {
    this.token = token;
    this.h = handlers;
    this.ws = null;
    this.open = false;
    this.stopped = false;
    this.attempt = 0;
    this.nextReq = 1;
    this.pending = new Map();
    this.retryTimer = null;
    this.pingTimer = null;
    this.deadTimer = null;
    this.onOnline = () => {
      if (!this.ws && !this.stopped) this.connectNow();
    };
    this.onOffline = () => {
      if (this.ws) this.drop();
    };
    window.addEventListener("online", this.onOnline);
    window.addEventListener("offline", this.onOffline);
  }

  url() {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    return scheme + "//" + location.host + "/v1/ws";
  }

  start() {
    this.connectNow();
  }

  connectNow() {
    clearTimeout(this.retryTimer);
    this.retryTimer = null;
    if (this.stopped || this.ws) return;
    let ws;
    try {
      // The token travels as a subprotocol, never in the URL; the server selects "parley".
      ws = new WebSocket(this.url(), ["parley", "parley.token." + this.token]);
    } catch {
      this.scheduleRetry();
      return;
    }
    this.ws = ws;
    let opened = false;
    ws.onopen = () => {
      opened = true;
      this.open = true;
      this.attempt = 0;
      this.armHeartbeat();
      this.h.onOpen();
    };
    ws.onmessage = (m) => {
      this.armHeartbeat();
      let frame;
      try {
        frame = JSON.parse(m.data);
      } catch {
        return;
      }
      this.dispatch(frame);
    };
    ws.onclose = (e) => {
      if (this.ws !== ws) return;
      this.detach();
      if (e.code === CLOSE_KICKED) return this.stop("kicked");
      if (e.code === CLOSE_REVOKED) return this.stop("revoked");
      if (!opened) this.h.onRefused();
      this.scheduleRetry();
    };
    ws.onerror = () => {};
  }

  dispatch(frame) {
    const id = frame.req_id;
    if ((frame.type === "ack" || frame.type === "error" || frame.type === "pong") && id != null) {
      const waiter = this.pending.get(String(id));
      if (waiter) {
        this.pending.delete(String(id));
        clearTimeout(waiter.timer);
        if (frame.type === "error") {
          waiter.reject(new RequestError(frame.code, frame.message, frame.retry_after_ms ?? null));
        } else {
          waiter.resolve(frame);
        }
        return;
      }
    }
    if (frame.type === "kicked") return; // close code 4001 follows
    this.h.onFrame(frame);
  }

  // Sends a request frame; resolves with its ack, rejects with a RequestError: the server's
  // code, or SOCKET_DOWN (not sent), SOCKET_CLOSED (no answer before the socket closed) or
  // TIMEOUT (no answer in time). After the last two the outcome is unknown.
  request(frame) {
    if (!this.open) return Promise.reject(new RequestError("SOCKET_DOWN", "not connected"));
    const req_id = "r" + this.nextReq++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(req_id);
        reject(new RequestError("TIMEOUT", "no answer in time"));
      }, REQUEST_TIMEOUT_MS);
      this.pending.set(req_id, { resolve, reject, timer });
      this.ws.send(JSON.stringify({ ...frame, req_id }));
    });
  }

  // An ephemeral frame that has no answer (typing); false when the socket is down.
  notify(frame) {
    if (!this.open) return false;
    this.ws.send(JSON.stringify(frame));
    return true;
  }

  armHeartbeat() {
    clearTimeout(this.pingTimer);
    clearTimeout(this.deadTimer);
    this.deadTimer = null;
    this.pingTimer = setTimeout(() => {
      if (!this.open) return;
      this.ws.send(JSON.stringify({ type: "ping", req_id: "hb" + this.nextReq++ }));
      this.deadTimer = setTimeout(() => this.drop(), PONG_WAIT_MS);
    }, PING_EVERY_MS);
  }

  // Gives up on the current socket at once (a dead network may take long to report the close).
  drop() {
    const ws = this.ws;
    if (!ws) return;
    this.detach();
    try {
      ws.close();
    } catch {
      // already closing
    }
    this.scheduleRetry();
  }

  detach() {
    const ws = this.ws;
    if (ws) ws.onopen = ws.onmessage = ws.onclose = null;
    this.ws = null;
    const wasOpen = this.open;
    this.open = false;
    clearTimeout(this.pingTimer);
    clearTimeout(this.deadTimer);
    for (const w of this.pending.values()) {
      clearTimeout(w.timer);
      w.reject(new RequestError("SOCKET_CLOSED", "the connection closed before the answer"));
    }
    this.pending.clear();
    if (wasOpen || !this.stopped) this.h.onDown();
  }

  scheduleRetry() {
    if (this.stopped || this.retryTimer) return;
    const ceiling = Math.min(BACKOFF_MAX_MS, BACKOFF_FIRST_MS * 2 ** this.attempt);
    this.attempt += 1;
    // Full jitter over the upper half, so many tabs do not come back in step.
    const delay = ceiling / 2 + Math.random() * (ceiling / 2);
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      this.connectNow();
    }, delay);
  }

  stop(reason = "stopped") {
    if (this.stopped) return;
    this.stopped = true;
    clearTimeout(this.retryTimer);
    window.removeEventListener("online", this.onOnline);
    window.removeEventListener("offline", this.onOffline);
    const ws = this.ws;
    if (ws) {
      this.detach();
      try {
        ws.close(1000);
      } catch {
        // already closing
      }
    }
    this.h.onStopped(reason);
  }
}
