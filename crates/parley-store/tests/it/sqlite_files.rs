//! The embedded store's files hold message bodies and token hashes, so they are the owner's
//! only: the data directory 0700, the database and the `-wal` and `-shm` files SQLite keeps
//! beside it 0600, whether the directory existed before (say with 0755) or not, and also for a
//! database an earlier version left readable by others.

#![cfg(unix)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::{ensure, Result};
use parley_domain::ConvKind;
use parley_store::sqlite::{SqliteStore, DB_FILE_NAME};
use parley_store::Store;

use crate::contract::{new_conv, send, user};

fn mode(path: &Path) -> Result<u32> {
    Ok(fs::metadata(path)?.permissions().mode() & 0o777)
}

/// Opens the store in `dir`, writes through it, and checks every file of it while it is open
/// (the `-wal` and `-shm` files exist only then).
async fn open_write_and_check(dir: &Path) -> Result<()> {
    let store = SqliteStore::open_dir(dir).await?;
    store.migrate().await?;
    let ana = user(&store, "u-ana").await?;
    let conv = store
        .create_conversation(&new_conv(&ana, ConvKind::Group, Some("c-1"), &[]))
        .await?
        .conv_id;
    send(&store, &conv, &ana, "m-1", "a secret").await?;
    let db = dir.join(DB_FILE_NAME);
    let mut modes = vec![(dir.to_owned(), mode(dir)?)];
    for file in [
        db.clone(),
        db.with_file_name(format!("{DB_FILE_NAME}-wal")),
        db.with_file_name(format!("{DB_FILE_NAME}-shm")),
    ] {
        ensure!(file.exists(), "{} is missing", file.display());
        modes.push((file.clone(), mode(&file)?));
    }
    store.close().await;
    let expected: Vec<u32> = vec![0o700, 0o600, 0o600, 0o600];
    let found: Vec<u32> = modes.iter().map(|(_, m)| *m).collect();
    ensure!(
        found == expected,
        "modes {:?}",
        modes
            .iter()
            .map(|(p, m)| format!("{} {m:o}", p.display()))
            .collect::<Vec<_>>()
    );
    Ok(())
}

#[tokio::test]
async fn files_are_owner_only_in_a_new_directory() -> Result<()> {
    let parent = tempfile::tempdir()?;
    open_write_and_check(&parent.path().join("data")).await
}

#[tokio::test]
async fn files_are_owner_only_in_a_directory_readable_by_others() -> Result<()> {
    let dir = tempfile::tempdir()?;
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755))?;
    open_write_and_check(dir.path()).await
}

#[tokio::test]
async fn an_older_database_readable_by_others_is_closed_to_them() -> Result<()> {
    let dir = tempfile::tempdir()?;
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755))?;
    let store = SqliteStore::open_dir(dir.path()).await?;
    store.migrate().await?;
    store.close().await;
    let db = dir.path().join(DB_FILE_NAME);
    fs::set_permissions(&db, fs::Permissions::from_mode(0o644))?;
    open_write_and_check(dir.path()).await
}
