// One message as the timeline and the thread panel draw it: sender, the quoted message it
// replies to, the body with its mentions, its attachments, "(edited)", reaction chips, the
// thread's reply count, and its actions (react, reply, reply in thread, edit, recall). A
// recalled message has none.
//
// Attachments (docs/MEDIA.md): a raster image is a preview (its thumbnail, or the image itself
// when it is small and has none) sized by its width and height before it loads, a link that
// opens the whole image in a new tab; audio is a player; anything else is a file card with a
// download link. All of them load through signed URLs (`ctx.media`, app.js).

import { el } from "./dom.js";
import { clock, fileTag, humanSize, messageText } from "./format.js";
import { QUICK_REACTIONS, splitMentions } from "./relations.js";

// The box an image preview fits in (never drawn larger than the image).
const PREVIEW_W = 320;
const PREVIEW_H = 240;
// An image without a thumbnail is previewed whole only up to this size; a larger one is a
// file card.
const PREVIEW_WHOLE_MAX = 2 * 1024 * 1024;

function previewable(a) {
  const type = a.content_type ?? "";
  return (
    type.startsWith("image/") &&
    type !== "image/svg+xml" &&
    a.width > 0 &&
    a.height > 0 &&
    (a.thumbnail === true || a.size <= PREVIEW_WHOLE_MAX)
  );
}

// Calls `show(url)` with the media's signed URL now if one is good, else once it comes;
// `failed()` when it cannot be had (the media is gone, or not visible).
function withUrl(media, id, show, failed) {
  const u = media.peek(id);
  if (u) show(u);
  else media.get(id).then(show, failed);
}

// A link to a signed URL: a click follows the newest good URL of the media; after the URL went
// stale it asks for a new one first, then `again(url)` does what the click would have done.
function freshOnClick(link, media, id, again) {
  link.addEventListener("click", (ev) => {
    const u = media.peek(id);
    if (u) {
      link.href = u.url;
      return;
    }
    ev.preventDefault();
    media.get(id).then(
      (fresh) => {
        link.href = fresh.url;
        again(fresh);
      },
      () => link.classList.add("unavailable"),
    );
  });
}

function imageAttachment(a, media) {
  const name = a.filename || "image";
  const scale = Math.min(1, PREVIEW_W / a.width, PREVIEW_H / a.height);
  const img = el("img", {
    alt: name,
    width: Math.max(1, Math.round(a.width * scale)),
    height: Math.max(1, Math.round(a.height * scale)),
    decoding: "async",
  });
  const link = el(
    "a",
    {
      class: "att-image",
      target: "_blank",
      rel: "noopener",
      title: name,
      "aria-label": `Open ${name} (${a.width}×${a.height}, ${humanSize(a.size)}) in a new tab`,
      data: { mediaId: a.media_id },
    },
    img,
  );
  const unavailable = () => link.classList.add("unavailable");
  const show = (u) => {
    img.src = u.thumbnailUrl ?? u.url;
    link.href = u.url;
  };
  // A URL that stopped working before the image loaded (it expired meanwhile) is asked for
  // once more.
  let renewed = false;
  img.addEventListener("error", () => {
    if (renewed || !img.getAttribute("src")) return unavailable();
    renewed = true;
    media.get(a.media_id, { renew: true }).then(show, unavailable);
  });
  freshOnClick(link, media, a.media_id, (u) => window.open(u.url, "_blank", "noopener"));
  withUrl(media, a.media_id, show, unavailable);
  return link;
}

function fileAttachment(a, media) {
  const name = a.filename || "file";
  const size = humanSize(a.size);
  const type = a.content_type ?? "";
  const download = el("a", {
    class: "att-download",
    download: name,
    text: "Download",
    "aria-label": `Download ${name} (${size})`,
  });
  const audio = type.startsWith("audio/")
    ? el("audio", { controls: true, preload: "metadata", "aria-label": "Play " + name })
    : null;
  const card = el(
    "div",
    { class: audio ? "att-file att-audio" : "att-file", data: { mediaId: a.media_id } },
    el("span", { class: "att-icon", "aria-hidden": "true" }, fileTag(name, type)),
    el(
      "span",
      { class: "att-info" },
      el("span", { class: "att-name", title: name }, name),
      el("span", { class: "att-size" }, size),
    ),
    download,
    audio,
  );
  freshOnClick(download, media, a.media_id, () => download.click());
  // A player reads its source in ranges as it plays; a range asked for after the URL expired
  // fails, and the player goes on from where it was with a new URL.
  let renewedAt = 0;
  audio?.addEventListener("error", () => {
    if (!audio.getAttribute("src") || Date.now() - renewedAt < 60_000) return;
    renewedAt = Date.now();
    const at = audio.currentTime;
    media.get(a.media_id, { renew: true }).then((u) => {
      audio.src = u.url;
      download.href = u.url;
      if (at > 0) audio.currentTime = at;
    }, () => card.classList.add("unavailable"));
  });
  withUrl(
    media,
    a.media_id,
    (u) => {
      download.href = u.url;
      if (audio) audio.src = u.url;
    },
    () => card.classList.add("unavailable"),
  );
  return card;
}

