//! Histories as JSON lines: one record per line, read from any `BufRead` and written to any
//! `Write`. Blank lines are skipped, so a hand-written history may be spaced out.

use std::io::{BufRead, Read, Write};

use crate::record::Record;

/// Lines longer than this are refused rather than buffered: no record comes near it, and a
/// corrupt file without newlines must not be read into memory whole.
pub const LINE_LEN_MAX_BYTES: usize = 1 << 20;

/// Why a history could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("reading or writing the history failed")]
    Io(#[from] std::io::Error),
    #[error("line {line} is not a history record")]
    Json {
        line: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error("line {line} is longer than {LINE_LEN_MAX_BYTES} bytes")]
    LineTooLong { line: usize },
}

/// Reads every record of a history, in line order.
pub fn read_history<R: BufRead>(mut input: R) -> Result<Vec<Record>, HistoryError> {
    let mut records = Vec::new();
    let mut buf = Vec::new();
    let mut line = 0;
    loop {
        buf.clear();
        line += 1;
        // The bound is one byte over the maximum, so a line of exactly the maximum is read
        // whole and a longer one is seen to be longer.
        let limit = (LINE_LEN_MAX_BYTES + 1) as u64;
        let read = input.by_ref().take(limit).read_until(b'\n', &mut buf)?;
        if read == 0 {
            return Ok(records);
        }
        if buf.last() == Some(&b'\n') {
            buf.pop();
        } else if buf.len() > LINE_LEN_MAX_BYTES {
            return Err(HistoryError::LineTooLong { line });
        }
        if buf.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let record =
            serde_json::from_slice(&buf).map_err(|source| HistoryError::Json { line, source })?;
        records.push(record);
    }
}

/// Writes one record as one line.
pub fn write_record<W: Write>(out: &mut W, record: &Record) -> Result<(), HistoryError> {
    serde_json::to_writer(&mut *out, record).map_err(std::io::Error::from)?;
    out.write_all(b"\n")?;
    Ok(())
}

/// Writes every record, one per line.
pub fn write_history<W: Write>(out: &mut W, records: &[Record]) -> Result<(), HistoryError> {
    for record in records {
        write_record(out, record)?;
    }
    Ok(())
}
