// The "New chat" (direct, by user id) and "New group" (title and members) dialogs.

import { $, showError } from "./dom.js";

export function createDialogs(app) {
  function wire(dialogId, formId, errorId, opener, create) {
    const dialog = $(dialogId);
    const form = $(formId);
    const error = $(errorId);
    $(opener).addEventListener("click", () => {
      form.reset();
      showError(error, null);
      dialog.showModal();
    });
    for (const b of dialog.querySelectorAll("[data-close]")) {
      b.addEventListener("click", () => dialog.close());
    }
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      showError(error, null);
      try {
        const conv = await create();
        if (!conv) return;
        dialog.close();
        await app.sync.refreshFeed().catch(() => {});
        app.open(conv.conv_id);
      } catch (err) {
        showError(error, app.describeError(err));
      }
    });
  }

  wire("direct-dialog", "direct-form", "direct-error", "new-direct", async () => {
    const user = $("direct-user").value.trim();
    if (!user) {
      showError($("direct-error"), "Enter a user id.");
      return null;
    }
    return app.api.createConversation({ kind: "direct", members: [user] });
  });

  wire("group-dialog", "group-form", "group-error", "new-group", async () => {
    const title = $("group-title").value.trim();
    const members = $("group-members")
      .value.split(/[\s,]+/)
      .map((m) => m.trim())
      .filter(Boolean);
    const request = { kind: "group", members };
    if (title) request.title = title;
    return app.api.createConversation(request);
  });
}
