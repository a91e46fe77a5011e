//! The device client: every device endpoint of SPEC §6, authenticated by one device token.

use std::sync::Arc;

use reqwest::Method;
use serde_json::Value;
use tokio::sync::OnceCell;
use url::Url;

use crate::error::ClientError;
use crate::http::{ClientOptions, Http};
use crate::raw::RawRequest;
use crate::request::{
    EditBody, Login, NewConversation, ReadBody, RoleBody, SendBody, SendOptions, UserRef,
};
use crate::retry::RetryPolicy;
use crate::types::{
    Conversation, ConversationList, DeviceToken, EditAck, EventsPage, Identity, MembershipSeq,
    PresenceList, ReactionAck, ReadAck, RecallAck, Role, RoleChange, SendAck, UserPresence,
};

const CONVERSATIONS: &str = "conversations";

/// Where a thread page ([`Client::thread`]) starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThreadCursor {
    /// Ascending, the thread's events with `seq > after` (0: from the root).
    After(i64),
    /// Descending, those with `seq < before`; the newest page when `None`.
    Before(Option<i64>),
}

/// A client acting as one device. Cloning is cheap and shares the connection pool.
#[derive(Debug, Clone)]
pub struct Client {
    http: Http,
    retry: RetryPolicy,
    /// The token's user and device, asked once ([`Client::whoami`]) and shared by clones.
    identity: Arc<OnceCell<Identity>>,
}

impl Client {
    /// A client of the server at `base_url` (e.g. `http://127.0.0.1:8080`) with a device token.
    pub fn new(base_url: &str, token: &str) -> Result<Self, ClientError> {
        Self::with_options(base_url, token, ClientOptions::default())
    }

    pub fn with_options(
        base_url: &str,
        token: &str,
        options: ClientOptions,
    ) -> Result<Self, ClientError> {
        Ok(Self {
            http: Http::new(base_url, token, &options)?,
            retry: options.retry,
            identity: Arc::default(),
        })
    }

    pub(crate) fn from_http(http: Http) -> Self {
        Self {
            http,
            retry: RetryPolicy::default(),
            identity: Arc::default(),
        }
    }

    /// The same server and connection pool, acting as another device.
    pub fn with_token(&self, token: &str) -> Self {
        Self {
            http: self.http.with_token(token),
            retry: self.retry,
            identity: Arc::default(),
        }
    }

    /// The same device, connection pool and retry policy, speaking to the server at
    /// `base_url`: another gateway of the same deployment. The identity learnt by
    /// [`Client::whoami`] is shared, since the token is the same. A realtime session given
    /// several gateways ([`crate::RealtimeOptions::gateways`]) makes its HTTP calls through
    /// such a client for the gateway its socket is on.
    pub fn with_base_url(&self, base_url: &str) -> Result<Self, ClientError> {
        Ok(Self {
            http: self.http.with_base_url(base_url)?,
            retry: self.retry,
            identity: self.identity.clone(),
        })
    }

