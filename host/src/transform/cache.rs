//! The on-disk cache of compiled components, keyed by the component's
//! SHA-256 and the engine's compatibility hash (Wasmtime version, target,
//! and every setting that changes compiled code).
//!
//! A cached artifact is native code that Wasmtime loads without checking
//! it, so the cache is trusted only when nobody else can write to it: its
//! folder is created `0700`, and a folder (or artifact) that is a symlink,
//! belongs to another user, or is writable by group or others is refused.
//! Artifacts are written to a temporary file of a random name created
//! exclusively (never through a symlink), then renamed into place. There is
//! no shared fallback: without `XDG_CACHE_HOME` or `HOME` (and no
//! `transform.cache_dir`), components are compiled at every load.

use std::fs::{File, OpenOptions};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::private_dir::{Unfit, untrusted};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Where compiled artifacts go when the config names no folder: under
/// `XDG_CACHE_HOME` or `HOME`, or nowhere.
pub(crate) fn default_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir).join("iggy-fluss-sink"));
    }
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|home| PathBuf::from(home).join(".cache/iggy-fluss-sink"))
}

/// Why a cache folder is not used.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The folder cannot be created or read.
    #[error("compiled-component cache {dir}: {source}")]
    Io {
        /// The folder.
        dir: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Someone other than this user could put native code there.
    #[error(
        "compiled-component cache {dir} is not private: {reason}; make it a folder of this user with mode 0700 \
         (chmod 700), or set transform.cache_dir to another folder"
    )]
    NotPrivate {
        /// The folder.
        dir: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
}

/// The cache file for `bytes` compiled by `engine`.
pub(crate) fn artifact_path(dir: &Path, engine: &Engine, bytes: &[u8]) -> PathBuf {
    let digest = Sha256::digest(bytes);
    let mut hasher = DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    dir.join(format!("{hex}-{:016x}.cwasm", hasher.finish()))
}

/// How a component was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadSource {
    /// Loaded from the cache.
    Cached,
    /// Compiled now (and stored, when a cache folder is set).
    Compiled,
}

/// Creates `dir` (mode 0700) when absent and checks that it is private.
pub(crate) fn ensure_private(dir: &Path) -> Result<(), CacheError> {
    crate::private_dir::ensure(dir).map_err(|unfit| match unfit {
        Unfit::Io(source) => CacheError::Io {
            dir: dir.to_path_buf(),
            source,
        },
        Unfit::NotPrivate(reason) => CacheError::NotPrivate {
            dir: dir.to_path_buf(),
            reason,
        },
    })
}

/// Reads the artifact at `path` without following a symlink; `None` when
/// there is none, or it is not this user's alone (then it is ignored with a
/// warning and replaced).
fn read_artifact(path: &Path) -> Option<Vec<u8>> {
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .ok()?;
    let metadata = file.metadata().ok()?;
    if let Some(reason) = untrusted(&metadata) {
        tracing::warn!(path = %path.display(), "ignoring a compiled-component cache entry: {reason}");
        return None;
    }
    let mut bytes = Vec::with_capacity(metadata.len() as usize);
    file.read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// Loads `bytes` compiled from the cache in `dir`, or compiles and stores them.
/// A cache entry that cannot be read or does not match is compiled again.
/// `dir` must have passed [`ensure_private`].
pub(crate) fn load_or_compile(
    engine: &Engine,
    bytes: &[u8],
    dir: Option<&Path>,
) -> wasmtime::Result<(Component, LoadSource)> {
    let Some(dir) = dir else {
        return Ok((Component::new(engine, bytes)?, LoadSource::Compiled));
    };
    let path = artifact_path(dir, engine, bytes);
    // Read into memory rather than mapping the file, so that another process
    // replacing or truncating the file cannot fault this one.
    if let Some(artifact) = read_artifact(&path) {
        // SAFETY: the file was written by `Component::serialize` of an engine
        // with the same compatibility hash (it is in the file's name), in a
        // folder that only this user can write to (checked by
        // `ensure_private`), and is itself this user's alone (checked by
        // `read_artifact`); Wasmtime re-checks the header on load.
        match unsafe { Component::deserialize(engine, &artifact) } {
            Ok(component) => return Ok((component, LoadSource::Cached)),
            Err(e) => {
                tracing::warn!(path = %path.display(), "ignoring unusable compiled-component cache entry: {e}")
            }
        }
    }
    let component = Component::new(engine, bytes)?;
    if let Err(e) = store(&path, &component.serialize()?) {
        tracing::warn!(path = %path.display(), "cannot cache the compiled component: {e}");
    }
    Ok((component, LoadSource::Compiled))
}

/// Writes `artifact` to `path` through a fresh temporary file of a random
/// name, created exclusively with mode 0600, then renamed into place.
fn store(path: &Path, artifact: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().expect("artifact paths have a folder");
    let tmp = dir.join(format!(".{:016x}.tmp", fastrand::u64(..)));
    let mut file: File = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    let written = file.write_all(artifact).and_then(|()| file.sync_all());
    drop(file);
    match written.and_then(|()| std::fs::rename(&tmp, path)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_new_folder_is_created_private() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("cache");
        ensure_private(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }

    #[test]
    fn a_world_writable_folder_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("shared");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let error = ensure_private(&dir).unwrap_err().to_string();
        assert!(
            error.contains("writable by group or others (mode 0777)"),
            "{error}"
        );
        assert!(error.contains("chmod 700"), "{error}");
    }

    #[test]
    fn a_symlinked_folder_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let real = root.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = root.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let error = ensure_private(&link).unwrap_err().to_string();
        assert!(error.contains("symbolic link"), "{error}");
    }

    #[test]
    fn an_artifact_others_can_write_is_not_read() {
        let root = tempfile::tempdir().unwrap();
        let path = root.path().join("a.cwasm");
        std::fs::write(&path, b"native code").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert_eq!(read_artifact(&path), None);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_artifact(&path).as_deref(), Some(&b"native code"[..]));
    }

    #[test]
    fn a_symlinked_artifact_is_not_followed() {
        let root = tempfile::tempdir().unwrap();
        let target = root.path().join("elsewhere");
        std::fs::write(&target, b"planted").unwrap();
        let path = root.path().join("a.cwasm");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        assert_eq!(read_artifact(&path), None);
        store(&path, b"compiled").unwrap();
        assert_eq!(
            std::fs::read(&target).unwrap(),
            b"planted",
            "the symlink's target is untouched"
        );
        assert_eq!(read_artifact(&path).as_deref(), Some(&b"compiled"[..]));
    }
}
