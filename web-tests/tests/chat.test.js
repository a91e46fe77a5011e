// The web client in a real Chromium against a real `parley serve`: each test drives the page
// as a person would and asserts what the page shows, with a screenshot of every step in
// target/browser/.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import {
  ARTIFACTS, BASE_URL, WAIT_MS, caughtUp, convItem, directId, eventually, launch, login,
  messagesWith, newUser, openConversation, openPage, send, sideBySide, shooter, startDirect,
  status, unreadOf, watch,
} from "../harness.js";

const CHAT_VIEWPORT = { width: 820, height: 560 };

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

// Two users, each in a context of their own, logged in, with their direct chat open on both
// sides.
async function pair(names, viewport) {
  const [a, b] = [await newUser(names[0]), await newUser(names[1])];
  const A = await openPage(browser, viewport);
  const B = await openPage(browser, viewport);
  await login(A.page, a);
  await login(B.page, b);
  await startDirect(A.page, b);
  await startDirect(B.page, a);
  return { a, b, A, B, conv: directId(a, b) };
}

describe("the web client", () => {
  test("two users chat both ways", async () => {
    const shot = shooter("1-two-users");
    const [a, b] = [await newUser("ana"), await newUser("ben")];
    const A = await openPage(browser, CHAT_VIEWPORT);
    const B = await openPage(browser, CHAT_VIEWPORT);
    await login(A.page, a);
    await login(B.page, b);
    await shot(A.page, "ana-logged-in");
    await startDirect(A.page, b);
    await send(A.page, "Hello Ben, lunch at noon?");
    await messagesWith(A.page, "Hello Ben, lunch at noon?").waitFor({ timeout: WAIT_MS });
    await shot(A.page, "ana-sent");

    // Ben's list shows the new chat with one unread message, live.
    const conv = directId(a, b);
    await eventually("the unread count on Ben's side", async () => (await unreadOf(B.page, conv)) === "1");
    const preview = await convItem(B.page, conv).locator(".conv-preview").textContent();
    assert.match(preview, /Hello Ben, lunch at noon\?/);
    await shot(B.page, "ben-list-unread");
    await openConversation(B.page, conv);
    await messagesWith(B.page, "Hello Ben, lunch at noon?").waitFor({ timeout: WAIT_MS });
    await send(B.page, "Sure, see you there.\nI'll book a table.");
    await messagesWith(A.page, "Sure, see you there.\nI'll book a table.").waitFor({ timeout: WAIT_MS });
    await send(A.page, "Great!");
    await messagesWith(B.page, "Great!").waitFor({ timeout: WAIT_MS });
    // Both have the chat open and visible: their unread counts are back to zero.
    await eventually("Ben's unread back to 0", async () => (await unreadOf(B.page, conv)) === "0");
    await eventually("Ana's unread back to 0", async () => (await unreadOf(A.page, conv)) === "0");
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(await unreadOf(B.page, conv), "0");
    const fa = await shot(A.page, "ana-chatting");
    const fb = await shot(B.page, "ben-chatting");
    await sideBySide(browser, [fa, fb], join(ARTIFACTS, "two-users-chatting.png"), CHAT_VIEWPORT);
    assert.equal(await messagesWith(A.page, "Great!").count(), 1);
    assert.deepEqual([...A.page.errors, ...B.page.errors], []);
    await A.context.close();
    await B.context.close();
  });

  test("a message sent offline stays pending, then arrives exactly once", async () => {
    const shot = shooter("2-offline");
    const { A, B, conv } = await pair(["olga", "otto"]);
    await send(A.page, "warm-up");
    await messagesWith(B.page, "warm-up").waitFor({ timeout: WAIT_MS });

    await A.context.setOffline(true);
    await eventually("Olga's page to notice it is offline", async () => (await status(A.page)) !== "caught up");
    const text = "sent while offline " + Date.now();
    await send(A.page, text);
    const pending = A.page.locator("#messages li.pending", { hasText: text });
    await pending.waitFor({ timeout: WAIT_MS });
    assert.equal(await pending.locator(".state").textContent(), "pending");
    await shot(A.page, "pending-while-offline");
    await new Promise((r) => setTimeout(r, 1500));
    assert.equal(await messagesWith(B.page, text).count(), 0, "nothing reached Otto while offline");
    assert.equal(await pending.count(), 1, "still pending while offline");

    await A.context.setOffline(false);
    await caughtUp(A.page);
    await messagesWith(B.page, text).waitFor({ timeout: WAIT_MS });
    await eventually("the pending mark to go", async () => (await pending.count()) === 0);
    const confirmed = A.page.locator("#messages li[data-seq]", { hasText: text });
    assert.equal(await confirmed.count(), 1);
    // Exactly once on the other side, also after a moment for any duplicate push.
    await new Promise((r) => setTimeout(r, 1500));
    assert.equal(await messagesWith(B.page, text).count(), 1);
    assert.equal(await messagesWith(A.page, text).count(), 1);
    await shot(A.page, "sender-confirmed");
    await shot(B.page, "receiver-once");
    assert.ok(conv);
    await A.context.close();
    await B.context.close();
  });

  test("a second tab follows the read position", async () => {
    const shot = shooter("3-two-tabs");
    const [r, s] = [await newUser("rita"), await newUser("sam")];
    const S = await openPage(browser);
    await login(S.page, s);
    await startDirect(S.page, r);
    await send(S.page, "first unread");
    await send(S.page, "second unread");
    await messagesWith(S.page, "second unread").waitFor({ timeout: WAIT_MS });
    await eventually("both sends confirmed", async () =>
      (await S.page.locator("#messages li[data-seq]").count()) >= 2);

    const R = await openPage(browser);
    await login(R.page, r);
    const tab2 = await R.context.newPage();
    watch(tab2);
    await login(tab2, r);
    const conv = directId(r, s);
    await eventually("2 unread in tab 1", async () => (await unreadOf(R.page, conv)) === "2");
    await eventually("2 unread in tab 2", async () => (await unreadOf(tab2, conv)) === "2");
    await shot(tab2, "tab2-before");

    await R.page.bringToFront();
    await openConversation(R.page, conv);
    await messagesWith(R.page, "second unread").waitFor({ timeout: WAIT_MS });
    await eventually("tab 2's unread to drop to 0", async () => (await unreadOf(tab2, conv)) === "0");
    assert.equal(await convItem(tab2, conv).locator(".unread").isHidden(), true);
    await shot(R.page, "tab1-opened");
    await shot(tab2, "tab2-after");
    await R.context.close();
    await S.context.close();
  });

  test("a recalled message disappears on the other side", async () => {
    const shot = shooter("4-recall");
    const { A, B } = await pair(["rosa", "rick"]);
    const text = "oops, wrong chat " + Date.now();
    await send(A.page, text);
    await messagesWith(B.page, text).waitFor({ timeout: WAIT_MS });
    await shot(B.page, "before-recall");
    const mine = A.page.locator("#messages li[data-seq]", { hasText: text });
    await mine.locator("button.recall").click();
    await eventually("the body gone on Rick's side", async () =>
      (await messagesWith(B.page, text).count()) === 0);
    const recalled = B.page.locator("#messages li.recalled");
    assert.equal(await recalled.count(), 1);
    assert.equal(await recalled.locator(".body").textContent(), "message recalled");
    await eventually("the sender's own view too", async () =>
      (await A.page.locator("#messages li.recalled").count()) === 1);
    await shot(B.page, "after-recall");
    await A.context.close();
    await B.context.close();
  });

  test("typing shows on the other side and expires; the peer shows online", async () => {
    const shot = shooter("5-typing");
    const { a, A, B } = await pair(["tina", "tom"]);
    // Presence: both are connected, so each header shows the peer online.
    await eventually("Tina online in Tom's header", async () =>
      (await B.page.textContent("#conv-sub")) === "online");
    await A.page.focus("#composer-input");
    await A.page.keyboard.type("I am wri", { delay: 40 });
    await eventually("the typing line on Tom's side", async () =>
      (await B.page.textContent("#typing")) === `${a} is typing…`);
    await shot(B.page, "typing-shown");
    const shownAt = Date.now();
    await eventually("the typing line to expire", async () =>
      (await B.page.textContent("#typing")) === "", 20000);
    const lastedMs = Date.now() - shownAt;
    assert.ok(lastedMs > 500, `the typing line lasted ${lastedMs} ms`);
    await shot(B.page, "typing-expired");
    // Tina's only tab closes: Tom sees her offline, with when she was last seen.
    await A.context.close();
    await eventually("Tina last seen in Tom's header", async () =>
      (await B.page.textContent("#conv-sub")).startsWith("last seen"));
    await shot(B.page, "peer-last-seen");
    await B.context.close();
  });

  test("a reload restores the list and the unread counts", async () => {
    const shot = shooter("6-reload");
    const [u, v] = [await newUser("uma"), await newUser("vic")];
    const V = await openPage(browser);
    await login(V.page, v);
    await startDirect(V.page, u);
    for (const t of ["one", "two", "three"]) await send(V.page, t);
    await eventually("three sends confirmed", async () =>
      (await V.page.locator("#messages li[data-seq]").count()) >= 3);

    const U = await openPage(browser);
    await login(U.page, u);
    const conv = directId(u, v);
    await eventually("3 unread before the reload", async () => (await unreadOf(U.page, conv)) === "3");
    await shot(U.page, "before-reload");
    await U.page.reload();
    await caughtUp(U.page);
    assert.equal(await U.page.isHidden("#login-view"), true, "still logged in after the reload");
    await eventually("3 unread after the reload", async () => (await unreadOf(U.page, conv)) === "3");
    const preview = await convItem(U.page, conv).locator(".conv-preview").textContent();
    assert.match(preview, /three/);
    await shot(U.page, "after-reload");
    await U.context.close();
    await V.context.close();
  });

  test("a wrong password shows an error and nothing else", async () => {
    const shot = shooter("7-wrong-password");
    const w = await newUser("wendy");
    const W = await openPage(browser, { width: 390, height: 844 });
    await W.page.goto(BASE_URL + "/");
    await W.page.fill("#login-user", w);
    await W.page.fill("#login-password", "not the password");
    await W.page.click("#login-submit");
    const error = W.page.locator("#login-error");
    await error.waitFor({ state: "visible", timeout: WAIT_MS });
    assert.equal(await error.textContent(), "Wrong user id or password.");
    assert.equal(await W.page.isHidden("#chat-view"), true);
    assert.equal(await W.page.locator("#conv-list li").count(), 0);
    const stored = await W.page.evaluate(() => JSON.stringify(Object.entries(sessionStorage)));
    assert.ok(!stored.includes("token"), `sessionStorage holds ${stored}`);
    assert.equal(await W.page.evaluate(() => sessionStorage.getItem("parley.session")), null);
    await shot(W.page, "error-shown");

    // The right password then works on the phone-sized layout.
    await W.page.fill("#login-password", "correct horse battery staple");
    await W.page.click("#login-submit");
    await caughtUp(W.page);
    assert.equal(await W.page.isVisible("#login-error"), false);
    await shot(W.page, "logged-in-phone");
    await W.context.close();
  });
});
