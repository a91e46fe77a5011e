//! Test breaks: guards of the real write paths that a test can remove, one at a time, to show
//! that the check naming the guard fails without it (SPEC §12's negative controls, issue 12).
//!
//! They exist only in a build with the test-only cargo feature `test-breaks`. Without it every
//! accessor below is the constant `false`, so the compiler drops the broken branches, and
//! [`Breaks::parse`] refuses any name: a release build cannot be talked into a broken path. A
//! process reads the list once, at startup, from [`BREAKS_ENV`] ([`Breaks::from_env`]), and a
//! store keeps the set it was built with (`PgStore::with_breaks`, `SqliteStore::with_breaks`);
//! nothing is global.

use std::fmt;

/// The environment variable with the comma-separated breaks of a process.
pub const BREAKS_ENV: &str = "PARLEY_TEST_BREAKS";

/// Whether this build can remove guards at all (the `test-breaks` feature).
pub const BREAKS_COMPILED: bool = cfg!(feature = "test-breaks");

/// Every break by its public name, in the order they are reported.
pub const BREAK_NAMES: [&str; 9] = [
    NO_ROW_LOCK,
    NO_UNIQUE_INDEX,
    CLEANUP_WITHOUT_CAD,
    ACK_BEFORE_COMMIT,
    NO_TARGET_VISIBILITY,
    NO_MEDIA_VISIBILITY,
    PUSH_IGNORES_READ,
    SEARCH_IGNORES_PERIODS,
    MLS_ANY_EPOCH,
];

const NO_ROW_LOCK: &str = "no-row-lock";
const NO_UNIQUE_INDEX: &str = "no-unique-index";
const CLEANUP_WITHOUT_CAD: &str = "cleanup-without-cad";
const ACK_BEFORE_COMMIT: &str = "ack-before-commit";
/// The relation writes (reply, thread, edit, reaction) check their target without the
/// actor's periods, so a member can relate to a message from before they joined and learn
/// that it exists (docs/RELATIONS.md, the hidden-target rule).
const NO_TARGET_VISIBILITY: &str = "no-target-visibility";
/// A download checks that some message names the media but not the reader's membership
/// periods, so anyone who learns a media id reads the bytes (docs/MEDIA.md).
const NO_MEDIA_VISIBILITY: &str = "no-media-visibility";
/// The claim reports every notification unread, so a device is notified of a message its user
/// already read on another device (docs/PUSH.md).
const PUSH_IGNORES_READ: &str = "push-ignores-read";
/// A search checks that the searcher is a member of the conversation but not that a hit lies
/// inside one of their periods, so a member finds messages from before they joined or after
/// they left (docs/SEARCH.md).
const SEARCH_IGNORES_PERIODS: &str = "search-ignores-periods";
/// An MLS write is not checked against the conversation's epoch, so a message made in an
/// epoch its readers have left is written, and of two racing Commits the second is not refused
/// with the winner's seq (docs/E2EE.md, the Delivery Service rule).
const MLS_ANY_EPOCH: &str = "mls-any-epoch";

/// A set of removed guards; the default removes none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Breaks {
    no_row_lock: bool,
    no_unique_index: bool,
    cleanup_without_cad: bool,
    ack_before_commit: bool,
    no_target_visibility: bool,
    no_media_visibility: bool,
    push_ignores_read: bool,
    search_ignores_periods: bool,
    mls_any_epoch: bool,
}

/// Why a list of breaks was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BreaksError {
    /// The list names breaks, but this build has no `test-breaks` feature.
    #[error(
        "{BREAKS_ENV}={0:?} names test breaks, but this build was compiled without the \
         test-only cargo feature `test-breaks`; unset it, or run a test build"
    )]
    NotCompiled(String),
    /// A name that is not a break.
    #[error("unknown test break {0:?} in {BREAKS_ENV}; the breaks are {BREAK_NAMES:?}")]
    Unknown(String),
}

impl Breaks {
    /// The breaks of a comma-separated list (spaces and empty entries ignored). An empty list
    /// is no break in any build; a list that names one is refused without the feature.
    pub fn parse(list: &str) -> Result<Self, BreaksError> {
        let mut breaks = Self::default();
        let names: Vec<&str> = list
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .collect();
        if names.is_empty() {
            return Ok(breaks);
        }
        if !BREAKS_COMPILED {
            return Err(BreaksError::NotCompiled(list.to_owned()));
        }
        for name in names {
            let flag = match name {
                NO_ROW_LOCK => &mut breaks.no_row_lock,
                NO_UNIQUE_INDEX => &mut breaks.no_unique_index,
                CLEANUP_WITHOUT_CAD => &mut breaks.cleanup_without_cad,
                ACK_BEFORE_COMMIT => &mut breaks.ack_before_commit,
                NO_TARGET_VISIBILITY => &mut breaks.no_target_visibility,
                NO_MEDIA_VISIBILITY => &mut breaks.no_media_visibility,
                PUSH_IGNORES_READ => &mut breaks.push_ignores_read,
                SEARCH_IGNORES_PERIODS => &mut breaks.search_ignores_periods,
                MLS_ANY_EPOCH => &mut breaks.mls_any_epoch,
                other => return Err(BreaksError::Unknown(other.to_owned())),
            };
            *flag = true;
        }
        Ok(breaks)
    }

