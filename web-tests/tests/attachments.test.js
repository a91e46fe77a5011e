// Attachments (docs/MEDIA.md) in the web client, two users in real Chromium contexts against a
// real `parley serve`: files attached through the attach button, the file input, a drop and a
// paste; upload chips with progress and the server's refusals; previews, file cards and voice
// notes that load through signed URLs on the other side; a recall that takes them away.
// Screenshots of every step go to target/browser/.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { deflateSync } from "node:zlib";
import {
  ARTIFACTS, PARLEY_BIN, WAIT_MS, directId, eventually, launch, login, newUser, openPage,
  shooter, sideBySide, startDirect, startServer,
} from "../harness.js";

const WIDE = { width: 1280, height: 800 };

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

// --- files made here, so the test knows every byte --------------------------------------------

const CRC_TABLE = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});

function crc32(buf) {
  let c = 0xffffffff;
  for (const b of buf) c = CRC_TABLE[(c ^ b) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

function chunk(type, data) {
  const head = Buffer.alloc(8);
  head.writeUInt32BE(data.length, 0);
  head.write(type, 4, "ascii");
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(Buffer.concat([head.subarray(4), data])), 0);
  return Buffer.concat([head, data, crc]);
}

// An RGB PNG of `width`×`height`: a blue-to-orange gradient with a dark grid, so a thumbnail
// of it is visibly the same picture.
function png(width, height) {
  const rows = [];
  for (let y = 0; y < height; y++) {
    const row = Buffer.alloc(1 + width * 3);
    for (let x = 0; x < width; x++) {
      const grid = x % 50 === 0 || y % 50 === 0;
      row[1 + x * 3] = grid ? 30 : Math.round((255 * x) / width);
      row[2 + x * 3] = grid ? 30 : Math.round((160 * y) / height);
      row[3 + x * 3] = grid ? 30 : 255 - Math.round((255 * x) / width);
    }
    rows.push(row);
  }
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(width, 0);
  ihdr.writeUInt32BE(height, 4);
  ihdr[8] = 8; // bit depth
  ihdr[9] = 2; // RGB
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk("IHDR", ihdr),
    chunk("IDAT", deflateSync(Buffer.concat(rows))),
    chunk("IEND", Buffer.alloc(0)),
  ]);
}

// Half a second of a 440 Hz tone, 8 kHz 8-bit mono WAV: a voice note.
function wav() {
  const rate = 8000;
  const samples = Buffer.alloc(rate / 2);
  for (let i = 0; i < samples.length; i++) {
    samples[i] = 128 + Math.round(60 * Math.sin((2 * Math.PI * 440 * i) / rate));
  }
  const h = Buffer.alloc(44);
  h.write("RIFF", 0, "ascii");
  h.writeUInt32LE(36 + samples.length, 4);
  h.write("WAVEfmt ", 8, "ascii");
  h.writeUInt32LE(16, 16);
  h.writeUInt16LE(1, 20); // PCM
  h.writeUInt16LE(1, 22); // mono
  h.writeUInt32LE(rate, 24);
  h.writeUInt32LE(rate, 28);
  h.writeUInt16LE(1, 32);
  h.writeUInt16LE(8, 34);
  h.write("data", 36, "ascii");
  h.writeUInt32LE(samples.length, 40);
  return Buffer.concat([h, samples]);
}

const PICTURE = png(400, 300);
const NOTES = Buffer.from("Room 4.12: naïve café layout ✓\nchairs: 14\ntables: 3\n", "utf8");
const VOICE = wav();
const SHEET = Buffer.from("item,count\nchairs,14\ntables,3\n", "utf8");

// --- page helpers ------------------------------------------------------------------------------

function chip(page, name, tray = "#composer-attachments") {
  return page.locator(`${tray} li.att-chip`).filter({ hasText: name });
}

async function chipState(page, name) {
  return chip(page, name).getAttribute("data-state");
}

async function waitChip(page, name, state) {
  await eventually(`the chip of ${name} to be ${state}`, async () =>
    (await chipState(page, name)) === state);
}

// The confirmed message line (with its seq) of the main timeline that holds a file card named
// `filename`.
function lineWith(page, filename) {
  return page
    .locator("#messages li[data-seq]")
    .filter({ has: page.locator(".att-file .att-name", { hasText: filename }) });
}

