// Message search (docs/SEARCH.md) in the web client: the box above the conversation list,
// searching as one types, phrases, "More results", the empty and error states, a click on a
// hit that opens the conversation at a message far back in its history, and what search never
// finds (recalled messages, old bodies of edited ones, messages from before one joined); the
// conversation's search language in the Members panel. Screenshots in target/browser/.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { copyFileSync } from "node:fs";
import { join } from "node:path";
import { randomUUID } from "node:crypto";
import {
  ARTIFACTS, BASE_URL, WAIT_MS, directId, eventually, launch, login, newUser, openConversation,
  openPage, send, shooter, startDirect,
} from "../harness.js";

const WIDE = { width: 1280, height: 800 };
// More than the web client's first page (50 events), so the oldest message is not in it.
const FILLERS = 80;

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

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
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

const convPath = (convId) => "/v1/conversations/" + encodeURIComponent(convId);

// Sends `body` as the token's device; answers the ack ({seq, ...}).
function post(token, convId, body) {
  return asDevice(token, "POST", convPath(convId) + "/messages", { client_msg_id: randomUUID(), body });
}

// What the results panel shows: its state, its line, and each hit's conversation, sender,
// seq, snippet text and marked words.
async function results(page) {
  return page.evaluate(() => {
    const status = document.getElementById("search-status");
    return {
      visible: !document.getElementById("search-panel").hidden,
      state: status.dataset.state ?? "",
      q: status.dataset.q ?? "",
      status: status.textContent,
      more: !document.getElementById("search-more").hidden,
      hits: [...document.querySelectorAll("#search-results li")].map((li) => ({
        conv: li.querySelector(".hit-conv").textContent,
        who: li.querySelector(".hit-who").textContent,
        seq: Number(li.dataset.seq),
        text: li.querySelector(".hit-snippet").textContent,
        marks: [...li.querySelectorAll(".hit-snippet mark")].map((m) => m.textContent),
      })),
    };
  });
}

// Types `q` into the search box (replacing what it held) and waits for the answer to it.
async function search(page, q, { type = false } = {}) {
  await page.fill("#search-input", "");
  if (type) await page.type("#search-input", q, { delay: 60 });
  else await page.fill("#search-input", q);
  let r;
  await eventually(`the answer to ${q}`, async () => {
    r = await results(page);
    return r.visible && r.q === q && ["results", "empty", "error"].includes(r.state);
  });
  return r;
}

