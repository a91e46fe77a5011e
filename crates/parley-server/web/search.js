// Message search (docs/SEARCH.md): the box above the conversation list, searching as one types
// (debounced; the server takes the last word as a prefix), the hits in the list's place, newest
// first, with the matched words marked, "More results" from `next_cursor`, a "this
// conversation only" filter, and a click on a hit that opens its conversation at the message
// (app.openAt). `/` or Ctrl+K (⌘K) goes to the box, Escape leaves it. The conversation's
// search language is chosen in its Members panel.

import { $, el, showError } from "./dom.js";
import { clock, convName } from "./format.js";

const DEBOUNCE_MS = 250;
const PAGE_LEN = 20;

// `snippet` as nodes, the `highlights` ([start, end) in code points, not UTF-16 units) wrapped
// in <mark>. Ranges out of bounds or overlapping an earlier one are cut to fit.
export function snippetNodes(snippet, highlights) {
  const chars = Array.from(snippet ?? "");
  const ranges = (highlights ?? [])
    .map((h) => [Math.max(0, Number(h.start) || 0), Math.min(chars.length, Number(h.end) || 0)])
    .filter(([start, end]) => end > start)
    .sort((x, y) => x[0] - y[0]);
  const nodes = [];
  let at = 0;
  for (const [s, end] of ranges) {
    const start = Math.max(s, at);
    if (end <= start) continue;
    if (start > at) nodes.push(chars.slice(at, start).join(""));
    nodes.push(el("mark", {}, chars.slice(start, end).join("")));
    at = end;
  }
  if (at < chars.length) nodes.push(chars.slice(at).join(""));
  return nodes;
}

// Whether a key typed in `target` is text for it (so `/` is not a shortcut there).
function takesText(target) {
  if (!(target instanceof Element)) return false;
  if (target.isContentEditable) return true;
  const tag = target.tagName;
  if (tag === "TEXTAREA" || tag === "SELECT") return true;
  if (tag !== "INPUT") return false;
  return !["checkbox", "radio", "button", "submit", "reset", "file"].includes(target.type);
}

