// The web client's service worker (docs/WEB.md, "Notifications"): it shows the server's push
// messages as notifications while no tab shows their conversation, and a click on one opens the
// conversation in a tab of the app.
//
// notifications.js registers it from /web/sw.js, so its scope is the folder of the page's
// files: it controls no page (the app is served at /) and intercepts no request. It only
// handles `push` and `notificationclick`, and finds the app's tabs with `includeUncontrolled`.
//
// A push payload (JSON): {conv_id, seq, unread, badge, kind: "message" | "mention" | "reply",
// sender?, preview?, title?}; in privacy mode the server leaves out sender and preview.

// The page of the app; a conversation opens from `#conv=<id>`.
const APP_PATH = "/";
// How long a tab has to say which conversation it shows before the notification is shown anyway.
const ASK_MS = 500;
const DEFAULT_TEXT = "New message";

// A new version takes over at once: it holds no state and serves no page.
self.addEventListener("install", () => self.skipWaiting());

// `event.waitUntil(work)` for a real event; a synthetic one (dispatched by a test) cannot be
// extended, and the work runs anyway.
function keep(event, work) {
  try {
    event.waitUntil(work);
  } catch {
    // not a trusted event
  }
  return work;
}

self.addEventListener("push", (event) => {
  keep(event, onPush(event).catch(() => {}));
});

self.addEventListener("notificationclick", (event) => {
  event.notification.close();
  keep(event, openConversation(event.notification.data ?? {}).catch(() => {}));
});

function payloadOf(event) {
  try {
    const p = event.data?.json();
    return p && typeof p === "object" ? p : {};
  } catch {
    return {};
  }
}

async function onPush(event) {
  const p = payloadOf(event);
  const convId = typeof p.conv_id === "string" && p.conv_id ? p.conv_id : null;
  await setBadge(p.badge);
  if (convId && (await shownInFocusedTab(convId))) return;
  const title = text(p.sender) ?? text(p.title) ?? DEFAULT_TEXT;
  const body = text(p.preview) ?? DEFAULT_TEXT;
  // One notification per conversation (its tag): the next one for it replaces it, and renotify
  // makes the replacement alert again. The server coalesces pushes the same way.
  await self.registration.showNotification(title, {
    body,
    tag: convId ?? "parley",
    renotify: true,
    icon: "/web/icon.svg",
    data: { conv_id: convId, seq: Number.isInteger(p.seq) ? p.seq : null },
  });
}

function text(value) {
  return typeof value === "string" && value !== "" ? value : null;
}

// The unread total on the app's icon, where the browser has one (an installed app).
async function setBadge(badge) {
  if (!Number.isInteger(badge) || badge < 0) return;
  try {
    if (badge > 0) await self.navigator.setAppBadge?.(badge);
    else await self.navigator.clearAppBadge?.();
  } catch {
    // not installed, or no badges here
  }
}

// The tabs of the app (its page, not a file opened from it), uncontrolled ones included.
async function appWindows() {
  const all = await self.clients.matchAll({ type: "window", includeUncontrolled: true });
  return all.filter((c) => {
    try {
      return new URL(c.url).pathname === APP_PATH;
    } catch {
      return false;
    }
  });
}

// Whether a tab that has the focus shows `convId` now: each tab is asked over a message
// channel (notifications.js answers {conv_id, focused}); a tab that does not answer in time
// counts as not showing it.
async function shownInFocusedTab(convId) {
  const answers = await Promise.all((await appWindows()).map(ask));
  return answers.some((a) => a?.focused === true && a.conv_id === convId);
}

function ask(client) {
  return new Promise((resolve) => {
    const channel = new MessageChannel();
    const timer = setTimeout(() => resolve(null), ASK_MS);
    channel.port1.onmessage = (e) => {
      clearTimeout(timer);
      resolve(e.data);
    };
    try {
      client.postMessage({ type: "which-conversation" }, [channel.port2]);
    } catch {
      clearTimeout(timer);
      resolve(null);
    }
  });
}

// A tab of the app opens the conversation (the focused one, else a visible one, else any) and
// is focused; without one, a new tab opens at `/#conv=<id>`.
async function openConversation({ conv_id: convId, seq }) {
  const windows = await appWindows();
  const target =
    windows.find((c) => c.focused) ??
    windows.find((c) => c.visibilityState === "visible") ??
    windows[0];
  if (target) {
    if (convId) target.postMessage({ type: "open-conversation", conv_id: convId, seq: seq ?? null });
    try {
      await target.focus();
    } catch {
      // focusing needs the click's user activation; the tab has the message either way
    }
    return;
  }
  await self.clients.openWindow(convId ? APP_PATH + "#conv=" + encodeURIComponent(convId) : APP_PATH);
}
