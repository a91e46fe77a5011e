// Notifications (docs/WEB.md, "Notifications") in headless Chromium against a real
// `parley serve`: the enable control asks for the permission on its click and never on load;
// push messages delivered to the page's service worker through the DevTools protocol
// (`ServiceWorker.deliverPushMessage`) show one notification per conversation, without the
// text in privacy mode, and none for the conversation the focused tab shows; a click on a
// notification opens its conversation in the tab; `/#conv=<id>` opens it after login; the
// per-conversation level and the privacy mode are kept by the server.
//
// Headless Chromium has no push service, so `pushManager.subscribe` may fail there: the page
// then says "unavailable in this browser", and the test accepts that or "on" and says which it
// saw. The pushes are delivered to the worker directly, so they need no subscription.
// Screenshots of every step go to target/browser/.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  BASE_URL, PASSWORD, WAIT_MS, caughtUp, convItem, directId, eventually, launch, login,
  messagesWith, newUser, openConversation, openPage, send, shooter, startDirect, watch,
} from "../harness.js";

const WIDE = { width: 1280, height: 800 };
const WORKER = "/web/sw.js";

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

// A context of its own whose pages may show notifications (unless `grant` is false). Every
// call of Notification.requestPermission in its pages is recorded in window.__asked with
// whether a user gesture was active at the time.
async function notifyingPage({ grant = true } = {}) {
  const context = await browser.newContext({ viewport: WIDE });
  if (grant) await context.grantPermissions(["notifications"], { origin: BASE_URL });
  await context.addInitScript(() => {
    if (typeof window === "undefined" || typeof Notification === "undefined") return;
    const ask = Notification.requestPermission.bind(Notification);
    window.__asked = [];
    Notification.requestPermission = (...args) => {
      window.__asked.push(navigator.userActivation?.isActive ?? null);
      return ask(...args);
    };
  });
  const page = await context.newPage();
  watch(page);
  return { context, page };
}

// The page's device token, for calling the API as that device from here.
async function tokenOf(page) {
  return page.evaluate(() => JSON.parse(sessionStorage.getItem("parley.session")).token);
}

