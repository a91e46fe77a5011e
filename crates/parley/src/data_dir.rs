//! The data directory of a node: the embedded store's file and the generated admin token.
//!
//! The directory is readable by the owner only, whether it was created here or existed before,
//! and so is the token file: whoever reads the token administers the server.

use std::fs;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use parley_store::sqlite::files::private_dir;
use rand::RngCore;

/// File of the generated admin token inside the data directory.
pub const ADMIN_TOKEN_FILE_NAME: &str = "admin_token";
/// Random bytes in a generated admin token: 256 bits, like device tokens.
const ADMIN_TOKEN_BYTES: usize = 32;
/// Permissions of the admin token file: owner read and write only.
#[cfg(unix)]
const ADMIN_TOKEN_FILE_MODE: u32 = 0o600;

/// Creates the data directory when it is missing and makes it owner-only either way, as the
/// embedded store does with its own directory.
pub fn ensure_dir(dir: &Path) -> anyhow::Result<()> {
    private_dir(dir).with_context(|| {
        format!(
            "cannot make the data directory {} (mode 700)",
            dir.display()
        )
    })
}

/// Where the admin token came from.
#[derive(Debug, PartialEq, Eq)]
pub enum TokenSource {
    /// Generated now and written to this file: the caller shows it once.
    Generated(PathBuf),
    /// Read from this file, written at an earlier start.
    Kept(PathBuf),
}

/// The admin token kept in `dir`: the one written at an earlier start, or a new random one,
/// written now with owner-only permissions. `dir` must exist.
pub fn admin_token(dir: &Path) -> anyhow::Result<(String, TokenSource)> {
    let path = dir.join(ADMIN_TOKEN_FILE_NAME);
    match fs::read_to_string(&path) {
        Ok(text) => {
            let token = text.trim().to_owned();
            if token.is_empty() {
                bail!(
                    "{} is empty: delete it to generate a new admin token, or give --admin-token",
                    path.display()
                );
            }
            warn_if_readable_by_others(&path);
            return Ok((token, TokenSource::Kept(path)));
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
    let mut raw = [0u8; ADMIN_TOKEN_BYTES];
    rand::rngs::OsRng.fill_bytes(&mut raw);
    let token = hex::encode(raw);
    let mut options = fs::OpenOptions::new();
    // create_new: two servers starting at once on one directory never overwrite each other's
    // token; the loser fails here and keeps nothing.
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(ADMIN_TOKEN_FILE_MODE);
    }
    let mut file = options
        .open(&path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    file.write_all(format!("{token}\n").as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok((token, TokenSource::Generated(path)))
}

#[cfg(unix)]
fn warn_if_readable_by_others(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(meta) = fs::metadata(path) {
        if meta.permissions().mode() & 0o077 != 0 {
            tracing::warn!(
                path = %path.display(),
                "the admin token file is readable by other users; chmod 600 it"
            );
        }
    }
}

#[cfg(not(unix))]
fn warn_if_readable_by_others(_path: &Path) {}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(unix)]
    use parley_store::sqlite::files::DATA_DIR_MODE;

    #[test]
    fn a_token_is_generated_once_then_kept() {
        let dir = tempfile::tempdir().expect("temp dir");
        let data = dir.path().join("data");
        ensure_dir(&data).expect("data dir");
        let (first, source) = admin_token(&data).expect("generated");
        assert_eq!(
            source,
            TokenSource::Generated(data.join(ADMIN_TOKEN_FILE_NAME))
        );
        assert_eq!(first.len(), 2 * ADMIN_TOKEN_BYTES);
        assert!(first.bytes().all(|b| b.is_ascii_hexdigit()));
        let (again, source) = admin_token(&data).expect("kept");
        assert_eq!(again, first);
        assert_eq!(source, TokenSource::Kept(data.join(ADMIN_TOKEN_FILE_NAME)));
    }

    #[cfg(unix)]
    #[test]
    fn directory_and_token_are_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("temp dir");
        let data = dir.path().join("nested").join("data");
        ensure_dir(&data).expect("data dir");
        admin_token(&data).expect("generated");
        let mode = |p: &Path| fs::metadata(p).expect("metadata").permissions().mode() & 0o777;
        assert_eq!(mode(&data), DATA_DIR_MODE);
        assert_eq!(
            mode(&data.join(ADMIN_TOKEN_FILE_NAME)),
            ADMIN_TOKEN_FILE_MODE
        );
    }

    #[cfg(unix)]
    #[test]
    fn an_existing_directory_is_made_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("temp dir");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).expect("chmod");
        ensure_dir(dir.path()).expect("data dir");
        let mode = fs::metadata(dir.path())
            .expect("metadata")
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, DATA_DIR_MODE);
    }

    #[test]
    fn an_empty_token_file_is_an_error() {
        let dir = tempfile::tempdir().expect("temp dir");
        fs::write(dir.path().join(ADMIN_TOKEN_FILE_NAME), "\n").expect("write");
        assert!(admin_token(dir.path()).is_err());
    }
}
