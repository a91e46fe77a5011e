// The conversation list: every conversation of the sync feed, latest activity first, with its
// unread count, a badge of the unread messages that mention the reader, the last event as a
// preview, and the peer's presence for a direct chat.

import { $, el } from "./dom.js";
import { convName, describeEvent, directPeer, messageText } from "./format.js";

function activity(conv) {
  return conv.last_event?.created_at ?? "";
}

export function createListView(app) {
  const list = $("conv-list");
  const empty = $("conv-empty");

  function item(conv) {
    const me = app.session.user_id;
    const peer = directPeer(conv, me);
    const state = peer ? app.presence.status(peer) : null;
    const unread = Math.max(0, conv.unread ?? 0);
    const mentions = Math.max(0, conv.mentions ?? 0);
    const last = app.outbox.forConv(conv.conv_id).at(-1);
    const preview = last
      ? "you: " + messageText(last.body, last.attachments) + " (pending)"
      : describeEvent(conv.last_event, me);
    const button = el(
      "button",
      {
        type: "button",
        class: "conv-item",
        "aria-current": conv.conv_id === app.openConvId ? "true" : "false",
        onclick: () => app.open(conv.conv_id),
      },
      el(
        "span",
        { class: "conv-name" },
        peer ? el("span", { class: state?.online ? "dot online" : "dot", title: state?.online ? "online" : "offline" }) : null,
        convName(conv, me),
      ),
      el("span", { class: "conv-preview" }, preview),
      el(
        "span",
        { class: "badges" },
        el("span", {
          class: "mention-badge",
          hidden: mentions === 0,
          text: "@" + mentions,
          title: mentions === 1 ? "1 mention" : mentions + " mentions",
          "aria-label": mentions === 1 ? "1 mention" : mentions + " mentions",
        }),
        el("span", {
          class: "unread",
          hidden: unread === 0,
          text: String(unread),
          "aria-label": unread + " unread",
        }),
      ),
    );
    return el(
      "li",
      { data: { convId: conv.conv_id, unread: String(unread), mentions: String(mentions) } },
      button,
    );
  }

  return {
    render() {
      if (!app.session || !app.sync) return;
      const convs = [...app.sync.conversations.values()].sort((a, b) =>
        activity(b).localeCompare(activity(a)) || a.conv_id.localeCompare(b.conv_id),
      );
      const focused = document.activeElement?.closest?.("#conv-list li")?.dataset.convId;
      list.replaceChildren(...convs.map(item));
      empty.hidden = convs.length > 0 || !app.sync.feedLoaded;
      if (focused) {
        for (const li of list.children) {
          if (li.dataset.convId === focused) li.querySelector("button").focus();
        }
      }
    },
  };
}