export function createSearch(app) {
  const pane = $("list-pane");
  const form = $("search-form");
  const input = $("search-input");
  const hereBox = $("search-here-box");
  const here = $("search-here");
  const hereLabel = $("search-here-label");
  const panel = $("search-panel");
  const status = $("search-status");
  const results = $("search-results");
  const more = $("search-more");
  const language = $("search-language");
  const languageError = $("search-language-error");
  const membersPanel = $("members-panel");

  let timer = null;
  // Every search gets the next number; an answer for an older one is dropped.
  let generation = 0;
  // The search whose hits are shown: {q, convId}, and the cursor of its next page.
  let shown = null;
  let nextCursor = null;
  let activeSeq = null;

  function scope() {
    return here.checked && app.openConvId ? app.openConvId : null;
  }

  function nameOf(convId) {
    const known = app.sync?.conversations.get(convId);
    const conv = known ?? { conv_id: convId, kind: convId.startsWith("dm:") ? "direct" : "group" };
    return convName(conv, app.session.user_id);
  }

  // The state of the panel ("idle", "loading", "results", "empty", "error") and the query it is
  // about.
  function setStatus(state, text, q = "") {
    status.dataset.state = state;
    status.dataset.q = q;
    status.textContent = text;
  }

  function showPanel(open) {
    panel.hidden = !open;
    pane.classList.toggle("searching", open);
  }

  function hitItem(hit) {
    const me = app.session.user_id;
    const key = hit.conv_id + "|" + hit.seq;
    return el(
      "li",
      { data: { convId: hit.conv_id, seq: String(hit.seq) } },
      el(
        "button",
        {
          type: "button",
          class: "hit",
          "aria-current": key === activeSeq ? "true" : "false",
          onclick: (e) => {
            activeSeq = key;
            for (const b of results.querySelectorAll(".hit")) b.setAttribute("aria-current", "false");
            e.currentTarget.setAttribute("aria-current", "true");
            app.openAt(hit.conv_id, hit.seq);
          },
        },
        el("span", { class: "hit-conv" }, nameOf(hit.conv_id)),
        el("time", { class: "hit-time", datetime: hit.sent_at }, clock(hit.sent_at)),
        el("span", { class: "hit-who" }, hit.sender === me ? "you" : hit.sender),
        el("span", { class: "hit-snippet" }, ...snippetNodes(hit.snippet, hit.highlights)),
      ),
    );
  }

  function summary(q, convId) {
    const n = results.children.length;
    if (n === 0) {
      return "No messages match “" + q + "”" + (convId ? " in " + nameOf(convId) : "") + ".";
    }
    const count = n === 1 ? "1 message" : n + " messages";
    return nextCursor ? "The newest " + count + "; more below." : count + ".";
  }

  // Runs the box's search now: its first page, or (`page`) the next page of the one shown.
  async function run({ page = false } = {}) {
    clearTimeout(timer);
    const q = input.value.trim();
    if (!q) return clear();
    const convId = scope();
    if (!page && shown && shown.q === q && shown.convId === convId && status.dataset.state !== "error") {
      return;
    }
    const params = { q, limit: PAGE_LEN };
    if (convId) params.conv_id = convId;
    if (page) params.cursor = nextCursor;
    const mine = ++generation;
    showPanel(true);
    more.disabled = true;
    if (!page) setStatus("loading", "Searching…", q);
    try {
      const answer = await app.api.search(params);
      if (mine !== generation) return;
      if (!page) {
        results.replaceChildren();
        panel.scrollTop = 0;
      }
      results.append(...answer.hits.map(hitItem));
      shown = { q, convId };
      nextCursor = answer.next_cursor ?? null;
      more.hidden = !nextCursor;
      setStatus(results.children.length ? "results" : "empty", summary(q, convId), q);
    } catch (err) {
      if (mine !== generation) return;
      if (!page) {
        results.replaceChildren();
        shown = { q, convId };
        nextCursor = null;
        more.hidden = true;
      }
      setStatus("error", app.describeError(err), q);
    } finally {
      if (mine === generation) more.disabled = false;
    }
  }

  function schedule() {
    clearTimeout(timer);
    if (!input.value.trim()) return clear();
    timer = setTimeout(() => run(), DEBOUNCE_MS);
  }

  // No query: the conversation list again.
  function clear() {
    clearTimeout(timer);
    generation += 1;
    shown = null;
    nextCursor = null;
    activeSeq = null;
    results.replaceChildren();
    setStatus("idle", "");
    more.hidden = true;
    showPanel(false);
  }

  // The filter names the open conversation, and is offered only while one is open.
  function refreshScope() {
    const convId = app.openConvId;
    hereBox.hidden = !convId;
    hereLabel.textContent = convId ? "Only in " + nameOf(convId) : "This conversation only";
    // Hits of another conversation's filter are stale.
    if (here.checked && shown && shown.convId !== scope()) run();
  }

  function focusBox() {
    if (input.offsetParent === null) return false;
    input.focus();
    input.select();
    return true;
  }

  form.addEventListener("submit", (e) => {
    e.preventDefault();
    shown = null;
    run();
  });
  input.addEventListener("input", schedule);
  input.addEventListener("focus", refreshScope);
  input.addEventListener("keydown", (e) => {
    if (e.key === "Escape") {
      e.preventDefault();
      if (input.value) {
        input.value = "";
        clear();
      } else {
        input.blur();
      }
    } else if (e.key === "ArrowDown" && !panel.hidden) {
      const first = results.querySelector(".hit");
      if (first) {
        e.preventDefault();
        first.focus();
      }
    }
  });
  here.addEventListener("change", () => {
    shown = null;
    if (input.value.trim()) run();
  });
  more.addEventListener("click", () => run({ page: true }));
  // Up and Down move between hits; Escape goes back to the box.
  results.addEventListener("keydown", (e) => {
    const current = e.target.closest?.("li");
    if (!current) return;
    if (e.key === "ArrowDown" || e.key === "ArrowUp") {
      const next = e.key === "ArrowDown" ? current.nextElementSibling : current.previousElementSibling;
      e.preventDefault();
      if (next) next.querySelector(".hit").focus();
      else if (e.key === "ArrowUp") input.focus();
    } else if (e.key === "Escape") {
      e.preventDefault();
      input.focus();
    }
  });
  document.addEventListener("keydown", (e) => {
    if (!app.session || e.defaultPrevented || e.isComposing) return;
    const ctrlK = (e.ctrlKey || e.metaKey) && !e.altKey && e.key.toLowerCase() === "k";
    const slash = e.key === "/" && !e.ctrlKey && !e.metaKey && !e.altKey && !takesText(e.target);
    if ((ctrlK || slash) && document.activeElement !== input && focusBox()) e.preventDefault();
    else if (ctrlK && document.activeElement === input) e.preventDefault();
  });

  // The search language in the Members panel: read when the panel opens, saved on a change
  // (owners and admins only; a refusal puts the saved value back and says why).
  let languageConv = null;
  async function loadLanguage() {
    const convId = app.openConvId;
    languageConv = convId;
    showError(languageError, null);
    language.disabled = true;
    try {
      const answer = await app.api.searchLanguage(convId);
      if (languageConv !== convId) return;
      language.value = answer.language;
      language.dataset.saved = answer.language;
      language.disabled = false;
    } catch (err) {
      if (languageConv === convId) showError(languageError, app.describeError(err));
    }
  }
  $("members-toggle").addEventListener("click", () => {
    if (!membersPanel.hidden && app.openConvId) loadLanguage();
  });
  language.addEventListener("change", async () => {
    const convId = languageConv;
    const wanted = language.value;
    showError(languageError, null);
    language.disabled = true;
    try {
      const answer = await app.api.setSearchLanguage(convId, wanted);
      if (languageConv !== convId) return;
      language.value = answer.language;
      language.dataset.saved = answer.language;
      // Hits already shown may now split words otherwise.
      if (shown) {
        shown = null;
        run();
      }
    } catch (err) {
      if (languageConv !== convId) return;
      language.value = language.dataset.saved ?? "simple";
      showError(languageError, app.describeError(err));
    } finally {
      if (languageConv === convId) language.disabled = false;
    }
  });

  return {
    // A conversation opened or closed: the filter follows it.
    opened: () => refreshScope(),
    // Logged out: no query, no hits.
    reset() {
      input.value = "";
      here.checked = false;
      languageConv = null;
      clear();
    },
    focus: focusBox,
  };
}
