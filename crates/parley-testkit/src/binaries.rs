//! Executables of the workspace for tests that run them as processes: the `parley` binary and
//! the SDK's examples.
//!
//! A test of the package that defines a binary gets its path from Cargo
//! (`env!("CARGO_BIN_EXE_parley")`); a test anywhere else asks here. The first call in a test
//! process runs `cargo build` for it, in the same target directory and profile as the test
//! itself, so the executable is never stale; when the workspace's tests were just built it is
//! up to date already and the call only checks that.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, PoisonError};

/// Executables built by this test process, by their path below the profile directory.
static BUILT: Mutex<Option<HashMap<String, PathBuf>>> = Mutex::new(None);

/// The `parley` binary (`parley serve`, `parley migrate`, `parley bench`), built with the
/// test-only feature `test-breaks`, so a test can start it with `PARLEY_TEST_BREAKS` (a
/// build without the feature refuses to start when that variable names a break).
///
/// # Panics
/// When it cannot be built.
pub fn parley_binary() -> PathBuf {
    built(
        &[
            "-p",
            "parley",
            "--bin",
            "parley",
            "--features",
            "test-breaks",
        ],
        "parley",
    )
}

/// The example `name` of `package`, e.g. `example_binary("parley-client", "echo_bot")`.
///
/// # Panics
/// When it cannot be built.
pub fn example_binary(package: &str, name: &str) -> PathBuf {
    built(
        &["-p", package, "--example", name],
        &format!("examples/{name}"),
    )
}

/// Builds with `cargo build <args>` once per process and answers the executable at `output`
/// below the profile directory of the running test.
fn built(args: &[&str], output: &str) -> PathBuf {
    let mut built = BUILT.lock().unwrap_or_else(PoisonError::into_inner);
    let built = built.get_or_insert_with(HashMap::new);
    if let Some(path) = built.get(output) {
        return path.clone();
    }
    let profile_dir = profile_dir();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let mut command = Command::new(cargo);
    command
        .arg("build")
        .arg("--quiet")
        .args(args)
        .args(profile_flag(&profile_dir))
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    let status = command
        .status()
        .unwrap_or_else(|e| panic!("cannot run cargo to build {output}: {e}"));
    assert!(
        status.success(),
        "cargo build {} failed: {status}",
        args.join(" ")
    );
    let path = profile_dir.join(format!("{output}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.is_file(),
        "cargo built {output}, but it is not at {}",
        path.display()
    );
    built.insert(output.to_owned(), path.clone());
    path
}

/// The profile directory of the running test executable (`target/<profile>`), which holds it
/// in `deps/`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe()
        .unwrap_or_else(|e| panic!("the test does not know its own executable: {e}"));
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| panic!("{} is not in target/<profile>/deps", exe.display()))
}

/// The flag that builds into `profile_dir`: none for `debug` (the dev profile), `--release` for
/// `release`, `--profile <name>` for a custom profile.
fn profile_flag(profile_dir: &Path) -> Vec<String> {
    match profile_dir.file_name().and_then(|n| n.to_str()) {
        None | Some("debug") => Vec::new(),
        Some("release") => vec!["--release".into()],
        Some(name) => vec!["--profile".into(), name.into()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profile_directory_decides_the_flag() {
        assert!(profile_flag(Path::new("/t/target/debug")).is_empty());
        assert_eq!(profile_flag(Path::new("/t/target/release")), ["--release"]);
        assert_eq!(profile_flag(Path::new("/t/target/ci")), ["--profile", "ci"]);
    }
}
