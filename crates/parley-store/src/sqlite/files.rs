//! The embedded store's files are its owner's only: the database holds message bodies and the
//! hashes of device tokens. The data directory is 0700 and the database 0600, whether they
//! existed before or not, so a directory made 0755 by hand, or a database an earlier version
//! left 0644, is closed to other users at the next start.
//!
//! SQLite creates the `-wal` and `-shm` files beside the database later, with the database
//! file's own mode (its unix VFS copies it), so a database created 0600 before SQLite opens it
//! gives them 0600 too, whatever the process's umask. Files of those kinds left by an earlier
//! run are tightened here as well.

use std::fs;
use std::io;
use std::path::Path;

/// Permissions of the data directory: owner only.
pub const DATA_DIR_MODE: u32 = 0o700;
/// Permissions of the database and of the files SQLite keeps beside it: owner read and write.
pub const DB_FILE_MODE: u32 = 0o600;
/// Suffixes of the files SQLite keeps beside the database (WAL mode, or a rollback journal).
const SIDE_FILE_SUFFIXES: [&str; 3] = ["-wal", "-shm", "-journal"];

/// Creates `dir` (and its parents) if missing, and makes it owner-only either way.
pub fn private_dir(dir: &Path) -> io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(DATA_DIR_MODE);
    }
    builder.create(dir)?;
    restrict(dir, DATA_DIR_MODE)
}

/// Creates the database file empty and owner-only if missing (SQLite takes an empty file for a
/// new database), and makes it and any side file owner-only either way.
pub fn private_db_file(path: &Path) -> io::Result<()> {
    let mut options = fs::OpenOptions::new();
    // Never truncates: an existing database is only opened, and closed again at once.
    options.write(true).create(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(DB_FILE_MODE);
    }
    drop(options.open(path)?);
    restrict(path, DB_FILE_MODE)?;
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    for suffix in SIDE_FILE_SUFFIXES {
        let side = path.with_file_name(format!("{name}{suffix}"));
        match restrict(&side, DB_FILE_MODE) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            other => other?,
        }
    }
    Ok(())
}

#[cfg(unix)]
fn restrict(path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let current = fs::metadata(path)?.permissions().mode() & 0o777;
    if current == mode {
        return Ok(());
    }
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
}

#[cfg(not(unix))]
fn restrict(path: &Path, _mode: u32) -> io::Result<()> {
    fs::metadata(path).map(drop)
}
