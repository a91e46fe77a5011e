// Replies, edits, reactions, threads and mentions (docs/RELATIONS.md) as the tab keeps them.
//
// The server folds a message's edits, reactions and thread summary into every read, as of the
// moment of the read. Each message the tab holds remembers that moment as `asOf` (the head of
// the page it came in, or its own seq when it was pushed): an `edit`, `react`, `unreact`,
// `recall` or thread reply with a seq at or below it is already inside the message and is not
// applied again; one above it is applied here. Events reach a timeline gaplessly and in seq
// order, so everything between `asOf` and the newest event held has been applied exactly once.

// The reactions the picker offers.
export const QUICK_REACTIONS = ["👍", "❤️", "😂", "🎉", "😮", "😢", "👀", "🙏"];

// Marks the messages of a page (or a pushed message) as folded through `asOf`.
export function foldedThrough(events, asOf) {
  for (const e of events) {
    if (e.kind === "msg") e.asOf = Math.max(asOf ?? e.seq, e.seq);
  }
}

// Applies one event of the log to the messages of `map` (seq -> message) that it changes:
// an edit's body, a reaction's count, a recall's erasure (body, reactions, attachments), a
// thread reply's count on its root.
// `me` is the reader's user id (for a reaction's `me`).
export function applyRelation(map, e, me) {
  const target = e.target_seq != null ? map.get(e.target_seq) : undefined;
  const fresh = (m) => m && e.seq > (m.asOf ?? 0);
  switch (e.kind) {
    case "msg": {
      if (e.thread_root == null) return;
      const root = map.get(e.thread_root);
      if (!fresh(root)) return;
      const t = root.thread ?? { reply_count: 0, latest_seq: 0 };
      root.thread = { reply_count: t.reply_count + 1, latest_seq: Math.max(t.latest_seq, e.seq) };
      return;
    }
    case "edit":
      if (!fresh(target) || target.recalled || typeof e.body !== "string") return;
      target.body = e.body;
      target.edited_at = e.created_at;
      return;
    case "react":
    case "unreact": {
      if (!fresh(target) || target.recalled || !e.key) return;
      const list = (target.reactions ?? []).map((r) => ({ ...r }));
      let r = list.find((x) => x.key === e.key);
      if (e.kind === "react") {
        if (!r) list.push((r = { key: e.key, count: 0, me: false }));
        r.count += 1;
        if (e.sender_user === me) r.me = true;
      } else if (r) {
        r.count -= 1;
        if (e.sender_user === me) r.me = false;
      }
      target.reactions = list.filter((x) => x.count > 0);
      return;
    }
    case "recall": {
      if (!target) return;
      if (!target.recalled && target.thread_root != null) {
        const root = map.get(target.thread_root);
        if (fresh(root) && root.thread) {
          root.thread = { ...root.thread, reply_count: Math.max(0, root.thread.reply_count - 1) };
        }
      }
      delete target.body;
      delete target.reactions;
      delete target.attachments;
      target.recalled = true;
      return;
    }
    default:
      return;
  }
}

// The `@user` words of a body as the server reads them: `@` at the start of a word, then the
// characters of a user id (letters, digits, `. _ -`); a trailing `.` or `-` ends the sentence,
// not the id; an `@` inside a word (an e-mail address) mentions nobody. Answers the pieces of
// the body in order: strings, and {mention: id, text} for each such word.
export function splitMentions(body) {
  const parts = [];
  const isId = (c) => /[A-Za-z0-9._@-]/.test(c);
  let plain = "";
  let i = 0;
  while (i < body.length) {
    const startsWord = i === 0 || !isId(body[i - 1]);
    if (body[i] === "@" && startsWord) {
      let end = i + 1;
      while (end < body.length && isId(body[end]) && body[end] !== "@") end += 1;
      let id = body.slice(i + 1, end);
      while (id.endsWith(".") || id.endsWith("-")) id = id.slice(0, -1);
      if (id) {
        if (plain) parts.push(plain);
        plain = "";
        parts.push({ mention: id, text: "@" + id });
        i += 1 + id.length;
        continue;
      }
    }
    plain += body[i];
    i += 1;
  }
  if (plain) parts.push(plain);
  return parts;
}

// The user ids a body mentions, in order, without repeats.
export function mentionsIn(body) {
  const ids = [];
  for (const p of splitMentions(body)) if (p.mention && !ids.includes(p.mention)) ids.push(p.mention);
  return ids;
}
