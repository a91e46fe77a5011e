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

// A byte count as a person reads it: 812 B, 48.2 KB, 3.1 MB (powers of 1024).
export function humanSize(bytes) {
  const n = Number(bytes);
  if (!Number.isFinite(n) || n < 0) return "";
  if (n < 1024) return n + " B";
  const units = ["KB", "MB", "GB", "TB"];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i += 1;
  }
  return (v >= 100 ? Math.round(v) : v.toFixed(1).replace(/\.0$/, "")) + " " + units[i];
}

// A short tag for a file's icon: its name's extension (up to 4 letters) or its kind.
export function fileTag(name = "", type = "") {
  const m = /\.([A-Za-z0-9]{1,4})$/.exec(name);
  if (m) return m[1].toUpperCase();
  const kinds = { image: "IMG", audio: "AUD", video: "VID", text: "TXT" };
  return kinds[type.split("/")[0]] ?? "FILE";
}

// What a message holds, in one line: its body, or its attachments when it has no text
// ("Image: plan.png", "File: notes.txt", "3 files").
export function messageText(body, attachments) {
  if (body) return body;
  const list = attachments ?? [];
  if (list.length === 0) return "";
  if (list.length > 1) return list.length + " files";
  const kinds = { image: "Image", audio: "Audio", video: "Video" };
  const kind = kinds[(list[0].content_type ?? "").split("/")[0]] ?? "File";
  return kind + ": " + (list[0].filename || "unnamed");
}

// One line about an event, for the list's preview and system lines.
export function describeEvent(e, me) {
  if (!e) return "";
  const who = (u) => (u === me ? "you" : u);
  switch (e.kind) {
    case "msg":
      if (e.recalled) return who(e.sender_user) + ": message recalled";
      return who(e.sender_user) + ": " + messageText(e.body, e.attachments);
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
    case "mls_application":
      return who(e.sender_user) + ": encrypted message (open it in an app with end-to-end encryption)";
    case "mls_proposal":
    case "mls_commit":
    case "mls_welcome":
      return who(e.sender_user) + " changed the encryption keys";
    default:
      return e.kind;
  }
}
