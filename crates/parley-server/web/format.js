// How ids, times and events read on screen.

const DIRECT_PREFIX = "dm:";

// The other member of a direct chat, from its id `dm:<a>:<b>`; null for a group.
export function directPeer(conv, me) {
  if (conv.kind !== "direct" || !conv.conv_id.startsWith(DIRECT_PREFIX)) return null;
  const [a, b] = conv.conv_id.slice(DIRECT_PREFIX.length).split(":");
  return a === me ? b : a;
}

export function convName(conv, me) {
  return directPeer(conv, me) ?? (conv.title || conv.conv_id);
}

export function clock(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return "";
  const now = new Date();
  const sameDay = d.toDateString() === now.toDateString();
  return sameDay
    ? d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })
    : d.toLocaleDateString([], { month: "short", day: "numeric" }) + " " +
        d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
}

export function lastSeen(state) {
  if (!state) return "";
  if (state.online) return "online";
  return state.last_seen ? "last seen " + clock(state.last_seen) : "offline";
}

// One line about an event, for the list's preview and system lines.
export function describeEvent(e, me) {
  if (!e) return "";
  const who = (u) => (u === me ? "you" : u);
  switch (e.kind) {
    case "msg":
      if (e.recalled) return who(e.sender_user) + ": message recalled";
      return who(e.sender_user) + ": " + (e.body ?? "");
    case "recall":
      return who(e.sender_user) + " recalled a message";
    case "edit":
      return who(e.sender_user) + " edited a message";
    case "react":
      return who(e.sender_user) + " reacted " + (e.key ?? "");
    case "unreact":
      return who(e.sender_user) + " took back a reaction";
    case "join":
      return e.sender_user && e.sender_user !== e.subject_user
        ? who(e.sender_user) + " added " + who(e.subject_user)
        : who(e.subject_user) + " joined";
    case "leave":
      return e.sender_user && e.sender_user !== e.subject_user
        ? who(e.sender_user) + " removed " + who(e.subject_user)
        : who(e.subject_user) + " left";
    default:
      return e.kind;
  }
}
