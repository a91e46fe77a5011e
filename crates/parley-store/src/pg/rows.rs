//! The query interface (`query.rs`) and the transaction ends on PostgreSQL.

use chrono::{DateTime, Utc};
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::Query;
use sqlx::{PgConnection, Postgres, Row};
use uuid::Uuid;

use super::PgTx;
use crate::error::StoreError;
use crate::query::{sqlx_backend, Arg};

fn bound<'q>(
    sql: &'q str,
    args: &[Arg<'q>],
) -> Result<Query<'q, Postgres, PgArguments>, StoreError> {
    Ok(args.iter().fold(sqlx::query(sql), |q, arg| match *arg {
        Arg::Text(s) => q.bind(s),
        Arg::Int(i) => q.bind(i),
        Arg::OptInt(i) => q.bind(i),
        Arg::OptText(s) => q.bind(s),
        Arg::Texts(ids) => q.bind(ids),
    }))
}

/// PostgreSQL has the types.
fn time(row: &PgRow, column: &str) -> Result<DateTime<Utc>, StoreError> {
    Ok(row.try_get(column)?)
}

fn opt_uuid(row: &PgRow, column: &str) -> Result<Option<Uuid>, StoreError> {
    Ok(row.try_get(column)?)
}

sqlx_backend! {
    connection: PgConnection,
    transaction: PgTx<'_>,
    row: PgRow,
    bound: bound,
    time: time,
    opt_uuid: opt_uuid,
}
