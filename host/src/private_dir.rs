//! Folders only this process's user can write to: the compiled-component
//! cache (native code is loaded from it unchecked) and the spool (batches
//! are replayed from it into Fluss). A folder or file that is a symlink,
//! belongs to another user, or is writable by group or others is refused.

use std::fs::DirBuilder;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;

/// Why a folder is not used.
#[derive(Debug)]
pub(crate) enum Unfit {
    /// It cannot be created or read.
    Io(std::io::Error),
    /// Someone other than this user could write there; the reason says how.
    NotPrivate(String),
}

/// Why `metadata` (of a folder or a file) cannot be trusted, if it cannot.
pub(crate) fn untrusted(metadata: &std::fs::Metadata) -> Option<String> {
    let mode = metadata.permissions().mode() & 0o777;
    if metadata.file_type().is_symlink() {
        return Some("it is a symbolic link".into());
    }
    if metadata.uid() != rustix::process::geteuid().as_raw() {
        return Some(format!(
            "it belongs to user id {}, not to this process's user",
            metadata.uid()
        ));
    }
    if mode & 0o022 != 0 {
        return Some(format!("it is writable by group or others (mode {mode:04o})"));
    }
    None
}

/// Creates `dir` (mode 0700, its parents as needed) when absent and checks
/// that it is a private folder.
pub(crate) fn ensure(dir: &Path) -> Result<(), Unfit> {
    if let Some(parent) = dir.parent() {
        std::fs::create_dir_all(parent).map_err(Unfit::Io)?;
    }
    match DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(Unfit::Io(e)),
    }
    let metadata = std::fs::symlink_metadata(dir).map_err(Unfit::Io)?;
    if let Some(reason) = untrusted(&metadata) {
        return Err(Unfit::NotPrivate(reason));
    }
    if !metadata.is_dir() {
        return Err(Unfit::NotPrivate("it is not a folder".into()));
    }
    Ok(())
}
