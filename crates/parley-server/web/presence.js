// Ephemeral state from the server: who is typing where (expiring after the frame's
// expires_ms) and who is online (GET /v1/presence, then `presence` frames).

import { PRESENCE_USERS_MAX } from "./api.js";

const TYPING_DEFAULT_MS = 5000;

export class Presence {
  constructor(api, changed) {
    this.api = api;
    this.changed = changed;
    this.typing = new Map();
    this.users = new Map();
  }

  onTyping(frame) {
    let convTypers = this.typing.get(frame.conv_id);
    if (!convTypers) this.typing.set(frame.conv_id, (convTypers = new Map()));
    clearTimeout(convTypers.get(frame.user_id));
    const ms = Number(frame.expires_ms) > 0 ? Number(frame.expires_ms) : TYPING_DEFAULT_MS;
    convTypers.set(frame.user_id, setTimeout(() => this.stopTyping(frame.conv_id, frame.user_id), ms));
    this.changed("typing", frame.conv_id);
  }

  // A message from a typer ends their typing at once.
  stopTyping(convId, userId) {
    const convTypers = this.typing.get(convId);
    if (!convTypers?.has(userId)) return;
    clearTimeout(convTypers.get(userId));
    convTypers.delete(userId);
    this.changed("typing", convId);
  }

  typers(convId) {
    return [...(this.typing.get(convId)?.keys() ?? [])];
  }

  onPresence(frame) {
    this.users.set(frame.user_id, { online: !!frame.online, last_seen: frame.last_seen ?? null });
    this.changed("presence");
  }

  // Asks for the users' state; a server without presence answers 404, which leaves it unknown.
  async fetch(userIds) {
    const ids = [...new Set(userIds)].filter(Boolean);
    if (ids.length === 0) return;
    for (let i = 0; i < ids.length; i += PRESENCE_USERS_MAX) {
      try {
        const answer = await this.api.presence(ids.slice(i, i + PRESENCE_USERS_MAX));
        for (const p of answer.presence ?? []) this.onPresence(p);
      } catch {
        // unknown stays unknown
      }
    }
  }

  status(userId) {
    return this.users.get(userId) ?? null;
  }
}