describe("message search in the web client", () => {
  test("as you type, phrases, more results, and a jump to a message far back", async () => {
    const shot = shooter("15-search");
    const [a, b] = [await newUser("sara"), await newUser("theo")];
    const A = await openPage(browser, WIDE);
    await login(A.page, a);
    await startDirect(A.page, b);
    const conv = directId(a, b);
    const tokenA = await tokenOf(A.page);

    // The message to find, then more than a page of others after it.
    const old = "The lighthouse keeper kept a logbook of every storm";
    const oldSeq = (await post(tokenA, conv, old)).seq;
    for (let i = 1; i <= FILLERS; i++) await post(tokenA, conv, `filler ${i}: nothing to see here`);
    for (const text of ["The quick brown fox met a brown dog", "Foxes are quick but brown dogs are lazy"]) {
      await send(A.page, text);
    }
    await eventually("Sara's sends confirmed", async () =>
      (await A.page.locator("#messages li[data-seq]").filter({ hasText: "brown dogs are lazy" }).count()) === 1);

    // Theo logs in and never opens the conversation before he searches.
    const B = await openPage(browser, WIDE);
    const searches = [];
    const eventPages = [];
    B.page.on("request", (r) => {
      const url = new URL(r.url());
      if (url.pathname === "/v1/search") searches.push(url.searchParams);
      if (url.pathname.endsWith("/events")) eventPages.push(url.searchParams);
    });
    await login(B.page, b);
    await asDevice(await tokenOf(B.page), "POST", convPath(conv) + "/messages", {
      client_msg_id: randomUUID(),
      body: "Shall we meet at the lighthouse on Friday?",
    });
    assert.equal(await B.page.locator("#conv-open").isHidden(), true);

    // A word: both messages holding it, newest first, the word marked.
    let r = await search(B.page, "lighthouse");
    assert.equal(r.state, "results", r.status);
    assert.deepEqual(r.hits.map((h) => h.text), [
      "Shall we meet at the lighthouse on Friday?",
      old,
    ]);
    assert.deepEqual(r.hits.map((h) => h.who), ["you", a]);
    assert.deepEqual(r.hits.map((h) => h.conv), [a, a], "a direct chat is named by the peer");
    for (const h of r.hits) assert.deepEqual(h.marks, ["lighthouse"]);
    assert.equal(await B.page.locator("#conv-list").isHidden(), true, "the hits take the list's place");
    await shot(B.page, "word");

    // Typed letter by letter: the last word is a prefix, and the requests are debounced.
    const before = searches.length;
    r = await search(B.page, "lightho", { type: true });
    assert.equal(r.hits.length, 2);
    for (const h of r.hits) assert.deepEqual(h.marks, ["lighthouse"], "the whole word is marked");
    const typed = searches.length - before;
    assert.ok(typed >= 1 && typed <= 3, `${typed} searches for 7 letters typed 60 ms apart`);
    assert.equal(searches.at(-1).get("q"), "lightho");
    await shot(B.page, "prefix");

    // Words (all required, anywhere) and a phrase (together, in order).
    r = await search(B.page, "quick brown");
    assert.equal(r.hits.length, 2);
    r = await search(B.page, '"quick brown"');
    assert.deepEqual(r.hits.map((h) => h.text), ["The quick brown fox met a brown dog"]);
    // Every occurrence of a matched word is marked.
    assert.deepEqual(r.hits[0].marks, ["quick", "brown", "brown"]);
    await shot(B.page, "phrase");

    // Nothing found; a query the server refuses shows its message.
    r = await search(B.page, "zebra");
    assert.equal(r.state, "empty");
    assert.equal(r.hits.length, 0);
    assert.match(r.status, /No messages match “zebra”/);
    r = await search(B.page, "!!!");
    assert.equal(r.state, "error");
    assert.match(r.status, /q is empty/);
    await shot(B.page, "error");

    // More results: the next page after the first 20, none twice.
    r = await search(B.page, "filler");
    assert.equal(r.hits.length, 20);
    assert.equal(r.more, true);
    assert.equal(r.hits[0].text, `filler ${FILLERS}: nothing to see here`);
    await B.page.click("#search-more");
    await eventually("the second page", async () => (await results(B.page)).hits.length === 40);
    r = await results(B.page);
    assert.equal(new Set(r.hits.map((h) => h.seq)).size, 40);
    assert.equal(r.hits[39].text, `filler ${FILLERS - 39}: nothing to see here`);
    assert.equal(searches.at(-1).has("cursor"), true);

    // The old message: a click opens the conversation scrolled to it, highlighted, though it
    // was not in the first page.
    r = await search(B.page, "lighthouse keeper");
    assert.deepEqual(r.hits.map((h) => h.seq), [oldSeq]);
    await B.page.click(`#search-results li[data-seq="${oldSeq}"] .hit`);
    await B.page.waitForSelector("#conv-open:not([hidden])", { timeout: WAIT_MS });
    const target = B.page.locator(`#messages li[data-seq="${oldSeq}"]`);
    await target.waitFor({ timeout: WAIT_MS });
    await eventually("the old message highlighted", async () =>
      (await target.getAttribute("class")).split(" ").includes("flash"));
    const file = await shot(B.page, "jumped");
    copyFileSync(file, join(ARTIFACTS, "search-results.png"));
    await eventually("the old message in view", async () =>
      B.page.evaluate((seq) => {
        const box = document.getElementById("timeline").getBoundingClientRect();
        const r = document.querySelector(`#messages li[data-seq="${seq}"]`).getBoundingClientRect();
        return r.top >= box.top - 1 && r.bottom <= box.bottom + 1;
      }, oldSeq));
    assert.equal(await target.locator(".body").textContent(), old);
    assert.equal(await B.page.textContent("#conv-title"), a);
    assert.ok(eventPages.some((p) => p.has("before")), "an older page was loaded to reach it");
    assert.equal(
      await B.page.getAttribute(`#search-results li[data-seq="${oldSeq}"] .hit`, "aria-current"),
      "true",
    );
    // The highlight goes.
    await eventually("the highlight to end", async () =>
      !(await target.getAttribute("class")).split(" ").includes("flash"), 5000);

    // Escape empties the box and brings the list back; `/` goes to the box again.
    await B.page.focus("#search-input");
    await B.page.keyboard.press("Escape");
    assert.equal(await B.page.locator("#search-panel").isHidden(), true);
    assert.equal(await B.page.locator("#conv-list").isVisible(), true);
    await B.page.focus("#timeline");
    await B.page.keyboard.press("/");
    assert.equal(await B.page.evaluate(() => document.activeElement.id), "search-input");
    assert.equal(await B.page.inputValue("#search-input"), "", "the slash is not typed");
    await B.page.focus("#composer-input");
    await B.page.keyboard.press("Control+k");
    assert.equal(await B.page.evaluate(() => document.activeElement.id), "search-input");

    assert.deepEqual(A.page.errors, []);
    assert.deepEqual(B.page.errors, []);
    await A.context.close();
    await B.context.close();
  });

  test("recalled messages, old bodies and messages from before one joined are never found", async () => {
    const shot = shooter("16-search-visibility");
    const [a, b, c] = [await newUser("ursula"), await newUser("victor"), await newUser("wanda")];
    const A = await openPage(browser, WIDE);
    await login(A.page, a);
    const tokenA = await tokenOf(A.page);
    const group = (await asDevice(tokenA, "POST", "/v1/conversations", {
      kind: "group",
      title: "Orchard plans",
      members: [b],
    })).conv_id;
    const secret = (await post(tokenA, group, "The orchard password is pomegranate")).seq;
    const gate = (await post(tokenA, group, "The orchard gate is blue")).seq;
    await asDevice(tokenA, "POST", convPath(group) + `/events/${secret}/recall`);
    await asDevice(tokenA, "POST", convPath(group) + `/events/${gate}/edit`, {
      client_msg_id: randomUUID(),
      body: "The orchard gate is green",
    });
    await asDevice(tokenA, "POST", convPath(group) + "/members", { user_id: c });
    const welcome = (await post(tokenA, group, "Welcome to the orchard, everyone")).seq;

    // Victor, a member all along: neither the recalled message nor the old body.
    const B = await openPage(browser, WIDE);
    await login(B.page, b);
    let r = await search(B.page, "pomegranate");
    assert.equal(r.state, "empty", "a recalled message is not found");
    r = await search(B.page, "blue");
    assert.equal(r.state, "empty", "an edited message is not found by its old body");
    r = await search(B.page, "orchard");
    assert.deepEqual(r.hits.map((h) => h.seq), [welcome, gate]);
    assert.deepEqual(r.hits.map((h) => h.conv), ["Orchard plans", "Orchard plans"]);
    assert.deepEqual(r.hits.map((h) => h.text), ["Welcome to the orchard, everyone", "The orchard gate is green"]);
    await shot(B.page, "member-all-along");

    // Wanda, added after the first messages: only what was sent since she joined.
    const C = await openPage(browser, WIDE);
    await login(C.page, c);
    r = await search(C.page, "orchard");
    assert.deepEqual(r.hits.map((h) => h.seq), [welcome]);
    r = await search(C.page, "gate");
    assert.equal(r.state, "empty", "nothing from before she joined");
    await shot(C.page, "joined-later");
    const api = await asDevice(await tokenOf(C.page), "GET", "/v1/search?q=orchard");
    assert.deepEqual(api.hits.map((h) => h.seq), [welcome]);

    // "Only in <conversation>" sends conv_id.
    const scoped = [];
    B.page.on("request", (req) => {
      const url = new URL(req.url());
      if (url.pathname === "/v1/search") scoped.push(url.searchParams.get("conv_id"));
    });
    // An empty box gives the list back.
    await B.page.fill("#search-input", "");
    assert.equal(await B.page.locator("#search-panel").isHidden(), true);
    await openConversation(B.page, group);
    await B.page.locator("#search-here-box").waitFor({ timeout: WAIT_MS });
    assert.equal(await B.page.textContent("#search-here-label"), "Only in Orchard plans");
    await B.page.check("#search-here");
    r = await search(B.page, "welcome");
    assert.deepEqual(r.hits.map((h) => h.seq), [welcome]);
    assert.equal(scoped.at(-1), group);

    // The search language: the owner sets english in the Members panel (stems: "gates" finds
    // "gate"); a plain member's change is refused and put back.
    await openConversation(A.page, group);
    await A.page.click("#members-toggle");
    await eventually("the language read", async () =>
      !(await A.page.isDisabled("#search-language")));
    assert.equal(await A.page.inputValue("#search-language"), "simple");
    await A.page.selectOption("#search-language", "english");
    await eventually("english saved", async () =>
      (await asDevice(tokenA, "GET", convPath(group) + "/search")).language === "english");
    await shot(A.page, "language");
    await B.page.uncheck("#search-here");
    r = await search(B.page, "gates");
    assert.deepEqual(r.hits.map((h) => h.seq), [gate]);
    await B.page.click("#members-toggle");
    await eventually("the language read on Victor's side", async () =>
      (await B.page.inputValue("#search-language")) === "english" &&
      !(await B.page.isDisabled("#search-language")));
    await B.page.selectOption("#search-language", "simple");
    await eventually("the refusal", async () =>
      (await B.page.isVisible("#search-language-error")) &&
      /Not allowed/.test(await B.page.textContent("#search-language-error")));
    assert.equal(await B.page.inputValue("#search-language"), "english");
    await shot(B.page, "language-refused");

    for (const P of [A, B, C]) assert.deepEqual(P.page.errors, []);
    for (const P of [A, B, C]) await P.context.close();
  });
});
