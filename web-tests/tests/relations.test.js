// Replies, edits, reactions, threads and mentions (docs/RELATIONS.md) in the web client, two
// users in real Chromium contexts against a real `parley serve`; every step is asserted on
// the other user's page, live, and saved as a screenshot in target/browser/.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import {
  ARTIFACTS, WAIT_MS, convItem, directId, eventually, launch, login, messagesWith, newUser,
  openPage, send, sideBySide, shooter, startDirect, unreadOf,
} from "../harness.js";

// Wide enough for the list, the conversation and the thread panel side by side.
const WIDE = { width: 1280, height: 760 };

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

// The line of a message (a confirmed one, with its seq) in the main timeline or the thread.
function line(page, text, where = "#messages") {
  return page
    .locator(`${where} li[data-seq]`)
    .filter({ has: page.locator(".body", { hasText: new RegExp("^" + escape(text) + "$") }) });
}

function escape(text) {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

async function chip(page, text, key, where = "#messages") {
  const c = line(page, text, where).locator(`.chip[data-reaction="${key}"]`);
  if ((await c.count()) === 0) return null;
  return { count: await c.getAttribute("data-count"), me: await c.getAttribute("aria-pressed") };
}

describe("relations in the web client", () => {
  test("reply, edit, react, thread and mention between two users", async () => {
    const shot = shooter("8-relations");
    const [a, b] = [await newUser("maya"), await newUser("noah")];
    const A = await openPage(browser, WIDE);
    const B = await openPage(browser, WIDE);
    await login(A.page, a);
    await login(B.page, b);
    await startDirect(A.page, b);
    await startDirect(B.page, a);
    const conv = directId(a, b);

    const question = "Who is bringing the slides?";
    await send(A.page, question);
    await line(B.page, question).waitFor({ timeout: WAIT_MS });

    // Reply: Noah replies to the question; both sides show it quoted above his answer.
    await line(B.page, question).hover();
    await line(B.page, question).locator(".act-reply").click();
    const context = B.page.locator("#composer-context");
    await context.waitFor({ state: "visible", timeout: WAIT_MS });
    assert.match(await context.textContent(), /Replying to/);
    assert.match(await context.locator(".ctx-quote").textContent(), /Who is bringing the slides\?/);
    await shot(B.page, "replying");
    const answer = "I will, after lunch.";
    await send(B.page, answer);
    await line(A.page, answer).waitFor({ timeout: WAIT_MS });
    assert.equal(await context.isHidden(), true, "the reply bar goes after the send");
    const quote = line(A.page, answer).locator(".quote");
    assert.match(await quote.textContent(), /Who is bringing the slides\?/);
    assert.equal(
      await quote.getAttribute("data-reply-to"),
      await line(A.page, question).getAttribute("data-seq"),
    );
    await eventually("the quote on Noah's side", async () =>
      /Who is bringing/.test(await line(B.page, answer).locator(".quote").textContent()));
    // A click on the quote brings the original into view, highlighted.
    await quote.click();
    await eventually("the original highlighted", async () =>
      (await line(A.page, question).getAttribute("class")).includes("flash"));

    // Edit: Up in Maya's empty composer edits her last message; Noah sees it live.
    await A.page.focus("#composer-input");
    await A.page.keyboard.press("ArrowUp");
    await eventually("the composer in edit mode", async () =>
      (await A.page.inputValue("#composer-input")) === question);
    assert.match(await A.page.textContent("#composer-context"), /Editing/);
    await shot(A.page, "editing");
    const edited = "Who is bringing the slides and the demo?";
    await send(A.page, edited);
    await line(B.page, edited).waitFor({ timeout: WAIT_MS });
    assert.equal(await line(B.page, edited).locator(".edited").textContent(), "(edited)");
    assert.equal(await messagesWith(B.page, question).count(), 0, "the old text is gone");
    await line(A.page, edited).locator(".edited").waitFor({ timeout: WAIT_MS });
    // The quote of Noah's reply follows the edit.
    await eventually("the quote to show the new text", async () =>
      /and the demo/.test(await line(B.page, answer).locator(".quote").textContent()));
    // The edit button edits too.
    await line(B.page, answer).hover();
    await line(B.page, answer).locator(".act-edit").click();
    assert.equal(await B.page.inputValue("#composer-input"), answer);
    await B.page.fill("#composer-input", "I will, right after lunch.");
    await B.page.press("#composer-input", "Enter");
    const answer2 = "I will, right after lunch.";
    await line(A.page, answer2).locator(".edited").waitFor({ timeout: WAIT_MS });

    // React: Noah picks 👍 on Maya's question; she sees the chip with its count, then adds
    // hers (2, highlighted on her side) and takes it back (1).
    await line(B.page, edited).hover();
    await line(B.page, edited).locator(".act-react").click();
    await line(B.page, edited).locator('.picker .pick[data-reaction="👍"]').click();
    await eventually("the chip on Maya's side", async () =>
      JSON.stringify(await chip(A.page, edited, "👍")) === JSON.stringify({ count: "1", me: "false" }));
    assert.deepEqual(await chip(B.page, edited, "👍"), { count: "1", me: "true" });
    assert.equal(await line(B.page, edited).locator(".picker").count(), 0, "the picker closed");
    await line(A.page, edited).locator('.chip[data-reaction="👍"]').click();
    await eventually("two on Noah's side", async () =>
      (await chip(B.page, edited, "👍"))?.count === "2");
    assert.deepEqual(await chip(A.page, edited, "👍"), { count: "2", me: "true" });
    await line(A.page, edited).locator('.chip[data-reaction="👍"]').click();
    await eventually("back to one on Noah's side", async () =>
      (await chip(B.page, edited, "👍"))?.count === "1");
    assert.deepEqual(await chip(A.page, edited, "👍"), { count: "1", me: "false" });
    // Maya reacts 🎉 to Noah's answer too.
    await line(A.page, answer2).hover();
    await line(A.page, answer2).locator(".act-react").click();
    await line(A.page, answer2).locator('.picker .pick[data-reaction="🎉"]').click();
    await eventually("🎉 on Noah's side", async () =>
      (await chip(B.page, answer2, "🎉"))?.count === "1");

    // Thread: Maya starts a thread on her question; the reply shows in the panel, not in the
    // main timeline, and the root shows "1 reply" on both sides.
    await line(A.page, edited).hover();
    await line(A.page, edited).locator(".act-thread").click();
    await A.page.waitForSelector("#thread-panel:not([hidden])", { timeout: WAIT_MS });
    await line(A.page, edited, "#thread-messages").waitFor({ timeout: WAIT_MS });
    const inThread = "The slides are in the shared folder.";
    await A.page.fill("#thread-input", inThread);
    await A.page.press("#thread-input", "Enter");
    await line(A.page, inThread, "#thread-messages").waitFor({ timeout: WAIT_MS });
    const link = line(B.page, edited).locator(".thread-link");
    await eventually("1 reply on Noah's side", async () =>
      (await link.count()) === 1 && (await link.textContent()) === "1 reply");
    assert.equal(await messagesWith(B.page, inThread).count(), 0, "not in Noah's main timeline");
    assert.equal(
      await A.page.locator("#messages li .body", { hasText: inThread }).count(), 0,
      "not in Maya's main timeline",
    );
    await link.click();
    await B.page.waitForSelector("#thread-panel:not([hidden])", { timeout: WAIT_MS });
    await line(B.page, inThread, "#thread-messages").waitFor({ timeout: WAIT_MS });
    const thanks = "Thanks! I'll add the demo video.";
    await B.page.fill("#thread-input", thanks);
    await B.page.press("#thread-input", "Enter");
    await line(A.page, thanks, "#thread-messages").waitFor({ timeout: WAIT_MS });
    await eventually("2 replies on Maya's root", async () =>
      (await line(A.page, edited).locator(".thread-link").textContent()) === "2 replies");
    assert.equal(
      await A.page.locator("#thread-messages .thread-divider").getAttribute("data-count"), "2");
    // Noah reacts in the thread; Maya's panel shows it.
    await line(B.page, inThread, "#thread-messages").hover();
    await line(B.page, inThread, "#thread-messages").locator(".act-react").click();
    await line(B.page, inThread, "#thread-messages").locator('.pick[data-reaction="❤️"]').click();
    await eventually("❤️ in Maya's thread", async () =>
      (await chip(A.page, inThread, "❤️", "#thread-messages"))?.count === "1");
    // Thread replies are read like every message: with the chat open, nothing stays unread.
    await eventually("Maya's unread at 0", async () => (await unreadOf(A.page, conv)) === "0");
    await eventually("Noah's unread at 0", async () => (await unreadOf(B.page, conv)) === "0");
    // The main timeline goes on after them (cursors moved past the thread replies).
    await send(B.page, "See you at 2.");
    await line(A.page, "See you at 2.").waitFor({ timeout: WAIT_MS });
    await new Promise((r) => setTimeout(r, 300));
    const fa = await shot(A.page, "maya-thread");
    const fb = await shot(B.page, "noah-thread");
    await sideBySide(browser, [fa, fb], join(ARTIFACTS, "relations.png"), WIDE);

    // Mention: Maya makes a group with Noah and mentions him, picking him from the list `@`
    // opens; Noah, in the direct chat, sees the group's mention badge.
    await A.page.click("#thread-close");
    await A.page.click("#new-group");
    await A.page.fill("#group-title", "Launch plan");
    await A.page.fill("#group-members", b);
    await A.page.click("#group-form button[type=submit]");
    await eventually("the group open on Maya's side", async () =>
      (await A.page.textContent("#conv-title")) === "Launch plan");
    await eventually("the group's members known", async () =>
      (await A.page.evaluate(() => document.querySelector("#conv-sub").textContent)) === "2 members");
    await A.page.focus("#composer-input");
    await A.page.keyboard.type("Hi @" + b.slice(0, 3), { delay: 30 });
    const option = A.page.locator("#composer-suggest li", { hasText: b });
    await option.waitFor({ state: "visible", timeout: WAIT_MS });
    assert.equal(await A.page.locator("#composer-suggest li").count(), 1, "only Noah: not herself");
    await shot(A.page, "mention-autocomplete");
    await A.page.keyboard.press("Enter");
    assert.equal(await A.page.inputValue("#composer-input"), `Hi @${b} `);
    await A.page.keyboard.type("can you review the plan?");
    await A.page.keyboard.press("Enter");
    const mention = `Hi @${b} can you review the plan?`;
    await line(A.page, mention).locator(".mention").waitFor({ timeout: WAIT_MS });

    const group = B.page.locator("#conv-list li", { hasText: "Launch plan" });
    await eventually("Noah's mention badge", async () =>
      (await group.getAttribute("data-mentions")) === "1");
    assert.equal(await group.locator(".mention-badge").textContent(), "@1");
    assert.equal(await group.locator(".mention-badge").isVisible(), true);
    await shot(B.page, "mention-badge");
    // Opening the group reads it: the badge goes, and his name stands out in the message.
    await group.locator("button").click();
    await line(B.page, mention).locator(".mention.me").waitFor({ timeout: WAIT_MS });
    await eventually("the badge gone", async () => (await group.getAttribute("data-mentions")) === "0");
    assert.equal(await convItem(B.page, conv).getAttribute("data-mentions"), "0");
    await shot(B.page, "mention-read");

    assert.deepEqual([...A.page.errors, ...B.page.errors], []);
    await A.context.close();
    await B.context.close();
  });

  test("a recalled message has no actions and loses its reactions", async () => {
    const shot = shooter("9-relations-recall");
    const [a, b] = [await newUser("ivy"), await newUser("jon")];
    const A = await openPage(browser, WIDE);
    const B = await openPage(browser, WIDE);
    await login(A.page, a);
    await login(B.page, b);
    await startDirect(A.page, b);
    await startDirect(B.page, a);
    const text = "posted in the wrong chat";
    await send(A.page, text);
    await line(B.page, text).waitFor({ timeout: WAIT_MS });
    await line(B.page, text).hover();
    await line(B.page, text).locator(".act-react").click();
    await line(B.page, text).locator('.pick[data-reaction="😮"]').click();
    await eventually("the chip on Ivy's side", async () =>
      (await chip(A.page, text, "😮"))?.count === "1");
    await line(A.page, text).locator("button.recall").click();
    const recalled = B.page.locator("#messages li.recalled");
    await recalled.waitFor({ timeout: WAIT_MS });
    assert.equal(await recalled.locator(".actions").count(), 0);
    assert.equal(await recalled.locator(".chip").count(), 0);
    await eventually("Ivy's own line too", async () =>
      (await A.page.locator("#messages li.recalled .actions").count()) === 0 &&
      (await A.page.locator("#messages li.recalled").count()) === 1);
    await shot(B.page, "recalled");
    assert.deepEqual([...A.page.errors, ...B.page.errors], []);
    await A.context.close();
    await B.context.close();
  });
});
