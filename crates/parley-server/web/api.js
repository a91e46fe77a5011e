// The HTTP API of SPEC §6 with the tab's device token. Every refusal becomes an ApiError with the
// server's stable code; a 401 on an authenticated call tells the app its session ended.
// Uploads (docs/MEDIA.md) go through XMLHttpRequest, the one browser API that reports how much
// of a request body has been sent.

export class ApiError extends Error {
  constructor(status, code, message, retryAfterS = null) {
    super(message);
    this.status = status;
    this.code = code;
    this.retryAfterS = retryAfterS;
  }
}

const enc = encodeURIComponent;
export const PRESENCE_USERS_MAX = 100;

export function createApi({ token, onUnauthenticated }) {
  async function call(method, path, body) {
    const headers = {};
    const bearer = token();
    if (bearer) headers.Authorization = "Bearer " + bearer;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    let res;
    try {
      res = await fetch(path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        cache: "no-store",
        credentials: "omit",
      });
    } catch {
      throw new ApiError(0, "NETWORK", "the server cannot be reached");
    }
    if (res.status === 204) return null;
    let data = null;
    try {
      data = await res.json();
    } catch {
      data = null;
    }
    if (!res.ok) {
      const err = refusal(res.status, data, res.statusText, res.headers.get("Retry-After"));
      if (res.status === 401 && bearer) onUnauthenticated(err);
      throw err;
    }
    return data;
  }

  // Sends `file`'s bytes to `POST /v1/media?filename=` (docs/MEDIA.md). `onProgress(sent)`
  // follows the body as it goes. Answers {promise, abort}: the promise gives the
  // server's description of the upload ({media_id, sha256, size, content_type, filename,
  // width?, height?, thumbnail}) or fails with an ApiError (code ABORTED after `abort()`).
  function upload(file, onProgress) {
    const xhr = new XMLHttpRequest();
    const promise = new Promise((resolve, reject) => {
      const bearer = token();
      xhr.open("POST", "/v1/media?filename=" + enc(file.name || "file"));
      if (bearer) xhr.setRequestHeader("Authorization", "Bearer " + bearer);
      // The server sniffs the type from the bytes; the declared one only makes it refuse a
      // file that claims to be an image and is not.
      if (file.type) xhr.setRequestHeader("Content-Type", file.type);
      xhr.upload.onprogress = (e) => onProgress?.(e.loaded);
      xhr.onload = () => {
        let data = null;
        try {
          data = JSON.parse(xhr.responseText);
        } catch {
          data = null;
        }
        if (xhr.status >= 200 && xhr.status < 300 && data?.media_id) {
          onProgress?.(file.size);
          resolve(data);
          return;
        }
        const err = refusal(xhr.status, data, xhr.statusText, xhr.getResponseHeader("Retry-After"));
        if (xhr.status === 401 && bearer) onUnauthenticated(err);
        reject(err);
      };
      xhr.onerror = () => reject(new ApiError(0, "NETWORK", "the server cannot be reached"));
      xhr.ontimeout = () => reject(new ApiError(0, "TIMEOUT", "the upload took too long"));
      xhr.onabort = () => reject(new ApiError(0, "ABORTED", "the upload was cancelled"));
      xhr.send(file);
    });
    return { promise, abort: () => xhr.abort() };
  }

  const conv = (id) => "/v1/conversations/" + enc(id);
  return {
    login: (user_id, password, device_id) =>
      call("POST", "/v1/auth/login", { user_id, password, device_id }),
    logout: () => call("POST", "/v1/auth/logout"),
    me: () => call("GET", "/v1/me"),
    feed: (since) =>
      call("GET", "/v1/conversations" + (since ? "?since=" + enc(since) : "")),
    conversation: (id) => call("GET", conv(id)),
    createConversation: (request) => call("POST", "/v1/conversations", request),
    // `params` holds `after` (with `epoch`), `before`, or neither for the newest page; with
    // `thread`, only that thread's root and replies.
    events: (id, params) => {
      const q = new URLSearchParams();
      for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined) q.set(k, v);
      return call("GET", conv(id) + "/events?" + q.toString());
    },
    // `fields`: the send's optional reply_to, thread_root, mentions and attachments (media ids).
    send: (id, client_msg_id, body, fields = {}) =>
      call("POST", conv(id) + "/messages", { client_msg_id, body, ...fields }),
    edit: (id, seq, client_msg_id, body) =>
      call("POST", conv(id) + "/events/" + seq + "/edit", { client_msg_id, body }),
    react: (id, seq, key) => call("PUT", conv(id) + "/events/" + seq + "/reactions/" + enc(key)),
    unreact: (id, seq, key) =>
      call("DELETE", conv(id) + "/events/" + seq + "/reactions/" + enc(key)),
    recall: (id, seq) => call("POST", conv(id) + "/events/" + seq + "/recall"),
    read: (id, seq) => call("POST", conv(id) + "/read", { seq }),
    addMember: (id, user_id) => call("POST", conv(id) + "/members", { user_id }),
    removeMember: (id, user_id) => call("DELETE", conv(id) + "/members/" + enc(user_id)),
    setRole: (id, user_id, role) => call("PUT", conv(id) + "/members/" + enc(user_id), { role }),
    // At most PRESENCE_USERS_MAX ids per call (the caller splits longer lists).
    presence: (users) => call("GET", "/v1/presence?users=" + users.map(enc).join(",")),
    upload,
    // Signed URLs of a media id, good for a few minutes without a header:
    // {url, thumbnail_url | null, expires_at}.
    mediaUrl: (mediaId) => call("POST", "/v1/media/" + enc(mediaId) + "/url"),
    // Web Push (docs/WEB.md, "Notifications"): the server's applicationServerKey
    // ({public_key}, base64url), this device's subscription (a PushSubscription's toJSON()),
    // the level of a conversation ("all" | "mentions" | "none") and the user's privacy mode.
    vapidKey: () => call("GET", "/v1/push/vapid"),
    pushSubscription: () => call("GET", "/v1/devices/me/push"),
    savePushSubscription: (subscription) => call("PUT", "/v1/devices/me/push", subscription),
    deletePushSubscription: () => call("DELETE", "/v1/devices/me/push"),
    notificationLevel: (id) => call("GET", conv(id) + "/notifications"),
    setNotificationLevel: (id, level) => call("PUT", conv(id) + "/notifications", { level }),
    notificationSettings: () => call("GET", "/v1/me/notifications"),
    setNotificationSettings: (settings) => call("PUT", "/v1/me/notifications", settings),
    // Message search (docs/SEARCH.md): `params` holds `q` and any of conv_id, from, limit,
    // cursor, order. Answers {hits: [{conv_id, seq, sender, sent_at, snippet, highlights,
    // cursor}], next_cursor?}. A conversation's search language is "simple" or "english".
    search: (params) => {
      const q = new URLSearchParams();
      for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined) q.set(k, v);
      return call("GET", "/v1/search?" + q.toString());
    },
    searchLanguage: (id) => call("GET", conv(id) + "/search"),
    setSearchLanguage: (id, language) => call("PUT", conv(id) + "/search", { language }),
  };
}