    /// The breaks named by [`BREAKS_ENV`]; none when it is unset.
    pub fn from_env() -> Result<Self, BreaksError> {
        match std::env::var(BREAKS_ENV) {
            Ok(list) => Self::parse(&list),
            Err(_) => Ok(Self::default()),
        }
    }

    /// True when no guard is removed.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// `no-row-lock`: PostgreSQL's send reads the conversation's counter without locking its
    /// row, so sends of two nodes allocate seqs from the same `next_seq`.
    pub fn no_row_lock(&self) -> bool {
        BREAKS_COMPILED && self.no_row_lock
    }

    /// `no-unique-index`: PostgreSQL's send checks the request key before it locks the
    /// conversation, on a snapshot that misses sends committing while it waits for the lock,
    /// which leaves the unique index `events_request_key` as the only guard against a second
    /// row (a control drops that index in its scratch database).
    pub fn no_unique_index(&self) -> bool {
        BREAKS_COMPILED && self.no_unique_index
    }

    /// `cleanup-without-cad`: releasing a device's route deletes it whichever connection it
    /// names (no compare-and-delete on `conn_id`), on both stores.
    pub fn cleanup_without_cad(&self) -> bool {
        BREAKS_COMPILED && self.cleanup_without_cad
    }

    /// `ack-before-commit`: a send answers as committed once its rows are written and commits
    /// in the background, so the ack and the bus announcement go out before COMMIT and a failed
    /// commit leaves an acked write that is not in the log; on both stores.
    pub fn ack_before_commit(&self) -> bool {
        BREAKS_COMPILED && self.ack_before_commit
    }

    pub fn no_target_visibility(&self) -> bool {
        BREAKS_COMPILED && self.no_target_visibility
    }

    /// `no-media-visibility`: a download is served to anyone when some message names the media.
    pub fn no_media_visibility(&self) -> bool {
        BREAKS_COMPILED && self.no_media_visibility
    }

    /// `push-ignores-read`: the claim reports every notification unread, so a device is
    /// notified of a message its user already read on another device.
    pub fn push_ignores_read(&self) -> bool {
        BREAKS_COMPILED && self.push_ignores_read
    }

    /// `search-ignores-periods`: a search finds every message of a conversation the searcher
    /// belongs to, not only those inside their periods.
    pub fn search_ignores_periods(&self) -> bool {
        BREAKS_COMPILED && self.search_ignores_periods
    }

    /// `mls-any-epoch`: an MLS write is accepted whatever epoch it was made in.
    pub fn mls_any_epoch(&self) -> bool {
        BREAKS_COMPILED && self.mls_any_epoch
    }
}

/// The names of the removed guards, comma-separated, or `none`.
impl fmt::Display for Breaks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let on = [
            self.no_row_lock(),
            self.no_unique_index(),
            self.cleanup_without_cad(),
            self.ack_before_commit(),
            self.no_target_visibility(),
            self.no_media_visibility(),
            self.push_ignores_read(),
            self.search_ignores_periods(),
            self.mls_any_epoch(),
        ];
        let names: Vec<&str> = BREAK_NAMES
            .iter()
            .zip(on)
            .filter_map(|(name, on)| on.then_some(*name))
            .collect();
        if names.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&names.join(","))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_list_is_no_break_in_every_build() {
        assert_eq!(Breaks::parse(""), Ok(Breaks::default()));
        assert_eq!(Breaks::parse(" , ,"), Ok(Breaks::default()));
        assert_eq!(Breaks::default().to_string(), "none");
    }

    /// Every test build has the feature (the test kit turns it on).
    #[test]
    fn names_are_parsed_and_reported() {
        let breaks = Breaks::parse("ack-before-commit, no-row-lock").expect("known names");
        assert!(breaks.no_row_lock() && breaks.ack_before_commit());
        assert!(!breaks.no_unique_index() && !breaks.cleanup_without_cad());
        assert_eq!(breaks.to_string(), "no-row-lock,ack-before-commit");
        let push = Breaks::parse("push-ignores-read").expect("known name");
        assert!(push.push_ignores_read() && !push.no_media_visibility());
        assert_eq!(push.to_string(), "push-ignores-read");
        // Every name parses on its own and reports itself.
        for name in BREAK_NAMES {
            assert_eq!(Breaks::parse(name).expect(name).to_string(), name);
        }
        assert_eq!(
            Breaks::parse("no-row-lock,typo"),
            Err(BreaksError::Unknown("typo".into()))
        );
    }
}