// The attachments of a message, or null. Each one's element is kept across redraws through
// `ctx.keep(key, make)` (when given), so a loaded image does not load again and a playing
// voice note goes on playing when the timeline is drawn again.
export function attachmentsNode(list, ctx, key) {
  if (!list?.length || !ctx.media) return null;
  const make = (a) =>
    previewable(a) ? imageAttachment(a, ctx.media) : fileAttachment(a, ctx.media);
  return el(
    "div",
    {
      class: "attachments",
      role: "group",
      "aria-label": list.length === 1 ? "1 attachment" : list.length + " attachments",
    },
    ...list.map((a, i) => {
      const k = key + ":att:" + i + ":" + a.media_id;
      return ctx.keep ? ctx.keep(k, () => make(a)) : make(a);
    }),
  );
}

// The body with each mention of a member in its own span; the reader's own stand out.
export function bodyNodes(body, mentioned, me) {
  const ids = new Set(mentioned ?? []);
  return splitMentions(body).map((part) => {
    if (typeof part === "string") return part;
    if (!ids.has(part.mention)) return part.text;
    return el("span", { class: part.mention === me ? "mention me" : "mention" }, part.text);
  });
}

// A one-line quote of the message at `seq` (undefined while unknown, null if not visible).
export function quoteNodes(target, me) {
  if (target === undefined) return [el("span", { class: "quote-body" }, "…")];
  if (target === null) return [el("span", { class: "quote-body" }, "original message unavailable")];
  const who = target.sender_user === me ? "you" : target.sender_user;
  return [
    el("span", { class: "quote-who" }, who),
    el(
      "span",
      { class: "quote-body" },
      target.recalled ? "message recalled" : messageText(target.body, target.attachments),
    ),
  ];
}

function action(label, text, cls, dataKey, onclick, extra = {}) {
  return el("button", {
    type: "button",
    class: "act " + cls,
    text,
    title: label,
    "aria-label": label,
    data: { key: dataKey },
    onclick,
    ...extra,
  });
}