// Builds a DataTransfer holding one file in the page and keeps it as window.__files.
async function filesInPage(page, name, type, bytes) {
  await page.evaluate(
    ({ name, type, b64 }) => {
      const raw = atob(b64);
      const data = new Uint8Array(raw.length);
      for (let i = 0; i < raw.length; i++) data[i] = raw.charCodeAt(i);
      const dt = new DataTransfer();
      dt.items.add(new File([data], name, { type }));
      window.__files = dt;
    },
    { name, type, b64: bytes.toString("base64") },
  );
}

// Fetches `href` from the page (as a click on the link would, with no header; from the server,
// not the browser's cache, which may keep media for long) and answers the status and the bytes
// in base64.
async function fetchInPage(page, href) {
  return page.evaluate(async (href) => {
    const res = await fetch(href, { cache: "no-store" });
    const buf = new Uint8Array(await res.arrayBuffer());
    let s = "";
    for (const b of buf) s += String.fromCharCode(b);
    return { status: res.status, b64: btoa(s), type: res.headers.get("content-type") };
  }, href);
}

async function pair(names) {
  const [a, b] = [await newUser(names[0]), await newUser(names[1])];
  const A = await openPage(browser, WIDE);
  const B = await openPage(browser, WIDE);
  await login(A.page, a);
  await login(B.page, b);
  await startDirect(A.page, b);
  await startDirect(B.page, a);
  return { a, b, A, B, conv: directId(a, b) };
}

