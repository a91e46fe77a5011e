//! Decoding of the enumerations every store keeps as text.

use parley_domain::{ConvKind, DeliveryMode, EventKind, Role};

use crate::error::StoreError;

fn unknown(what: &str, value: &str) -> StoreError {
    StoreError::Unavailable(format!("unknown {what} in store: {value}"))
}

pub(crate) fn conv_kind(s: &str) -> Result<ConvKind, StoreError> {
    ConvKind::parse(s).ok_or_else(|| unknown("conversation kind", s))
}

pub(crate) fn delivery_mode(s: &str) -> Result<DeliveryMode, StoreError> {
    DeliveryMode::parse(s).ok_or_else(|| unknown("delivery mode", s))
}

pub(crate) fn event_kind(s: &str) -> Result<EventKind, StoreError> {
    EventKind::parse(s).ok_or_else(|| unknown("event kind", s))
}

pub(crate) fn role(s: &str) -> Result<Role, StoreError> {
    Role::parse(s).ok_or_else(|| unknown("role", s))
}

/// A stored count (of members, say) as a size; the schema keeps it non-negative.
pub(crate) fn count(n: i64) -> Result<usize, StoreError> {
    usize::try_from(n).map_err(|_| StoreError::Unavailable(format!("negative count in store: {n}")))
}

/// A count or threshold as PostgreSQL's `integer`, saturating (thresholds are clamped to it at
/// creation, member counts are far below it).
pub(crate) fn int4<N: TryInto<i32>>(n: N) -> i32 {
    n.try_into().unwrap_or(i32::MAX)
}

/// A stored member-count threshold; the schema keeps it non-negative.
pub(crate) fn threshold(t: Option<i64>) -> Option<u32> {
    t.and_then(|t| u32::try_from(t).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_values_are_errors_not_defaults() {
        assert_eq!(conv_kind("group").ok(), Some(ConvKind::Group));
        assert!(matches!(
            conv_kind("channel"),
            Err(StoreError::Unavailable(_))
        ));
        assert!(matches!(role("king"), Err(StoreError::Unavailable(_))));
        assert_eq!(delivery_mode("pull").ok(), Some(DeliveryMode::Pull));
        assert_eq!(event_kind("leave").ok(), Some(EventKind::Leave));
        assert!(count(-1).is_err());
        assert_eq!(threshold(Some(-1)), None);
        assert_eq!(threshold(Some(500)), Some(500));
    }
}
