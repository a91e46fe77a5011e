// The open conversation's members: presence, roles, adding, removing, changing a role, and
// leaving. Controls are shown to everyone; the server refuses what the caller's role does not
// allow, and the refusal is shown as a sentence.

import { $, el, showError } from "./dom.js";
import { lastSeen } from "./format.js";

export function createMembersPanel(app) {
  const panel = $("members-panel");
  const toggle = $("members-toggle");
  const list = $("member-list");
  const addForm = $("add-member-form");
  const addInput = $("add-member-id");
  const error = $("members-error");

  const convId = () => app.openConvId;

  async function act(work) {
    showError(error, null);
    try {
      await work();
      await load();
      app.sync.refreshFeed().catch(() => {});
    } catch (e) {
      showError(error, app.describeError(e));
    }
  }

  function row(member) {
    const me = app.session.user_id;
    const state = app.presence.status(member.user_id);
    const self = member.user_id === me;
    const role = el(
      "select",
      { "aria-label": "Role of " + member.user_id },
      ...["admin", "member"].map((r) =>
        el("option", { value: r, selected: member.role === r }, r),
      ),
    );
    return el(
      "li",
      { data: { userId: member.user_id } },
      el("span", { class: state?.online ? "dot online" : "dot" }),
      el(
        "span",
        { class: "member-name" },
        member.user_id + (self ? " (you)" : "") + " · " + member.role,
        state ? " · " + lastSeen(state) : "",
      ),
      self || member.role === "owner"
        ? null
        : [
            role,
            el("button", {
              type: "button",
              class: "quiet",
              text: "Set role",
              onclick: () =>
                act(() => app.api.setRole(convId(), member.user_id, role.value)),
            }),
            el("button", {
              type: "button",
              class: "danger",
              text: "Remove",
              "aria-label": "Remove " + member.user_id,
              onclick: () => act(() => app.api.removeMember(convId(), member.user_id)),
            }),
          ],
    );
  }

  // Drawn again only when a member, a role or a presence changed, so a role being chosen in a
  // select is not reset by an unrelated refresh.
  let drawn = null;
  function render() {
    const c = app.sync.conversations.get(convId());
    const members = c?.members ?? [];
    const signature = JSON.stringify(
      members.map((m) => [m.user_id, m.role, app.presence.status(m.user_id)]),
    );
    if (signature === drawn) return;
    drawn = signature;
    list.replaceChildren(...members.map(row));
  }

  async function load() {
    const id = convId();
    if (!id) return;
    const c = await app.api.conversation(id);
    const known = app.sync.conversations.get(id);
    app.sync.conversations.set(id, { ...known, ...c });
    if (id === convId()) render();
  }

  function setOpen(open) {
    panel.hidden = !open;
    toggle.setAttribute("aria-expanded", String(open));
    if (open) {
      showError(error, null);
      drawn = null;
      render();
      load().catch((e) => showError(error, app.describeError(e)));
    }
  }

  toggle.addEventListener("click", () => setOpen(panel.hidden));
  addForm.addEventListener("submit", (e) => {
    e.preventDefault();
    const user = addInput.value.trim();
    if (!user) return;
    act(async () => {
      await app.api.addMember(convId(), user);
      addInput.value = "";
    });
  });
  $("leave").addEventListener("click", async () => {
    const id = convId();
    showError(error, null);
    try {
      await app.api.removeMember(id, app.session.user_id);
      app.closeConversation();
      app.sync.refreshFeed().catch(() => {});
    } catch (e) {
      showError(error, app.describeError(e));
    }
  });

  return {
    close: () => setOpen(false),
    refresh: () => {
      if (!panel.hidden) render();
    },
  };
}