// An ApiError from a refusal's status and JSON body (`{error: {code, message}}`, or the code and
// message at the top level).
function refusal(status, data, statusText, retryAfter) {
  const code = data?.error?.code ?? data?.code ?? "HTTP_" + status;
  const message = data?.error?.message ?? data?.message ?? statusText;
  const retry = parseInt(retryAfter ?? "", 10);
  return new ApiError(status, code, message, Number.isFinite(retry) ? retry : null);
}

// A refusal as a person reads it.
export function describeError(err) {
  if (!err?.code) return String(err?.message ?? err);
  switch (err.code) {
    case "NETWORK": return "The server cannot be reached. Check your connection.";
    case "FORBIDDEN": return "Not allowed: " + err.message;
    case "NOT_MEMBER": return "You are not a member of that conversation.";
    case "NOT_FOUND": return "Not found: " + err.message;
    case "ALREADY_MEMBER": return "Already a member.";
    case "RECALL_WINDOW_EXPIRED": return "Too late to recall this message.";
    case "NOT_SENDER": return "Only the sender can change a message.";
    case "RECALLED": return "That message was recalled.";
    case "LIMIT_REACHED": return "That message has too many reactions already.";
    case "RATE_LIMITED":
      return "Too many requests; try again in " + (err.retryAfterS ?? 1) + " s.";
    case "SOCKET_DOWN": case "SOCKET_CLOSED": case "TIMEOUT":
      return "No answer from the server; try again.";
    case "MEDIA_TOO_LARGE": return "Too large: " + err.message;
    case "QUOTA_EXCEEDED": return "No room left for your files: " + err.message;
    case "MEDIA_TYPE_MISMATCH": return "Not an image the server reads: " + err.message;
    case "IMAGE_TOO_LARGE": return "The image is too large: " + err.message;
    case "UPLOAD_INCOMPLETE": return "The upload was cut off; try again.";
    case "REQUEST_TIMEOUT": return "The upload took too long; try again.";
    case "ABORTED": return "Cancelled.";
    default: return err.message || err.code;
  }
}
