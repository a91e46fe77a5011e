// Notifications while no tab shows the conversation (docs/WEB.md, "Notifications"): the
// "Enable notifications" control, which asks the browser's permission on its click (never on
// load), registers the service worker (sw.js), subscribes to push with the server's key and
// gives the subscription to the server for this device; the per-conversation level (all,
// mentions, none); the user's privacy mode (no sender, no text); and the page's side of the
// worker's messages: which conversation this tab shows, and which one a click on a
// notification opens. `#conv=<id>` in the page's address opens that conversation too.

import { $, showError } from "./dom.js";

// Its scope is the script's folder (where the page's files are): it controls no page.
const WORKER_URL = "/web/sw.js";
// A browser without a push service may never answer a subscription.
const SUBSCRIBE_TIMEOUT_MS = 10_000;
const ACTIVATE_TIMEOUT_MS = 10_000;
const LEVELS = ["all", "mentions", "none"];

// Each state: the button's words, the words beside it.
const STATES = {
  off: ["Enable notifications", "off"],
  working: ["Enable notifications", "…"],
  on: ["Turn off notifications", "on"],
  blocked: ["Enable notifications", "blocked: allow notifications for this site in the browser"],
  unavailable: ["Enable notifications", "unavailable in this browser"],
  error: ["Enable notifications", "could not enable them"],
};

export function createNotifications(app) {
  const toggle = $("notify-toggle");
  const label = $("notify-label");
  const words = $("notify-state");
  const privacyBox = $("notify-privacy-box");
  const privacy = $("notify-privacy");
  const levelSelect = $("conv-notify");
  const hasWorkers = "serviceWorker" in navigator;
  const supported =
    hasWorkers && window.isSecureContext && "PushManager" in window && "Notification" in window;
  let state = "off";
  // A conversation to open once the session and the list are there (`#conv=`, a click on a
  // notification while logged out).
  let pending = convFromHash();
  // The conversation whose level the selector shows, its saved level, and whether the user
  // changed it before the server's answer came.
  let level = { convId: null, saved: "all", touched: false };

  function set(next, detail = null, why = "") {
    state = next;
    const [action, text] = STATES[next];
    toggle.dataset.state = next;
    label.textContent = action;
    // Kept focusable while working (a disabled button would drop the keyboard's focus).
    toggle.setAttribute("aria-disabled", String(next === "working"));
    toggle.disabled = !supported;
    words.textContent = detail ?? text;
    // The browser's own reason (why a subscription failed), for whoever looks closer.
    words.title = why;
  }

  async function registration() {
    return (await navigator.serviceWorker.getRegistration(WORKER_URL)) ?? null;
  }

  async function subscription() {
    return (await (await registration())?.pushManager.getSubscription()) ?? null;
  }

  // What the page says at login or load, without asking anything: on when this browser holds a
  // subscription and the server has it for this device (given again when the browser changed
  // it), off when the server has none.
  async function refresh() {
    if (!supported) return set("unavailable");
    if (Notification.permission === "denied") return set("blocked");
    const sub = Notification.permission === "granted" ? await subscription().catch(() => null) : null;
    if (!sub) return set("off");
    try {
      const saved = await app.api.pushSubscription();
      if (saved?.endpoint !== sub.endpoint) await app.api.savePushSubscription(sub.toJSON());
      set("on");
    } catch {
      set("off");
    }
  }

  async function enable() {
    const session = app.session;
    // Asked first, inside the click's user activation.
    const asked = Notification.requestPermission();
    set("working", "asking the browser…");
    let permission;
    try {
      // Old browsers answer through a callback only, and return nothing.
      permission = (await asked) ?? Notification.permission;
    } catch {
      permission = Notification.permission;
    }
    if (app.session !== session) return;
    if (permission === "denied") return set("blocked");
    if (permission !== "granted") return set("off", "off: permission not given");
    let reg;
    try {
      reg = await activated(await navigator.serviceWorker.register(WORKER_URL));
    } catch (e) {
      return set("unavailable", null, String(e));
    }
    let key;
    try {
      key = keyBytes((await app.api.vapidKey()).public_key);
    } catch (e) {
      return set("error", "could not enable them: " + app.describeError(e));
    }
    let sub;
    try {
      sub = await withTimeout(subscribe(reg, key), SUBSCRIBE_TIMEOUT_MS, "subscribing");
    } catch (e) {
      // No push service here (e.g. a browser built without one, or headless).
      return set("unavailable", null, String(e));
    }
    if (app.session !== session) return;
    try {
      await app.api.savePushSubscription(sub.toJSON());
    } catch (e) {
      return set("error", "could not enable them: " + app.describeError(e));
    }
    set("on");
  }

  // Off: the browser's subscription goes, and the server forgets this device's.
  async function disable() {
    set("working", "turning off…");
    try {
      await (await subscription())?.unsubscribe();
    } catch {
      // the server's side below is what stops the pushes
    }
    try {
      await app.api.deletePushSubscription();
    } catch (e) {
      if (e?.code !== "NOT_FOUND") return set("on", "on: could not turn off: " + app.describeError(e));
    }
    set("off");
  }

  toggle.addEventListener("click", () => {
    if (!app.session || state === "working") return;
    if (!supported) return set("unavailable");
    (state === "on" ? disable() : enable()).catch((e) =>
      set("error", "could not enable them: " + app.describeError(e)),
    );
  });

  async function loadPrivacy() {
    privacyBox.hidden = true;
    if (!supported) return;
    try {
      const answer = await app.api.notificationSettings();
      privacy.checked = answer?.privacy === true;
      privacyBox.hidden = !app.session;
    } catch {
      // a server without the setting: no checkbox
    }
  }

  privacy.addEventListener("change", async () => {
    const wanted = privacy.checked;
    try {
      const answer = await app.api.setNotificationSettings({ privacy: wanted });
      privacy.checked = answer?.privacy ?? wanted;
    } catch (e) {
      privacy.checked = !wanted;
      words.textContent = "could not change the privacy mode: " + app.describeError(e);
    }
  });

  levelSelect.addEventListener("change", async () => {
    const { convId } = level;
    const wanted = levelSelect.value;
    level.touched = true;
    delete levelSelect.dataset.saved;
    try {
      await app.api.setNotificationLevel(convId, wanted);
      if (level.convId !== convId) return;
      level.saved = wanted;
      levelSelect.dataset.saved = wanted;
    } catch (e) {
      if (level.convId !== convId) return;
      levelSelect.value = level.saved;
      showError($("send-error"), "Could not change the notifications: " + app.describeError(e));
    }
  });

  function showLevel(convId) {
    level = { convId, saved: "all", touched: false };
    levelSelect.value = "all";
    delete levelSelect.dataset.saved;
    app.api
      .notificationLevel(convId)
      .then((answer) => {
        if (level.convId !== convId || level.touched || !LEVELS.includes(answer?.level)) return;
        level.saved = answer.level;
        levelSelect.value = answer.level;
        levelSelect.dataset.saved = answer.level;
      })
      .catch(() => {});
  }

  // The notification of a conversation goes once the conversation is open.
  async function closeShown(convId) {
    if (!supported) return;
    try {
      for (const n of (await (await registration())?.getNotifications({ tag: convId })) ?? []) {
        n.close();
      }
    } catch {
      // nothing shown
    }
  }

  function openPending() {
    const id = pending;
    pending = null;
    if (!id || !app.session) return;
    if (location.hash) history.replaceState(null, "", location.pathname + location.search);
    const open = () => {
      if (app.session) app.open(id);
    };
    if (app.sync.conversations.has(id)) open();
    else app.sync.refreshFeed().catch(() => {}).then(open);
  }

  // The worker asks which conversation this tab shows (to show no notification for it), and
  // tells it to open one (a click on a notification).
  if (hasWorkers) {
    navigator.serviceWorker.addEventListener("message", (e) => {
      const m = e.data;
      if (m?.type === "which-conversation") {
        e.ports[0]?.postMessage({
          conv_id: app.session ? app.openConvId : null,
          focused: document.visibilityState === "visible" && document.hasFocus(),
        });
      } else if (m?.type === "open-conversation" && typeof m.conv_id === "string") {
        pending = m.conv_id;
        if (app.session) openPending();
      }
    });
    navigator.serviceWorker.startMessages();
  }
  window.addEventListener("hashchange", () => {
    const id = convFromHash();
    if (!id) return;
    pending = id;
    if (app.session) openPending();
  });

  set(supported ? "off" : "unavailable");

  return {
    // After login (or a reload with a session); `feed` is the first feed call.
    entered(feed) {
      refresh().catch(() => set("off"));
      loadPrivacy();
      if (pending) feed.catch(() => {}).then(openPending);
    },
    // The session ended.
    left() {
      set(supported ? "off" : "unavailable");
      privacyBox.hidden = true;
      level = { convId: null, saved: "all", touched: false };
    },
    // Before logging out: the server forgets this device's subscription (it also does so at
    // logout; asking twice is harmless).
    async forget() {
      if (!supported) return;
      const sub = await subscription().catch(() => null);
      if (state !== "on" && !sub) return;
      await app.api.deletePushSubscription().catch(() => {});
    },
    opened(convId) {
      showLevel(convId);
      closeShown(convId);
    },
  };
}