    /// The same client with another retry policy for [`Client::send_with_retry`].
    pub fn with_retry_policy(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    pub(crate) fn http(&self) -> &Http {
        &self.http
    }

    pub fn base_url(&self) -> &Url {
        self.http.base_url()
    }

    pub fn token(&self) -> &str {
        self.http.token()
    }

    pub fn retry_policy(&self) -> RetryPolicy {
        self.retry
    }

    /// Logs in with a password (`POST /v1/auth/login`) and answers a client for the new device
    /// token, and the token itself, which the server shows only this once. Without
    /// `device_id` the server names a fresh device. A wrong password and an unknown user are
    /// both `401 UNAUTHENTICATED`; too many failures are `429 RATE_LIMITED`.
    pub async fn login(
        base_url: &str,
        user_id: &str,
        password: &str,
        device_id: Option<&str>,
    ) -> Result<(Self, DeviceToken), ClientError> {
        let http = Http::new(base_url, "", &ClientOptions::default())?;
        let url = http.url(&["v1", "auth", "login"])?;
        let request = http.bare(Method::POST, url).json(&Login {
            user_id,
            password,
            device_id,
        });
        let issued: DeviceToken = http.json(request).await?;
        Ok((Self::from_http(http.with_token(&issued.token)), issued))
    }

    /// Revokes this client's own token (`POST /v1/auth/logout`); later calls answer 401.
    pub async fn logout(&self) -> Result<(), ClientError> {
        let url = self.http.url(&["v1", "auth", "logout"])?;
        self.http.ok(self.http.authorised(Method::POST, url)).await
    }

    /// The user and device this client's token belongs to (`GET /v1/me`). Asked once; later
    /// calls, on this client or its clones, answer from memory.
    pub async fn whoami(&self) -> Result<Identity, ClientError> {
        let identity = self
            .identity
            .get_or_try_init(|| async {
                let url = self.http.url(&["v1", "me"])?;
                self.http.json(self.http.authorised(Method::GET, url)).await
            })
            .await?;
        Ok(identity.clone())
    }

    /// `GET /v1/presence`: whether each of `users` (1 to 100) is online and when they were last
    /// seen. Users who share no conversation with the caller, and unknown users, are absent.
    pub async fn presence(&self, users: &[&str]) -> Result<Vec<UserPresence>, ClientError> {
        let mut url = self.http.url(&["v1", "presence"])?;
        url.query_pairs_mut().append_pair("users", &users.join(","));
        let list: PresenceList = self
            .http
            .json(self.http.authorised(Method::GET, url))
            .await?;
        Ok(list.presence)
    }

    /// A request outside the typed API, carrying this device's token unless told otherwise.
    pub fn raw(&self, method: Method, path_and_query: &str) -> RawRequest {
        RawRequest::new(&self.http, method, path_and_query)
    }

    pub(crate) fn conv_url(&self, conv_id: &str, rest: &[&str]) -> Result<Url, ClientError> {
        let mut segments = vec!["v1", CONVERSATIONS, conv_id];
        segments.extend_from_slice(rest);
        self.http.url(&segments)
    }

    /// Creates a conversation; for a direct chat that exists, returns it unchanged.
    pub async fn create_conversation(
        &self,
        request: &NewConversation,
    ) -> Result<Conversation, ClientError> {
        let url = self.http.url(&["v1", CONVERSATIONS])?;
        let request = self.http.authorised(Method::POST, url).json(request);
        self.http.json(request).await
    }

    /// Conversations that changed since `since` (every conversation of the user when `None`).
    pub async fn list_conversations(
        &self,
        since: Option<&str>,
    ) -> Result<ConversationList, ClientError> {
        let mut url = self.http.url(&["v1", CONVERSATIONS])?;
        if let Some(token) = since {
            url.query_pairs_mut().append_pair("since", token);
        }
        self.http.json(self.http.authorised(Method::GET, url)).await
    }

    pub async fn get_conversation(&self, conv_id: &str) -> Result<Conversation, ClientError> {
        let url = self.conv_url(conv_id, &[])?;
        self.http.json(self.http.authorised(Method::GET, url)).await
    }

    /// Adds `user_id`; answers the seq of the `join` event.
    pub async fn add_member(
        &self,
        conv_id: &str,
        user_id: &str,
    ) -> Result<MembershipSeq, ClientError> {
        let url = self.conv_url(conv_id, &["members"])?;
        let request = self
            .http
            .authorised(Method::POST, url)
            .json(&UserRef { user_id });
        self.http.json(request).await
    }

    /// Removes `user_id`, or leaves when it is the caller; answers the seq of the `leave` event.
    pub async fn remove_member(
        &self,
        conv_id: &str,
        user_id: &str,
    ) -> Result<MembershipSeq, ClientError> {
        let url = self.conv_url(conv_id, &["members", user_id])?;
        self.http
            .json(self.http.authorised(Method::DELETE, url))
            .await
    }

    /// Gives `user_id` a role; only the owner may.
    pub async fn set_role(
        &self,
        conv_id: &str,
        user_id: &str,
        role: Role,
    ) -> Result<RoleChange, ClientError> {
        let url = self.conv_url(conv_id, &["members", user_id])?;
        let request = self
            .http
            .authorised(Method::PUT, url)
            .json(&RoleBody { role });
        self.http.json(request).await
    }

    /// One send attempt. An error for which [`ClientError::is_retryable`] holds leaves the
    /// outcome unknown: resend with the same `client_msg_id` to learn it.
    pub async fn send(
        &self,
        conv_id: &str,
        client_msg_id: &str,
        body: &str,
    ) -> Result<SendAck, ClientError> {
        self.send_with(conv_id, client_msg_id, body, &SendOptions::default())
            .await
    }

    /// One send attempt of a message with relations: a reply (`reply_to`), a reply in a
    /// thread (`thread_root`) and mentions (docs/RELATIONS.md). Retried like
    /// [`Client::send`]: the same `client_msg_id` with the same options answers `dup: true`;
    /// with other options it is `IDEMPOTENCY_MISMATCH`. A target the sender cannot see is
    /// `NOT_FOUND`, a recalled one `RECALLED`, a reply in a thread as root `BAD_REQUEST`.
    pub async fn send_with(
        &self,
        conv_id: &str,
        client_msg_id: &str,
        body: &str,
        options: &SendOptions,
    ) -> Result<SendAck, ClientError> {
        let url = self.conv_url(conv_id, &["messages"])?;
        let request = self.http.authorised(Method::POST, url).json(&SendBody {
            client_msg_id,
            body,
            options,
        });
        self.http.json(request).await
    }

    /// [`Client::send_with`], resent within the client's [`RetryPolicy`] as
    /// [`Client::send_with_retry`] does.
    pub async fn send_with_options_retry(
        &self,
        conv_id: &str,
        client_msg_id: &str,
        body: &str,
        options: &SendOptions,
    ) -> Result<SendAck, ClientError> {
        self.retry
            .run(|| self.send_with(conv_id, client_msg_id, body, options))
            .await
    }

    /// One attempt to give the caller's message at `seq` a new body
    /// (`POST …/events/{seq}/edit`). Keyed like a send: `client_msg_id` is a fresh request key
    /// (from the same space as sends' keys), and resending it answers the first edit with
    /// `dup: true`; the same key with another target or body is `IDEMPOTENCY_MISMATCH`.
    /// `NOT_SENDER` for another's message, `RECALLED` for a recalled one.
    pub async fn edit(
        &self,
        conv_id: &str,
        seq: i64,
        client_msg_id: &str,
        body: &str,
    ) -> Result<EditAck, ClientError> {
        let seq = seq.to_string();
        let url = self.conv_url(conv_id, &["events", &seq, "edit"])?;
        let request = self.http.authorised(Method::POST, url).json(&EditBody {
            client_msg_id,
            body,
        });
        self.http.json(request).await
    }

    /// [`Client::edit`], resent with the same key within the client's [`RetryPolicy`].
    pub async fn edit_with_retry(
        &self,
        conv_id: &str,
        seq: i64,
        client_msg_id: &str,
        body: &str,
    ) -> Result<EditAck, ClientError> {
        self.retry
            .run(|| self.edit(conv_id, seq, client_msg_id, body))
            .await
    }

    /// Adds the caller's reaction `key` (an emoji or a short token) to the message at `seq`
    /// (`PUT …/events/{seq}/reactions/{key}`, the key percent-encoded). Idempotent: a
    /// reaction the caller has already answers `changed: false` with its seq, so resending
    /// after an unknown outcome is safe ([`Client::retry_policy`]`.run(..)`).
    pub async fn react(
        &self,
        conv_id: &str,
        seq: i64,
        key: &str,
    ) -> Result<ReactionAck, ClientError> {
        self.reaction(Method::PUT, conv_id, seq, key).await
    }

    /// Takes the caller's reaction `key` back from the message at `seq`
    /// (`DELETE …/events/{seq}/reactions/{key}`). A reaction the caller does not have answers
    /// `changed: false` and `seq: None`; so does a resend of a delete that committed.
    pub async fn unreact(
        &self,
        conv_id: &str,
        seq: i64,
        key: &str,
    ) -> Result<ReactionAck, ClientError> {
        self.reaction(Method::DELETE, conv_id, seq, key).await
    }

    async fn reaction(
        &self,
        method: Method,
        conv_id: &str,
        seq: i64,
        key: &str,
    ) -> Result<ReactionAck, ClientError> {
        let seq = seq.to_string();
        // Each segment is percent-encoded, `/` and `%` included.
        let url = self.conv_url(conv_id, &["events", &seq, "reactions", key])?;
        self.http.json(self.http.authorised(method, url)).await
    }

    /// Sends, resending with the same `client_msg_id` after timeouts, transport errors and
    /// `503 OUTCOME_UNKNOWN`/`UNAVAILABLE`, within the client's [`RetryPolicy`]: by default for
    /// up to 20 s, which rides out a server restart of 10 s (see [`crate::retry`]). The request
    /// key makes resending safe: a send that did commit answers `dup: true` with its original
    /// seq. An error that is still [`ClientError::is_retryable`] leaves the outcome unknown;
    /// sending again later with the same key learns it.
    pub async fn send_with_retry(
        &self,
        conv_id: &str,
        client_msg_id: &str,
        body: &str,
    ) -> Result<SendAck, ClientError> {
        self.retry
            .run(|| self.send(conv_id, client_msg_id, body))
            .await
    }

    /// Visible events with `seq > after`, ascending, at most `limit` of them (default 50, at
    /// most [`crate::EVENTS_PAGE_LEN_MAX`] = 500). Advance the cursor to `through_seq`, not to
    /// the last event: seqs the user cannot see are skipped without a gap. `epoch` is the epoch
    /// the cursor belongs to; a stale one answers `EPOCH_CHANGED`. To read a whole log, see
    /// [`Client::all_events`] and [`Client::event_pages`].
    pub async fn events_after(
        &self,
        conv_id: &str,
        after: i64,
        limit: Option<u32>,
        epoch: Option<i64>,
    ) -> Result<EventsPage, ClientError> {
        let mut url = self.conv_url(conv_id, &["events"])?;
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("after", &after.to_string());
            if let Some(limit) = limit {
                q.append_pair("limit", &limit.to_string());
            }
            if let Some(epoch) = epoch {
                q.append_pair("epoch", &epoch.to_string());
            }
        }
        self.http.json(self.http.authorised(Method::GET, url)).await
    }

