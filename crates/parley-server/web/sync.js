// What the tab knows of the server's logs: the conversation list kept by the sync feed (SPEC §5)
// and a timeline per opened conversation, kept gapless by (epoch, cursor) as SPEC §7 says:
// pushes are deduplicated by (conv_id, seq), a push beyond cursor + 1 fetches the gap with
// `after=`, and EPOCH_CHANGED or a truncated answer starts the timeline afresh.

import { ApiError } from "./api.js";
import { applyRelation, foldedThrough } from "./relations.js";

const PAGE_LEN = 50;
const CATCH_UP_PAGE_LEN = 200;
const FEED_DEBOUNCE_MS = 80;

export class Timeline {
  constructor(convId) {
    this.convId = convId;
    this.epoch = null;
    this.cursor = 0;
    this.head = 0;
    this.events = new Map();
    this.nextBefore = null;
    this.loaded = false;
    this.loadingOlder = false;
    this.chain = Promise.resolve();
  }

  // Runs `work` after every earlier piece of work on this timeline, so a push never races a
  // page that is being loaded.
  run(work) {
    const done = this.chain.then(work, work);
    this.chain = done.catch(() => {});
    return done;
  }

  ordered() {
    return [...this.events.values()].sort((a, b) => a.seq - b.seq);
  }
}

export class Sync {
  // `me`: {user_id, device_id}; `changed(what, convId)` after every change worth drawing;
  // `seen(event)` for every msg event that reaches a timeline (the outbox confirms by it).
  constructor(api, me, { changed, seen }) {
    this.api = api;
    this.me = me;
    this.changed = changed;
    this.seen = seen;
    this.conversations = new Map();
    this.syncToken = null;
    this.timelines = new Map();
    this.feedRunning = null;
    this.feedAgain = false;
    this.feedTimer = null;
    this.feedLoaded = false;
    // Other sets of messages kept folded beside the timelines: an open thread, quoted
    // messages (see addView).
    this.views = new Set();
    this.quotes = new Map();
    this.quoting = new Set();
  }

  // One feed call: the conversations that changed since the token (SPEC §5). Calls made while
  // one runs are folded into one more call after it.
  refreshFeed() {
    if (this.feedRunning) {
      this.feedAgain = true;
      return this.feedRunning;
    }
    this.feedRunning = (async () => {
      try {
        do {
          this.feedAgain = false;
          const answer = await this.api.feed(this.syncToken);
          for (const c of answer.conversations) {
            const known = this.conversations.get(c.conv_id);
            this.conversations.set(c.conv_id, { ...known, ...c, members: c.members ?? known?.members });
          }
          this.syncToken = answer.sync_token;
          this.feedLoaded = true;
          this.changed("list");
        } while (this.feedAgain);
      } catch (e) {
        // A token the server no longer takes: start the list again.
        if (e instanceof ApiError && e.code === "BAD_REQUEST") this.syncToken = null;
        throw e;
      } finally {
        this.feedRunning = null;
      }
    })();
    return this.feedRunning;
  }

  scheduleFeed() {
    clearTimeout(this.feedTimer);
    this.feedTimer = setTimeout(() => this.refreshFeed().catch(() => {}), FEED_DEBOUNCE_MS);
  }

  timeline(convId) {
    let tl = this.timelines.get(convId);
    if (!tl) {
      tl = new Timeline(convId);
      this.timelines.set(convId, tl);
    }
    return tl;
  }

  // Takes events into a timeline in seq order. `asOf` is the head of the page they came in
  // (their folded state is as of it); a pushed message is as of its own seq. Every event is
  // also applied to the views of the conversation (relations.js).
  ingest(tl, events, asOf = null) {
    const me = this.me.user_id;
    foldedThrough(events, asOf);
    for (const e of events) {
      applyRelation(tl.events, e, me);
      const had = tl.events.get(e.seq);
      // A recall that reached us first already erased the body; keep that.
      if (had?.recalled && e.kind === "msg") {
        e.recalled = true;
        delete e.body;
        delete e.attachments;
      }
      // A message held folded as of a later moment stays.
      if (!(had && e.kind === "msg" && (had.asOf ?? 0) > (e.asOf ?? 0))) tl.events.set(e.seq, e);
      for (const view of this.views) {
        if (view.convId !== tl.convId) continue;
        if (e.kind === "msg" && view.accepts(e) && !view.events.has(e.seq)) {
          view.events.set(e.seq, structuredClone(e));
        }
        applyRelation(view.events, e, me);
      }
      if (e.kind === "msg") this.seen(e);
    }
  }

  // A set of messages of `convId` kept folded by every event the timeline takes in:
  // `{convId, events: Map(seq -> message), accepts(msg)}`; `accepts` says which new messages
  // join it. Answers a function that removes it.
  addView(view) {
    this.views.add(view);
    return () => this.views.delete(view);
  }

  // Takes a page read outside the timeline (a thread, a quoted message) into `view`, in the
  // timeline's order of work so no event falls between the read and the pushes after it.
  loadInto(view, params) {
    const tl = this.timeline(view.convId);
    return tl.run(async () => {
      const page = await this.api.events(view.convId, params);
      const events = [...page.events].sort((a, b) => a.seq - b.seq);
      foldedThrough(events, page.head);
      for (const e of events) {
        const had = view.events.get(e.seq);
        if (e.kind === "msg" && !(had && (had.asOf ?? 0) > e.asOf)) view.events.set(e.seq, e);
      }
      return page;
    });
  }

