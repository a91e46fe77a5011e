//! The raw events-after page read straight against PostgreSQL: the ceiling a catch-up through
//! the server is measured against.
//!
//! It replays the pages a catch-up read (conversation, reader, cursor, limit) on one connection
//! of `--database-url`, which must be the server's database, with exactly the statement the
//! store runs for events-after (`parley_store::pg::EVENTS_AFTER_ONE_PERIOD_SQL`), prepared once
//! like the store's. Every row is fetched and every column decoded into its Rust type; no
//! domain events are built and nothing is serialised: this is the database's own rate. The
//! tables are only read.

use std::str::FromStr;

use anyhow::{ensure, Context, Result};
use parley_store::pg::EVENTS_AFTER_ONE_PERIOD_SQL;
use sqlx::postgres::{PgConnectOptions, PgRow};
use sqlx::types::chrono::{DateTime, Utc};
use sqlx::{ConnectOptions, Connection, PgConnection, Row};

/// One page read of a catch-up: events of `conv_id` after `after` as `reader` sees them.
#[derive(Debug, Clone)]
pub struct PageRead {
    pub conv_id: String,
    pub after: i64,
    pub limit: u32,
}

/// A connection to the server's database for the raw page reads.
pub struct RawPages {
    conn: PgConnection,
    reader: String,
}

impl RawPages {
    pub async fn connect(database_url: &str, reader: &str) -> Result<RawPages> {
        let options = PgConnectOptions::from_str(database_url)
            .context("--database-url is not a PostgreSQL URL")?;
        let conn = options
            .connect()
            .await
            .context("cannot connect to --database-url")?;
        Ok(RawPages {
            conn,
            reader: reader.to_owned(),
        })
    }

    /// Runs every read of `pages` in turn and answers the events they returned.
    pub async fn read_all(&mut self, pages: &[PageRead]) -> Result<usize> {
        let mut events = 0;
        for page in pages {
            events += self.read(page).await?;
        }
        Ok(events)
    }

    /// One page: its rows fetched and decoded; answers its events.
    async fn read(&mut self, page: &PageRead) -> Result<usize> {
        let rows = sqlx::query(EVENTS_AFTER_ONE_PERIOD_SQL)
            .bind(page.conv_id.as_str())
            .bind(self.reader.as_str())
            .bind(page.after.saturating_add(1))
            .bind(i64::from(page.limit))
            .fetch_all(&mut self.conn)
            .await?;
        ensure!(
            !rows.is_empty(),
            "conversation {} is not in --database-url: it must be the server's database",
            page.conv_id
        );
        let mut events = 0;
        for row in &rows {
            if decode(row)? {
                events += 1;
            }
        }
        Ok(events)
    }

    pub async fn close(self) {
        let _ = self.conn.close().await;
    }
}

/// Decodes every column of one row by position, as the statement lists them; answers whether
/// the row carries an event (the left join gives one row without when the range is empty).
fn decode(row: &PgRow) -> Result<bool> {
    let _head: i64 = row.try_get(0)?;
    let _min_seq: i64 = row.try_get(1)?;
    let _epoch: i64 = row.try_get(2)?;
    let _periods: i64 = row.try_get(3)?;
    let _from: i64 = row.try_get(4)?;
    let _to: Option<i64> = row.try_get(5)?;
    let seq: Option<i64> = row.try_get(6)?;
    let _kind: Option<&str> = row.try_get(7)?;
    let _created_at: Option<DateTime<Utc>> = row.try_get(8)?;
    let _message_id: Option<uuid::Uuid> = row.try_get(9)?;
    let _sender_user: Option<&str> = row.try_get(10)?;
    let _sender_device: Option<&str> = row.try_get(11)?;
    let _client_msg_id: Option<&str> = row.try_get(12)?;
    let _body: Option<&str> = row.try_get(13)?;
    let _subject_user: Option<&str> = row.try_get(14)?;
    let _target_seq: Option<i64> = row.try_get(15)?;
    let _recalled_at: Option<DateTime<Utc>> = row.try_get(16)?;
    Ok(seq.is_some())
}
