// What the browser tests share: the server under test (PARLEY_URL, PARLEY_ADMIN_TOKEN), users
// made through the admin API, Debian's Chromium launched headless through playwright-core,
// screenshots of each step, and the page actions a person would take.

import { spawn } from "node:child_process";
import {
  closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync,
} from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { randomBytes } from "node:crypto";
import { chromium } from "playwright-core";

export const BASE_URL = required("PARLEY_URL");
const ADMIN_TOKEN = required("PARLEY_ADMIN_TOKEN");
export const ARTIFACTS = process.env.BROWSER_ARTIFACTS ?? "../target/browser";
const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
export const PASSWORD = "correct horse battery staple";
// How long any one expectation waits for the page.
export const WAIT_MS = 15000;

mkdirSync(ARTIFACTS, { recursive: true });

function required(name) {
  const value = process.env[name];
  if (!value) throw new Error(name + " must name the server under test (scripts/browser.sh sets it)");
  return value;
}

// The server scripts/browser.sh started; startServer() makes others.
const MAIN_SERVER = { url: BASE_URL, adminToken: ADMIN_TOKEN };

export async function admin(method, path, body, server = MAIN_SERVER) {
  const res = await fetch(server.url + path, {
    method,
    headers: { Authorization: "Bearer " + server.adminToken, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

// A new user with PASSWORD; ids are unique per run so tests never meet each other's state.
export async function newUser(name, server = MAIN_SERVER) {
  const userId = name + "-" + randomBytes(3).toString("hex");
  await admin("POST", "/v1/admin/users", { user_id: userId, password: PASSWORD }, server);
  return userId;
}

// The `parley` binary scripts/browser.sh runs: PARLEY_BIN, else the debug build of this checkout.
const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..");
export const PARLEY_BIN =
  process.env.PARLEY_BIN ??
  join(resolve(REPO, process.env.CARGO_TARGET_DIR ?? "target"), "debug", "parley");

function freePort() {
  return new Promise((ok, fail) => {
    const probe = createServer();
    probe.once("error", fail);
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address();
      probe.close(() => ok(port));
    });
  });
}

// Another `parley serve` of PARLEY_BIN with `args` added (for a test that needs other limits),
// on the embedded store in a temporary directory, on a free port, with an admin token of its
// own; its log goes to ARTIFACTS/<name>-serve.log. Answers {url, adminToken, log, stop()}, or
// null when PARLEY_BIN does not exist.
export async function startServer(name, args) {
  if (!existsSync(PARLEY_BIN)) return null;
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), "parley-web-"));
  const adminToken = "browser-" + randomBytes(16).toString("hex");
  const log = join(ARTIFACTS, name + "-serve.log");
  const out = openSync(log, "w");
  const child = spawn(
    PARLEY_BIN,
    ["serve", "--listen", `127.0.0.1:${port}`, "--data-dir", join(dir, "data"), ...args],
    { env: { ...process.env, PARLEY_ADMIN_TOKEN: adminToken }, stdio: ["ignore", out, out] },
  );
  closeSync(out);
  let exited = null;
  child.once("exit", (code, signal) => {
    exited = signal ?? code;
  });
  const url = `http://127.0.0.1:${port}`;
  const stop = async () => {
    if (exited === null) {
      child.kill("SIGTERM");
      const deadline = Date.now() + 15000;
      while (exited === null && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
      if (exited === null) child.kill("SIGKILL");
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + 60000;
  for (;;) {
    if (exited !== null) {
      await stop();
      const tail = readFileSync(log, "utf8").slice(-2000);
      throw new Error(`${PARLEY_BIN} serve ${args.join(" ")} exited (${exited}):\n${tail}`);
    }
    try {
      if ((await fetch(url + "/readyz")).ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`${PARLEY_BIN} serve did not answer /readyz within 60 s`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return { url, adminToken, log, stop };
}

export function launch() {
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
}

// A fresh context (its own storage) and page; uncaught errors of the page's scripts are kept
// for the test to assert there were none.
export async function openPage(browser, viewport = { width: 1100, height: 720 }) {
  const context = await browser.newContext({ viewport });
  const page = await context.newPage();
  watch(page);
  return { context, page };
}

export function watch(page) {
  page.errors = [];
  page.on("pageerror", (e) => page.errors.push(String(e)));
}

// Screenshots named <test>-<nn>-<step>.png in ARTIFACTS.
export function shooter(testName) {
  let n = 0;
  return async (page, step) => {
    n += 1;
    const file = join(ARTIFACTS, `${testName}-${String(n).padStart(2, "0")}-${step}.png`);
    await page.screenshot({ path: file });
    return file;
  };
}

export async function login(page, userId, password = PASSWORD, url = BASE_URL) {
  await page.goto(url + "/");
  await page.fill("#login-user", userId);
  await page.fill("#login-password", password);
  await page.click("#login-submit");
  await page.waitForSelector("#chat-view:not([hidden])", { timeout: WAIT_MS });
  await caughtUp(page);
}

export async function caughtUp(page) {
  await eventually("the page to be caught up", async () => (await status(page)) === "caught up");
}

export async function status(page) {
  return page.$eval("#conn-status", (n) => n.dataset.state);
}

// Starts (or reopens) the direct chat with `peer` through the "New chat" dialog.
export async function startDirect(page, peer) {
  await page.click("#new-direct");
  await page.fill("#direct-user", peer);
  await page.click("#direct-form button[type=submit]");
  await page.waitForSelector("#conv-open:not([hidden])", { timeout: WAIT_MS });
}

export function directId(a, b) {
  return a < b ? `dm:${a}:${b}` : `dm:${b}:${a}`;
}

export function convItem(page, convId) {
  return page.locator(`#conv-list li[data-conv-id="${convId}"]`);
}

// Opens a conversation from the list, once the list shows it.
export async function openConversation(page, convId) {
  const item = convItem(page, convId);
  await item.waitFor({ timeout: WAIT_MS });
  await item.locator("button").click();
  await page.waitForSelector("#conv-open:not([hidden])", { timeout: WAIT_MS });
}

export async function send(page, text) {
  await page.fill("#composer-input", text);
  await page.press("#composer-input", "Enter");
}

// The message lines whose body is exactly `text`.
export function messagesWith(page, text) {
  return page.locator("#messages li .body").filter({ hasText: new RegExp("^" + escape(text) + "$") });
}

function escape(text) {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

export async function unreadOf(page, convId) {
  return convItem(page, convId).getAttribute("data-unread");
}

// Waits until `probe()` returns true; fails with `what` after `ms`.
export async function eventually(what, probe, ms = WAIT_MS) {
  const deadline = Date.now() + ms;
  let last;
  while (Date.now() < deadline) {
    try {
      last = await probe();
      if (last === true) return;
    } catch (e) {
      last = e;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting for ${what} (last: ${last})`);
}

// Two screenshots side by side in one picture, drawn by the browser itself.
export async function sideBySide(browser, files, out, { width, height }) {
  const { readFileSync } = await import("node:fs");
  const gap = 16;
  const page = await browser.newPage({
    viewport: { width: width * files.length + gap * (files.length - 1), height },
  });
  const imgs = files
    .map((f) => `<img src="data:image/png;base64,${readFileSync(f).toString("base64")}">`)
    .join("");
  await page.setContent(
    `<body style="margin:0;display:flex;gap:${gap}px;background:#8a8f99">${imgs}</body>`,
  );
  await page.screenshot({ path: out });
  await page.close();
}