  // The message at `seq` of a conversation, from whatever holds it: undefined while unknown
  // (it is then fetched, and the timeline redrawn), null when the reader cannot see it.
  lookup(convId, seq) {
    const held = this.timelines.get(convId)?.events.get(seq);
    if (held) return held;
    for (const view of this.views) {
      if (view.convId === convId && view.events.has(seq)) return view.events.get(seq);
    }
    const quotes = this.quoteView(convId);
    if (quotes.events.has(seq)) return quotes.events.get(seq);
    const key = convId + "\n" + seq;
    if (!this.quoting.has(key)) {
      this.quoting.add(key);
      this.loadInto(quotes, { before: seq + 1, limit: 1 })
        .then(() => {
          if (!quotes.events.has(seq)) quotes.events.set(seq, null);
          this.changed("timeline", convId);
        })
        .catch(() => {})
        .finally(() => this.quoting.delete(key));
    }
    return undefined;
  }

  quoteView(convId) {
    let view = this.quotes.get(convId);
    if (!view) {
      view = { convId, events: new Map(), accepts: () => false };
      this.quotes.set(convId, view);
      this.views.add(view);
    }
    return view;
  }

  // The newest page: the timeline starts afresh from the log's head.
  loadNewest(convId) {
    const tl = this.timeline(convId);
    return tl.run(async () => {
      const page = await this.api.events(convId, { limit: PAGE_LEN });
      tl.events = new Map();
      tl.epoch = page.epoch;
      tl.head = page.head;
      tl.cursor = page.through_seq;
      tl.nextBefore = page.next_before;
      this.ingest(tl, [...page.events].reverse(), page.head);
      tl.loaded = true;
      this.changed("timeline", convId);
    });
  }

  // The page before the oldest event held (scrolling up); a jump far back asks for `limit`
  // events at once when that is more than a page.
  loadOlder(convId, limit = PAGE_LEN) {
    const tl = this.timeline(convId);
    if (!tl.loaded || tl.nextBefore === null || tl.loadingOlder) return Promise.resolve(false);
    tl.loadingOlder = true;
    return tl
      .run(async () => {
        if (tl.nextBefore === null) return false;
        const page = await this.api.events(convId, {
          before: tl.nextBefore,
          limit: Math.max(PAGE_LEN, limit),
        });
        if (page.epoch !== tl.epoch) return this.reset(tl), false;
        tl.nextBefore = page.next_before;
        this.ingest(tl, [...page.events].reverse(), page.head);
        this.changed("older", convId);
        return true;
      })
      .finally(() => {
        tl.loadingOlder = false;
      });
  }

  // Events after the cursor, page after page until the head (a gap, a hint, a reconnect).
  catchUp(convId) {
    const tl = this.timelines.get(convId);
    if (!tl) return Promise.resolve();
    return tl.run(() => this.catchUpNow(tl));
  }

  async catchUpNow(tl) {
    if (!tl.loaded) return;
    for (;;) {
      let page;
      try {
        page = await this.api.events(tl.convId, {
          after: tl.cursor,
          epoch: tl.epoch,
          limit: CATCH_UP_PAGE_LEN,
        });
      } catch (e) {
        if (e instanceof ApiError && e.code === "EPOCH_CHANGED") return this.reset(tl);
        throw e;
      }
      if (page.truncated) return this.reset(tl);
      this.ingest(tl, page.events, page.head);
      tl.cursor = Math.max(tl.cursor, page.through_seq);
      tl.head = page.head;
      this.changed("timeline", tl.convId);
      if (tl.cursor >= page.head || page.events.length === 0) return;
    }
  }

  // EPOCH_CHANGED: every cursor of the conversation is void; load it again from its head.
  reset(tl) {
    tl.loaded = false;
    tl.events = new Map();
    this.changed("timeline", tl.convId);
    setTimeout(() => this.loadNewest(tl.convId).catch(() => {}), 0);
  }

  // A pushed event: appended when it is the next seq, dropped when already held, and a gap
  // fetched when it lies beyond cursor + 1.
  onEvent(e) {
    this.scheduleFeed();
    const tl = this.timelines.get(e.conv_id);
    if (!tl) return;
    tl.run(async () => {
      if (!tl.loaded) return;
      // At or below the cursor: a duplicate (ack and push, or a page and a push), or a seq
      // this reader does not see; either way already accounted for.
      if (e.seq <= tl.cursor) return;
      if (e.seq === tl.cursor + 1) {
        this.ingest(tl, [e]);
        tl.cursor = e.seq;
        tl.head = Math.max(tl.head, e.seq);
        this.changed("timeline", tl.convId);
        return;
      }
      await this.catchUpNow(tl);
    }).catch(() => {});
  }

  onHint(convId) {
    this.scheduleFeed();
    this.catchUp(convId).catch(() => {});
  }

  onRead(convId, readSeq) {
    const c = this.conversations.get(convId);
    if (c && readSeq > c.read_seq) {
      c.read_seq = readSeq;
      this.changed("list");
    }
    this.scheduleFeed();
  }

  // After a reconnect: the feed since the token, then events after each open cursor.
  async resync() {
    await this.refreshFeed();
    await Promise.all([...this.timelines.values()].map((tl) => this.catchUp(tl.convId)));
  }

  forget(convId) {
    this.timelines.delete(convId);
  }
}