describe("attachments in the web client", () => {
  test("an image, a file and a voice note go from one user to the other", async () => {
    const shot = shooter("10-attachments");
    const { A, B } = await pair(["lena", "omar"]);

    // The image through the file input. Its upload is held back at first, so the page shows
    // a running upload: the chip is uploading and the send button waits.
    let release;
    const held = new Promise((r) => {
      release = r;
    });
    const uploads = (url) => url.pathname === "/v1/media";
    await A.page.route(uploads, async (route) => {
      await held;
      await route.continue();
    });
    await A.page.setInputFiles("#composer-files", {
      name: "floor-plan.png",
      mimeType: "image/png",
      buffer: PICTURE,
    });
    await chip(A.page, "floor-plan.png").waitFor({ timeout: WAIT_MS });
    assert.equal(await chipState(A.page, "floor-plan.png"), "uploading");
    assert.equal(await A.page.isDisabled("#composer-send"), true, "send waits for the upload");
    assert.equal(await A.page.textContent("#composer-send"), "Uploading…");
    assert.match(await A.page.textContent("#composer-att-status"), /Uploading 1 file/);
    await A.page.fill("#composer-input", "too early");
    await A.page.press("#composer-input", "Enter");
    assert.equal(await A.page.locator("#messages li.msg").count(), 0, "Enter does not send either");
    assert.match(await A.page.textContent("#composer-att-status"), /Wait for the uploads/);
    await shot(A.page, "uploading");
    release();
    await waitChip(A.page, "floor-plan.png", "done");
    await A.page.unroute(uploads);
    const bar = chip(A.page, "floor-plan.png").locator("progress");
    assert.equal(await bar.getAttribute("value"), await bar.getAttribute("max"), "progress at 100%");
    assert.equal(Number(await bar.getAttribute("max")), PICTURE.length);
    assert.equal(await A.page.isDisabled("#composer-send"), false);
    assert.equal(await A.page.textContent("#composer-send"), "Send");

    // A text file dropped on the conversation: the pane is highlighted while it is dragged.
    await filesInPage(A.page, "notes.txt", "text/plain", NOTES);
    await A.page.evaluate(() => {
      const target = document.querySelector("#timeline");
      for (const type of ["dragenter", "dragover"]) {
        target.dispatchEvent(
          new DragEvent(type, { bubbles: true, cancelable: true, dataTransfer: window.__files }),
        );
      }
    });
    assert.match(await A.page.getAttribute("#conv-open", "class"), /\bdropping\b/);
    await shot(A.page, "drop-highlight");
    const dropped = await A.page.evaluate(() =>
      document
        .querySelector("#timeline")
        .dispatchEvent(
          new DragEvent("drop", { bubbles: true, cancelable: true, dataTransfer: window.__files }),
        ),
    );
    assert.equal(dropped, false, "the drop is taken by the page (default prevented)");
    assert.doesNotMatch(await A.page.getAttribute("#conv-open", "class"), /\bdropping\b/);
    await waitChip(A.page, "notes.txt", "done");

    // A voice note through the attach button's file chooser.
    const [chooser] = await Promise.all([
      A.page.waitForEvent("filechooser", { timeout: WAIT_MS }),
      A.page.click("#composer-attach"),
    ]);
    assert.equal(chooser.isMultiple(), true);
    await chooser.setFiles({ name: "voice-note.wav", mimeType: "audio/wav", buffer: VOICE });
    await waitChip(A.page, "voice-note.wav", "done");

    // A file that claims to be a PNG and is not: the chip says why, and goes with ✕ (keyboard).
    await A.page.setInputFiles("#composer-files", {
      name: "not-a-picture.png",
      mimeType: "image/png",
      buffer: Buffer.from("just some text pretending\n"),
    });
    await waitChip(A.page, "not-a-picture.png", "failed");
    const refused = chip(A.page, "not-a-picture.png").locator(".att-state");
    assert.match(await refused.textContent(), /^Not an image the server reads: ./);
    assert.equal(await refused.getAttribute("role"), "alert");
    assert.match(await A.page.textContent("#composer-att-status"), /1 file could not be uploaded/);
    await shot(A.page, "chips");
    await chip(A.page, "not-a-picture.png").locator(".att-remove").focus();
    await A.page.keyboard.press("Enter");
    assert.equal(await chip(A.page, "not-a-picture.png").count(), 0);
    assert.equal(await A.page.isHidden("#composer-att-status"), true);

    // Send: the text and the three files in one message; the chips go.
    const caption = "Floor plan, notes and a voice note";
    await A.page.fill("#composer-input", caption);
    await A.page.press("#composer-input", "Enter");
    await eventually("the chips gone", async () =>
      (await A.page.locator("#composer-attachments li").count()) === 0);
    assert.equal(await A.page.isHidden("#composer-attachments"), true);
    await lineWith(A.page, "notes.txt").waitFor({ timeout: WAIT_MS });

    // Omar sees the message with the preview loaded through its signed URL, the file card and
    // the player.
    const line = lineWith(B.page, "notes.txt");
    await line.waitFor({ timeout: WAIT_MS });
    assert.equal(await line.locator(".body").textContent(), caption);
    const img = line.locator(".att-image img");
    await eventually("the preview loaded", async () =>
      img.evaluate((i) => i.complete && i.naturalWidth > 0));
    const drawn = await img.evaluate((i) => ({
      w: i.getAttribute("width"), h: i.getAttribute("height"), src: i.getAttribute("src"),
      natural: [i.naturalWidth, i.naturalHeight],
    }));
    // 400×300 fits the 320×240 box: drawn at 320×240 before it loads.
    assert.deepEqual([drawn.w, drawn.h], ["320", "240"]);
    assert.match(drawn.src, /^\/v1\/media\/[0-9a-f]+/);
    assert.ok(drawn.natural[0] > 0 && drawn.natural[1] > 0);
    const imageLink = line.locator(".att-image");
    assert.match(await imageLink.getAttribute("aria-label"), /^Open floor-plan\.png \(400×300, /);

    const card = line.locator(".att-file", { hasText: "notes.txt" });
    assert.equal(await card.locator(".att-size").textContent(), NOTES.length + " B");
    assert.equal(await card.locator(".att-icon").textContent(), "TXT");
    const download = card.locator("a.att-download");
    await eventually("the download link", async () => (await download.getAttribute("href")) !== null);
    assert.equal(await download.getAttribute("download"), "notes.txt");
    const got = await fetchInPage(B.page, await download.getAttribute("href"));
    assert.equal(got.status, 200);
    assert.equal(got.b64, NOTES.toString("base64"), "the download is the exact bytes");

    const voice = line.locator(".att-audio", { hasText: "voice-note.wav" });
    const audio = voice.locator("audio");
    await eventually("the player's source", async () =>
      /^\/v1\/media\//.test((await audio.getAttribute("src")) ?? ""));
    assert.equal(await audio.getAttribute("controls"), "");
    const sound = await fetchInPage(B.page, await audio.getAttribute("src"));
    assert.equal(sound.b64, VOICE.toString("base64"), "the voice note is the exact bytes");

    // A click on the preview opens the whole image in a new tab.
    const [tab] = await Promise.all([B.context.waitForEvent("page"), imageLink.click()]);
    await tab.waitForLoadState();
    assert.match(tab.url(), /\/v1\/media\/[0-9a-f]+\?/);
    assert.equal(await tab.evaluate(() => document.contentType), "image/png");
    await tab.close();
    await line.scrollIntoViewIfNeeded();
    const fa = await shot(A.page, "lena-sent");
    const fb = await shot(B.page, "omar-received");
    await sideBySide(browser, [fa, fb], join(ARTIFACTS, "attachments.png"), WIDE);

    // Omar pastes a file into his composer and sends it with no text.
    await filesInPage(B.page, "counts.csv", "text/csv", SHEET);
    const pasted = await B.page.evaluate(() =>
      document
        .querySelector("#composer-input")
        .dispatchEvent(
          new ClipboardEvent("paste", { bubbles: true, cancelable: true, clipboardData: window.__files }),
        ),
    );
    assert.equal(pasted, false, "the paste is taken by the page");
    await waitChip(B.page, "counts.csv", "done");
    assert.equal(await B.page.inputValue("#composer-input"), "", "no text is pasted");
    await B.page.click("#composer-send");
    const reply = lineWith(A.page, "counts.csv");
    await reply.waitFor({ timeout: WAIT_MS });
    assert.equal(await reply.locator(".body").count(), 0, "a message of attachments only");
    const sheetLink = reply.locator("a.att-download");
    await eventually("the csv's link", async () => (await sheetLink.getAttribute("href")) !== null);
    const sheet = await fetchInPage(A.page, await sheetLink.getAttribute("href"));
    assert.equal(sheet.b64, SHEET.toString("base64"));
    // The conversation list says what came.
    await eventually("the list's preview", async () =>
      /File: counts\.csv/.test(await A.page.textContent("#conv-list")));
    await shot(A.page, "lena-got-csv");

    // Lena recalls her message: Omar's copy loses its attachments, and their signed URLs stop
    // working.
    const oldHref = await download.getAttribute("href");
    await lineWith(A.page, "notes.txt").locator("button.recall").click();
    const recalled = B.page.locator("#messages li.recalled");
    await recalled.waitFor({ timeout: WAIT_MS });
    assert.equal(await recalled.locator(".attachments").count(), 0);
    assert.equal(await B.page.locator("#messages .att-image").count(), 0);
    assert.equal((await fetchInPage(B.page, oldHref)).status, 404);
    await shot(B.page, "recalled");

    assert.deepEqual([...A.page.errors, ...B.page.errors], []);
    await A.context.close();
    await B.context.close();
  });

  test("an upload over the server's limit shows the refusal on its chip", async (t) => {
    // A server of its own with a 4 KiB limit (scripts/browser.sh runs the main one with the
    // default 25 MiB).
    const server = await startServer("11-attachments-limit", ["--max-media-bytes", "4096"]);
    if (!server) {
      t.skip(`no parley binary at ${PARLEY_BIN} (set PARLEY_BIN)`);
      return;
    }
    const shot = shooter("11-attachments-limit");
    try {
      const [a, b] = [await newUser("rosa", server), await newUser("sam", server)];
      const A = await openPage(browser, WIDE);
      await login(A.page, a, undefined, server.url);
      await startDirect(A.page, b);
      await A.page.setInputFiles("#composer-files", [
        { name: "big.bin", mimeType: "application/octet-stream", buffer: Buffer.alloc(20000, 7) },
        { name: "small.txt", mimeType: "text/plain", buffer: Buffer.from("fits in the limit\n") },
      ]);
      await waitChip(A.page, "big.bin", "failed");
      await waitChip(A.page, "small.txt", "done");
      const state = chip(A.page, "big.bin").locator(".att-state");
      assert.match(await state.textContent(), /^Too large: ./);
      assert.equal(await chip(A.page, "big.bin").locator(".att-retry").isHidden(), true,
        "no Retry: the same file would be refused again");
      assert.equal(await A.page.isDisabled("#composer-send"), false, "a refusal does not block");
      await shot(A.page, "too-large");

      // The send takes the finished file; the refused one stays with its reason.
      await A.page.click("#composer-send");
      const sent = A.page.locator("#messages li[data-seq] .attachments");
      await sent.waitFor({ timeout: WAIT_MS });
      assert.equal(await sent.locator(".att-file").count(), 1);
      assert.match(await sent.textContent(), /small\.txt/);
      assert.equal(await chip(A.page, "small.txt").count(), 0);
      assert.equal(await chipState(A.page, "big.bin"), "failed");
      await shot(A.page, "sent-the-rest");
      assert.deepEqual(A.page.errors, []);
      await A.context.close();
    } finally {
      await server.stop();
    }
    assert.doesNotMatch(readFileSync(server.log, "utf8"), /pd_[0-9a-f]{16}/, "no token in its log");
  });
});
