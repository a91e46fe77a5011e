// One message as the timeline and the thread panel draw it: sender, the quoted message it
// replies to, the body with its mentions, "(edited)", reaction chips, the thread's reply count,
// and its actions (react, reply, reply in thread, edit, recall). A recalled message has none.

import { el } from "./dom.js";
import { clock } from "./format.js";
import { QUICK_REACTIONS, splitMentions } from "./relations.js";

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
    el("span", { class: "quote-body" }, target.recalled ? "message recalled" : target.body ?? ""),
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
    el(
      "p",
      { class: "body" },
      ...(e.recalled ? ["message recalled"] : bodyNodes(e.body ?? "", e.mentions, me)),
    ),
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
    el("p", { class: "body" }, ...bodyNodes(item.body, ctx.mentionable(item), ctx.me)),
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

// Draws `items` into `list`, keeping the keyboard focus on the same control when it is drawn
// again (each control has a data-key).
export function replaceKeepingFocus(list, items) {
  const active = document.activeElement;
  const key = list.contains(active) ? active.dataset.key : null;
  list.replaceChildren(...items);
  if (key) list.querySelector(`[data-key="${CSS.escape(key)}"]`)?.focus();
}