// `ctx`: {me, recallWindowMs, inThread, pickerSeq, flashSeq, lookup(seq), and the handlers
// onReply, onThread, onEdit, onReact(e, key, remove), onRecall, onJump(seq), onPicker(e)}.
export function messageItem(e, ctx) {
  const { me } = ctx;
  const mine = e.sender_user === me;
  const seq = String(e.seq);
  const k = (name) => seq + ":" + name;
  const recallable =
    mine && !e.recalled && Date.now() < Date.parse(e.created_at) + ctx.recallWindowMs;
  const classes = ["msg"];
  if (mine) classes.push("mine");
  if (e.recalled) classes.push("recalled");
  if (!e.recalled && (e.mentions ?? []).includes(me)) classes.push("mentions-me");
  if (ctx.flashSeq === e.seq) classes.push("flash");

  const quote =
    e.reply_to != null
      ? el(
          "button",
          {
            type: "button",
            class: "quote",
            "aria-label": "Show the message this replies to",
            data: { key: k("quote"), replyTo: String(e.reply_to) },
            onclick: () => ctx.onJump(e.reply_to),
          },
          ...quoteNodes(ctx.lookup(e.reply_to), me),
        )
      : null;

  const reactions =
    !e.recalled && e.reactions?.length
      ? el(
          "div",
          { class: "reactions", role: "group", "aria-label": "Reactions" },
          ...e.reactions.map((r) =>
            el(
              "button",
              {
                type: "button",
                class: r.me ? "chip me" : "chip",
                "aria-pressed": r.me ? "true" : "false",
                "aria-label": `${r.key} ${r.count}` + (r.me ? ", yours; remove" : "; add yours"),
                data: { key: k("chip:" + r.key), reaction: r.key, count: String(r.count) },
                onclick: () => ctx.onReact(e, r.key, r.me),
              },
              el("span", { class: "chip-key" }, r.key),
              el("span", { class: "chip-count" }, String(r.count)),
            ),
          ),
        )
      : null;

  const replies = e.thread?.reply_count ?? 0;
  const threadLink =
    !ctx.inThread && replies > 0
      ? el("button", {
          type: "button",
          class: "thread-link",
          text: replies === 1 ? "1 reply" : replies + " replies",
          data: { key: k("thread-link") },
          onclick: () => ctx.onThread(e),
        })
      : null;

  const actions = e.recalled
    ? null
    : el(
        "div",
        { class: "actions", role: "toolbar", "aria-label": "Message actions" },
        action("Add a reaction", "☺+", "act-react", k("react"), () => ctx.onPicker(e), {
          "aria-expanded": ctx.pickerSeq === e.seq ? "true" : "false",
        }),
        ctx.inThread ? null : action("Reply", "Reply", "act-reply", k("reply"), () => ctx.onReply(e)),
        ctx.inThread || e.thread_root != null
          ? null
          : action("Reply in thread", "Thread", "act-thread", k("thread"), () => ctx.onThread(e)),
        mine ? action("Edit", "Edit", "act-edit", k("edit"), () => ctx.onEdit(e)) : null,
      );

  const picker =
    !e.recalled && ctx.pickerSeq === e.seq
      ? el(
          "div",
          { class: "picker", role: "group", "aria-label": "Pick a reaction" },
          ...QUICK_REACTIONS.map((key) => {
            const had = e.reactions?.find((r) => r.key === key && r.me);
            return el("button", {
              type: "button",
              class: had ? "pick me" : "pick",
              text: key,
              "aria-label": "React with " + key,
              data: { key: k("pick:" + key), reaction: key },
              onclick: () => ctx.onReact(e, key, !!had),
            });
          }),
        )
      : null;

  return el(
    "li",
    { class: classes.join(" "), data: { seq, clientMsgId: e.client_msg_id ?? "" } },
    actions,
    mine ? null : el("span", { class: "who" }, e.sender_user),
    quote,
    e.recalled || e.body || !e.attachments?.length
      ? el(
          "p",
          { class: "body" },
          ...(e.recalled ? ["message recalled"] : bodyNodes(e.body ?? "", e.mentions, me)),
        )
      : null,
    e.recalled ? null : attachmentsNode(e.attachments, ctx, seq),
    picker,
    reactions,
    threadLink,
    el(
      "span",
      { class: "meta" },
      el("time", { datetime: e.created_at }, clock(e.created_at)),
      e.edited_at && !e.recalled
        ? el("span", { class: "edited", title: "edited " + clock(e.edited_at) }, "(edited)")
        : null,
      recallable
        ? el("button", {
            type: "button",
            class: "quiet recall",
            text: "Recall",
            "aria-label": "Recall this message",
            data: { key: k("recall") },
            onclick: () => ctx.onRecall(e),
          })
        : null,
    ),
  );
}

// A message of one's own still on its way (or refused), from the outbox.
export function pendingItem(item, ctx) {
  const failed = !!item.failed;
  return el(
    "li",
    {
      class: failed ? "msg mine failed" : "msg mine pending",
      data: { clientMsgId: item.client_msg_id, pending: "true" },
    },
    item.reply_to != null
      ? el("span", { class: "quote" }, ...quoteNodes(ctx.lookup(item.reply_to), ctx.me))
      : null,
    item.body || !item.attachments?.length
      ? el("p", { class: "body" }, ...bodyNodes(item.body, ctx.mentionable(item), ctx.me))
      : null,
    attachmentsNode(item.attachments, ctx, "pending:" + item.client_msg_id),
    el(
      "span",
      { class: "meta" },
      el("span", { class: "state" }, failed ? "not sent: " + item.failed : "pending"),
      failed
        ? el("button", {
            type: "button",
            class: "quiet",
            text: "Discard",
            onclick: () => ctx.onDiscard(item),
          })
        : null,
    ),
  );
}

// Elements kept from one drawing of a list to the next: `keep(key, make)` answers the element
// drawn under `key` the last time (else `make()`), `drawn()` after each drawing forgets those
// not drawn in it, `clear()` forgets all.
export function createKeeper() {
  let before = new Map();
  let now = new Map();
  return {
    clear() {
      before = new Map();
      now = new Map();
    },
    keep(key, make) {
      const node = now.get(key) ?? before.get(key) ?? make();
      now.set(key, node);
      return node;
    },
    drawn() {
      before = now;
      now = new Map();
    },
  };
}

// Draws `items` into `list`, keeping the keyboard focus on the same control when it is drawn
// again (each control has a data-key).
export function replaceKeepingFocus(list, items) {
  const active = document.activeElement;
  const key = list.contains(active) ? active.dataset.key : null;
  list.replaceChildren(...items);
  if (key) list.querySelector(`[data-key="${CSS.escape(key)}"]`)?.focus();
}
