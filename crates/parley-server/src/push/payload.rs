//! What a notification says: the JSON a Web Push service worker receives, and the push-gateway
//! notification of the Matrix model. Built from a claimed job and the member's unread counts.

use parley_push::GatewayNotification;
use parley_store::{NotifyReason, PushJob, PushMessage};
use parley_wire::PushPayload;

/// Longest preview, in characters: enough for a lock screen, and far inside the 3,993 bytes a
/// Web Push payload may carry.
pub const PREVIEW_CHARS_MAX: usize = 140;

/// The member's unread counts when the notification is built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Unread messages of the notification's conversation.
    pub unread: i64,
    /// Unread messages of all the member's conversations: the app's badge.
    pub badge: i64,
}

/// The first `PREVIEW_CHARS_MAX` characters of `body`, with an ellipsis when cut.
pub fn preview(body: &str) -> String {
    let mut chars = body.chars();
    let cut: String = chars.by_ref().take(PREVIEW_CHARS_MAX).collect();
    if chars.next().is_some() {
        format!("{cut}…")
    } else {
        cut
    }
}

/// The Web Push payload (docs/PUSH.md). Sender, preview and title are left out in privacy mode.
pub fn web_push(job: &PushJob, message: &PushMessage, counts: Counts) -> PushPayload {
    let open = !job.privacy;
    PushPayload {
        conv_id: job.conv_id.as_str().to_owned(),
        seq: job.seq,
        unread: counts.unread,
        badge: counts.badge,
        kind: message.reason.as_str().to_owned(),
        sender: open.then(|| message.sender.as_str().to_owned()),
        preview: if open {
            message.body.as_deref().map(preview)
        } else {
            None
        },
        title: if open { job.title.clone() } else { None },
    }
}

pub fn gateway(job: &PushJob, message: &PushMessage, counts: Counts) -> GatewayNotification {
    let open = !job.privacy;
    GatewayNotification {
        event_id: message
            .message_id
            .map(|id| id.to_string())
            .unwrap_or_else(|| format!("{}:{}", job.conv_id.as_str(), job.seq)),
        room_id: job.conv_id.as_str().to_owned(),
        sender: open.then(|| message.sender.as_str().to_owned()),
        body: if open {
            message.body.as_deref().map(preview)
        } else {
            None
        },
        unread: counts.badge,
        prio_high: message.reason != NotifyReason::Message,
        seq: job.seq,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn previews_are_cut_at_the_limit_on_a_character_boundary() {
        let long = "é".repeat(PREVIEW_CHARS_MAX + 5);
        let cut = preview(&long);
        assert_eq!(cut.chars().count(), PREVIEW_CHARS_MAX + 1);
        assert!(cut.ends_with('…'));
        assert_eq!(preview("short"), "short");
    }
}