async function asDevice(token, method, path, body) {
  const res = await fetch(BASE_URL + path, {
    method,
    headers: { Authorization: "Bearer " + token, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

async function notifyState(page) {
  return page.getAttribute("#notify-toggle", "data-state");
}

// Clicks the enable control and waits for its outcome.
async function clickEnable(page) {
  await page.click("#notify-toggle");
  await eventually("the enable control to settle", async () => {
    const state = await notifyState(page);
    if (state === "working") return false;
    return state !== "off" || (await page.textContent("#notify-state")) !== "off";
  });
  return notifyState(page);
}

async function hasRegistration(page) {
  return page.evaluate(async (url) => !!(await navigator.serviceWorker.getRegistration(url)), WORKER);
}

async function waitActiveWorker(page) {
  await eventually("the service worker active", () =>
    page.evaluate(async (url) => !!(await navigator.serviceWorker.getRegistration(url))?.active, WORKER));
}

// The notifications the worker shows, as plain objects, ordered by tag.
async function shown(page) {
  return page.evaluate(async (url) => {
    const reg = await navigator.serviceWorker.getRegistration(url);
    const all = await reg.getNotifications();
    return all
      .map((n) => ({ title: n.title, body: n.body, tag: n.tag, data: n.data }))
      .sort((a, b) => a.tag.localeCompare(b.tag));
  }, WORKER);
}

// The registration of the page's worker in the DevTools protocol, and a function delivering a
// push message (its decrypted payload) to it.
async function pushChannel(page) {
  const cdp = await page.context().newCDPSession(page);
  const scope = BASE_URL + "/web/";
  let registrationId = null;
  cdp.on("ServiceWorker.workerRegistrationUpdated", ({ registrations }) => {
    const r = registrations.find((x) => x.scopeURL === scope && !x.isDeleted);
    if (r) registrationId = r.registrationId;
  });
  await cdp.send("ServiceWorker.enable");
  await eventually("the worker's registration in the DevTools protocol", async () => registrationId !== null);
  return (payload) =>
    cdp.send("ServiceWorker.deliverPushMessage", {
      origin: BASE_URL,
      registrationId,
      data: JSON.stringify(payload),
    });
}

async function seqOf(page, text) {
  const line = page.locator("#messages li[data-seq]", { hasText: text });
  await line.waitFor({ timeout: WAIT_MS });
  return Number(await line.getAttribute("data-seq"));
}

async function pause(ms) {
  await new Promise((r) => setTimeout(r, ms));
}

describe("notifications in the web client", () => {
  // [server routes] GET /v1/push/vapid, PUT/GET/DELETE /v1/devices/me/push.
  test("the enable control asks on its click, subscribes, and turns off", async (t) => {
    const shot = shooter("12-notify-enable");
    const b = await newUser("bea");
    const B = await notifyingPage();
    await login(B.page, b);

    // Loading the page asked nothing and registered nothing.
    assert.deepEqual(await B.page.evaluate(() => window.__asked), []);
    assert.equal(await notifyState(B.page), "off");
    assert.equal(await B.page.textContent("#notify-label"), "Enable notifications");
    assert.equal(await hasRegistration(B.page), false);
    const served = await fetch(BASE_URL + WORKER);
    assert.equal(served.status, 200);
    assert.match(served.headers.get("content-type"), /^text\/javascript/);
    await shot(B.page, "off");

    // The click asks, inside its user gesture.
    const state = await clickEnable(B.page);
    assert.deepEqual(await B.page.evaluate(() => window.__asked), [true], "asked once, on the click");
    await shot(B.page, state);
    const why = await B.page.getAttribute("#notify-state", "title");
    assert.ok(["on", "unavailable"].includes(state),
      `the control says "${await B.page.textContent("#notify-state")}" (${state})`);
    t.diagnostic(`the push subscription in this Chromium: ${state}${why ? " (" + why + ")" : ""}`);
    assert.equal(await hasRegistration(B.page), true, "the worker is registered");
    const token = await tokenOf(B.page);

    if (state === "unavailable") {
      assert.equal(await B.page.textContent("#notify-state"), "unavailable in this browser");
      assert.equal((await asDevice(token, "GET", "/v1/devices/me/push")).status, 404);
      return;
    }

    // On: the server holds this browser's subscription for the device.
    const endpoint = await B.page.evaluate(async (url) =>
      (await (await navigator.serviceWorker.getRegistration(url)).pushManager.getSubscription()).endpoint, WORKER);
    const saved = await asDevice(token, "GET", "/v1/devices/me/push");
    assert.equal(saved.status, 200);
    assert.equal(saved.body.kind, "webpush");
    assert.equal(saved.body.endpoint, endpoint);
    assert.equal(await B.page.textContent("#notify-label"), "Turn off notifications");

    // A click turns them off: unsubscribed here, forgotten there.
    await B.page.click("#notify-toggle");
    await eventually("off", async () => (await notifyState(B.page)) === "off");
    assert.equal((await asDevice(token, "GET", "/v1/devices/me/push")).status, 404);
    assert.equal(await B.page.evaluate(async (url) =>
      (await navigator.serviceWorker.getRegistration(url)).pushManager.getSubscription(), WORKER), null);
    assert.equal(await B.page.evaluate(() => window.__asked.length), 1);

    // On again, then logging out gives the subscription back first.
    assert.equal(await clickEnable(B.page), "on");
    const calls = [];
    B.page.on("request", (r) => calls.push(r.method() + " " + new URL(r.url()).pathname));
    await B.page.click("#logout");
    await B.page.waitForSelector("#login-view:not([hidden])", { timeout: WAIT_MS });
    const del = calls.indexOf("DELETE /v1/devices/me/push");
    assert.ok(del >= 0 && del < calls.indexOf("POST /v1/auth/logout"), calls.join(", "));
    assert.deepEqual(B.page.errors, []);
  });

  test("without the permission nothing is registered", async () => {
    const b = await newUser("bo");
    const B = await notifyingPage({ grant: false });
    await login(B.page, b);
    const state = await clickEnable(B.page);
    assert.deepEqual(await B.page.evaluate(() => window.__asked), [true]);
    assert.ok(["blocked", "off"].includes(state), state);
    assert.notEqual(await B.page.textContent("#notify-state"), "on");
    assert.equal(await hasRegistration(B.page), false);
    assert.deepEqual(B.page.errors, []);
  });

  test("pushes show one notification per conversation and a click opens it", async () => {
    const shot = shooter("13-notify-push");
    const [a, b] = [await newUser("ana"), await newUser("ben")];
    const A = await openPage(browser, WIDE);
    const B = await notifyingPage();
    await login(A.page, a);
    await login(B.page, b);

    // A real conversation: Ana writes to Ben, whose tab shows only the list.
    const dm = directId(a, b);
    await startDirect(A.page, b);
    const first = "Are you coming tonight?";
    await send(A.page, first);
    const seq1 = await seqOf(A.page, first);
    await convItem(B.page, dm).waitFor({ timeout: WAIT_MS });

    // The worker is registered on the click, whatever the subscription's outcome (the push
    // below needs no subscription).
    await B.page.click("#notify-toggle");
    await waitActiveWorker(B.page);
    const push = await pushChannel(B.page);

    await push({ conv_id: dm, seq: seq1, unread: 1, badge: 1, kind: "message", sender: a, preview: first });
    await eventually("one notification", async () => (await shown(B.page)).length === 1);
    assert.deepEqual(await shown(B.page), [
      { title: a, body: first, tag: dm, data: { conv_id: dm, seq: seq1 } },
    ]);
    await shot(B.page, "one-notification");

    // The next message of the same conversation replaces it (same tag).
    const second = "I can bring the cake.";
    await send(A.page, second);
    const seq2 = await seqOf(A.page, second);
    await push({ conv_id: dm, seq: seq2, unread: 2, badge: 2, kind: "message", sender: a, preview: second });
    await eventually("the notification replaced", async () => (await shown(B.page))[0]?.body === second);
    assert.deepEqual(await shown(B.page), [
      { title: a, body: second, tag: dm, data: { conv_id: dm, seq: seq2 } },
    ]);

    // Another conversation has its own; in privacy mode it has no sender and no text.
    await A.page.click("#new-group");
    await A.page.fill("#group-title", "Plans");
    await A.page.fill("#group-members", b);
    await A.page.click("#group-form button[type=submit]");
    await eventually("the group open on Ana's side", async () =>
      (await A.page.textContent("#conv-title")) === "Plans");
    const secret = "The surprise is at eight";
    await send(A.page, secret);
    const seq3 = await seqOf(A.page, secret);
    const groupItem = B.page.locator("#conv-list li", { hasText: "Plans" });
    await groupItem.waitFor({ timeout: WAIT_MS });
    const group = await groupItem.getAttribute("data-conv-id");
    await push({ conv_id: group, seq: seq3, unread: 1, badge: 3, kind: "mention" });
    await eventually("two notifications", async () => (await shown(B.page)).length === 2);
    let byTag = Object.fromEntries((await shown(B.page)).map((n) => [n.tag, n]));
    assert.deepEqual(byTag[group], {
      title: "New message", body: "New message", tag: group, data: { conv_id: group, seq: seq3 },
    });
    // Without a sender, the conversation's title (when the payload has one) is the title.
    await push({ conv_id: group, seq: seq3, unread: 1, badge: 3, kind: "mention", title: "Plans" });
    await eventually("the group's title", async () =>
      (await shown(B.page)).some((n) => n.tag === group && n.title === "Plans"));
    byTag = Object.fromEntries((await shown(B.page)).map((n) => [n.tag, n]));
    assert.equal(byTag[group].body, "New message");
    assert.equal(byTag[dm].body, second);
    assert.ok(!JSON.stringify(await shown(B.page)).includes("surprise"), "no text in privacy mode");
    await shot(B.page, "two-notifications");

    // A click on the direct chat's notification (dispatched in the worker as the browser
    // would) opens that conversation in Ben's tab and closes the notification.
    const worker = B.context.serviceWorkers().find((w) => w.url().endsWith(WORKER)) ??
      (await B.context.waitForEvent("serviceworker", { timeout: WAIT_MS }));
    const clicked = await worker.evaluate(async (tag) => {
      const [notification] = await self.registration.getNotifications({ tag });
      if (!notification) return false;
      self.dispatchEvent(new NotificationEvent("notificationclick", { notification }));
      return true;
    }, dm);
    assert.equal(clicked, true);
    await B.page.waitForSelector("#conv-open:not([hidden])", { timeout: WAIT_MS });
    await eventually("the direct chat open", async () =>
      (await convItem(B.page, dm).locator("button").getAttribute("aria-current")) === "true");
    assert.equal(await B.page.textContent("#conv-title"), a);
    await messagesWith(B.page, second).waitFor({ timeout: WAIT_MS });
    await eventually("the clicked notification closed", async () =>
      (await shown(B.page)).map((n) => n.tag).join() === group);
    await shot(B.page, "opened-by-click");

    // While Ben's focused tab shows the direct chat, a push for it shows nothing; the group's
    // still does.
    assert.equal(await B.page.evaluate(() => document.hasFocus()), true, "the tab has the focus");
    await push({ conv_id: dm, seq: seq2 + 1, unread: 0, badge: 1, kind: "message", sender: a, preview: "seen already" });
    await push({ conv_id: group, seq: seq3, unread: 1, badge: 1, kind: "message", title: "Plans", preview: "later one" });
    await eventually("the group's notification replaced", async () =>
      (await shown(B.page)).some((n) => n.tag === group && n.body === "later one"));
    await pause(1000);
    assert.deepEqual((await shown(B.page)).map((n) => n.tag), [group]);

    // `/#conv=<id>` opens the conversation once logged in (a new tab: a new device).
    const tab = await B.context.newPage();
    watch(tab);
    await tab.goto(BASE_URL + "/#conv=" + encodeURIComponent(group));
    await tab.fill("#login-user", b);
    await tab.fill("#login-password", PASSWORD);
    await tab.click("#login-submit");
    await eventually("the group open from the address", async () =>
      (await tab.isVisible("#conv-open")) && (await tab.textContent("#conv-title")) === "Plans");
    await caughtUp(tab);
    assert.equal(await tab.evaluate(() => location.hash), "", "the address is the page's again");
    await shot(tab, "opened-from-address");
    assert.deepEqual(A.page.errors, []);
    assert.deepEqual(B.page.errors, []);
    assert.deepEqual(tab.errors, []);
  });

  // [server routes] GET/PUT /v1/conversations/{id}/notifications and /v1/me/notifications.
  test("the level of a conversation and the privacy mode are saved", async () => {
    const shot = shooter("14-notify-level");
    const [a, b] = [await newUser("cleo"), await newUser("dan")];
    const A = await openPage(browser, WIDE);
    const B = await notifyingPage();
    await login(A.page, a);
    await login(B.page, b);
    await startDirect(A.page, b);
    await send(A.page, "level test");
    const dm = directId(a, b);
    await openConversation(B.page, dm);
    const token = await tokenOf(B.page);

    // The selector shows the server's level (all by default), and a choice is saved.
    await B.page.waitForSelector('#conv-notify[data-saved="all"]', { timeout: WAIT_MS });
    await B.page.selectOption("#conv-notify", "mentions");
    await B.page.waitForSelector('#conv-notify[data-saved="mentions"]', { timeout: WAIT_MS });
    const level = await asDevice(token, "GET", `/v1/conversations/${encodeURIComponent(dm)}/notifications`);
    assert.equal(level.status, 200);
    assert.equal(level.body.level, "mentions");
    await shot(B.page, "mentions");

    // After a reload the selector shows it again.
    await B.page.reload();
    await caughtUp(B.page);
    await openConversation(B.page, dm);
    await B.page.waitForSelector('#conv-notify[data-saved="mentions"]', { timeout: WAIT_MS });
    assert.equal(await B.page.inputValue("#conv-notify"), "mentions");

    // Privacy mode: notifications without sender and text.
    await B.page.waitForSelector("#notify-privacy-box:not([hidden])", { timeout: WAIT_MS });
    assert.equal(await B.page.isChecked("#notify-privacy"), false);
    const put = B.page.waitForResponse((r) =>
      r.url().endsWith("/v1/me/notifications") && r.request().method() === "PUT");
    await B.page.check("#notify-privacy");
    assert.equal((await put).status(), 200);
    const settings = await asDevice(token, "GET", "/v1/me/notifications");
    assert.equal(settings.status, 200);
    assert.equal(settings.body.privacy, true);
    assert.deepEqual(B.page.errors, []);
  });
});