function convFromHash() {
  const m = /^#conv=(.+)$/.exec(location.hash);
  if (!m) return null;
  try {
    return decodeURIComponent(m[1]);
  } catch {
    return null;
  }
}

// The registration once its worker is active (a push subscription needs one).
function activated(reg) {
  if (reg.active) return Promise.resolve(reg);
  const worker = reg.installing ?? reg.waiting;
  if (!worker) return Promise.reject(new Error("no service worker"));
  const ready = new Promise((resolve, reject) => {
    worker.addEventListener("statechange", () => {
      if (worker.state === "activated") resolve(reg);
      else if (worker.state === "redundant") reject(new Error("the service worker did not start"));
    });
  });
  return withTimeout(ready, ACTIVATE_TIMEOUT_MS, "starting the service worker");
}

// A subscription with `key`; one made with another key (the server's changed) is replaced.
async function subscribe(reg, key) {
  const old = await reg.pushManager.getSubscription();
  if (old && !sameBytes(old.options?.applicationServerKey, key)) await old.unsubscribe();
  return reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: key });
}

function sameBytes(buffer, bytes) {
  if (!buffer) return false;
  const a = new Uint8Array(buffer);
  return a.length === bytes.length && a.every((b, i) => b === bytes[i]);
}

// base64url (no padding) to bytes.
function keyBytes(text) {
  if (typeof text !== "string" || text === "") throw new Error("the server sent no push key");
  const b64 = text.replaceAll("-", "+").replaceAll("_", "/") + "===".slice((text.length + 3) % 4);
  const raw = atob(b64);
  return Uint8Array.from(raw, (c) => c.charCodeAt(0));
}

function withTimeout(promise, ms, what) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(what + " took longer than " + ms / 1000 + " s")), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}