    /// Visible events with `seq < before`, descending; the newest page when `before` is `None`.
    /// The next older page is at `next_before`.
    pub async fn history(
        &self,
        conv_id: &str,
        before: Option<i64>,
        limit: Option<u32>,
    ) -> Result<EventsPage, ClientError> {
        let mut url = self.conv_url(conv_id, &["events"])?;
        {
            let mut q = url.query_pairs_mut();
            if let Some(before) = before {
                q.append_pair("before", &before.to_string());
            }
            if let Some(limit) = limit {
                q.append_pair("limit", &limit.to_string());
            }
        }
        // An empty query string would still leave a trailing `?`.
        if url.query() == Some("") {
            url.set_query(None);
        }
        self.http.json(self.http.authorised(Method::GET, url)).await
    }

    /// A page of the thread rooted at `root` (`GET …/events?thread=ROOT`): the root and its
    /// replies, with the cursors of the log. With `after`, ascending from it (advance to
    /// `through_seq`); otherwise descending from `before` (the newest page when `None`; the
    /// next older page is at `next_before`). Messages come folded: current bodies, reactions
    /// with the reader's `me`, the root's `thread` summary. A root the reader cannot see, or
    /// that is itself a reply in a thread, is `NOT_FOUND`.
    pub async fn thread(
        &self,
        conv_id: &str,
        root: i64,
        cursor: ThreadCursor,
        limit: Option<u32>,
    ) -> Result<EventsPage, ClientError> {
        let mut url = self.conv_url(conv_id, &["events"])?;
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("thread", &root.to_string());
            match cursor {
                ThreadCursor::After(after) => {
                    q.append_pair("after", &after.to_string());
                }
                ThreadCursor::Before(Some(before)) => {
                    q.append_pair("before", &before.to_string());
                }
                ThreadCursor::Before(None) => {}
            }
            if let Some(limit) = limit {
                q.append_pair("limit", &limit.to_string());
            }
        }
        self.http.json(self.http.authorised(Method::GET, url)).await
    }

    /// Moves the caller's read position forward to `seq` (never back, never past the head).
    pub async fn mark_read(&self, conv_id: &str, seq: i64) -> Result<ReadAck, ClientError> {
        let url = self.conv_url(conv_id, &["read"])?;
        let request = self
            .http
            .authorised(Method::POST, url)
            .json(&ReadBody { seq });
        self.http.json(request).await
    }

    /// Recalls the caller's own message at `seq`; recalling it again returns the same recall.
    pub async fn recall(&self, conv_id: &str, seq: i64) -> Result<RecallAck, ClientError> {
        let seq = seq.to_string();
        let url = self.conv_url(conv_id, &["events", &seq, "recall"])?;
        self.http
            .json(self.http.authorised(Method::POST, url))
            .await
    }

    /// Succeeds while the process is alive.
    pub async fn healthz(&self) -> Result<(), ClientError> {
        let url = self.http.url(&["healthz"])?;
        self.http.ok(self.http.bare(Method::GET, url)).await
    }

    /// Succeeds while the server can reach its store.
    pub async fn readyz(&self) -> Result<(), ClientError> {
        let url = self.http.url(&["readyz"])?;
        self.http.ok(self.http.bare(Method::GET, url)).await
    }

    /// The Prometheus text exposition. On the main listener only the admin token may read
    /// it, so a client with a token sends it; the metrics listener ignores it.
    pub async fn metrics(&self) -> Result<String, ClientError> {
        let url = self.http.url(&["metrics"])?;
        let req = if self.http.token().is_empty() {
            self.http.bare(Method::GET, url)
        } else {
            self.http.authorised(Method::GET, url)
        };
        self.http.text(req).await
    }

    /// The OpenAPI 3 document of the HTTP contract.
    pub async fn openapi(&self) -> Result<Value, ClientError> {
        let url = self.http.url(&["openapi.json"])?;
        self.http.json(self.http.bare(Method::GET, url)).await
    }
}
