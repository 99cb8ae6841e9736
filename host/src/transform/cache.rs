//! The on-disk cache of compiled components, keyed by the component's
//! SHA-256 and the engine's compatibility hash (Wasmtime version, target,
//! and every setting that changes compiled code).

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Where compiled artifacts go when the config names no folder.
pub fn default_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(dir).join("iggy-fluss-sink");
    }
    if let Some(home) = std::env::var_os("HOME") {
        return PathBuf::from(home).join(".cache/iggy-fluss-sink");
    }
    std::env::temp_dir().join("iggy-fluss-sink-cache")
}

/// The cache file for `bytes` compiled by `engine`.
pub fn artifact_path(dir: &Path, engine: &Engine, bytes: &[u8]) -> PathBuf {
    let digest = Sha256::digest(bytes);
    let mut hasher = DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    dir.join(format!("{hex}-{:016x}.cwasm", hasher.finish()))
}

/// How a component was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Loaded from the cache.
    Cached,
    /// Compiled now (and stored, when a cache folder is set).
    Compiled,
}

/// Loads `bytes` compiled from the cache in `dir`, or compiles and stores them.
/// A cache entry that cannot be read or does not match is compiled again.
pub fn load_or_compile(
    engine: &Engine,
    bytes: &[u8],
    dir: Option<&Path>,
) -> wasmtime::Result<(Component, Source)> {
    let Some(dir) = dir else {
        return Ok((Component::new(engine, bytes)?, Source::Compiled));
    };
    let path = artifact_path(dir, engine, bytes);
    // Read into memory rather than mapping the file, so that another process
    // replacing or truncating the file cannot fault this one.
    if let Ok(artifact) = std::fs::read(&path) {
        // SAFETY: the file was written by `Component::serialize` of an engine
        // with the same compatibility hash (it is in the file's name), in a
        // folder owned by the sink; Wasmtime re-checks the header on load.
        match unsafe { Component::deserialize(engine, &artifact) } {
            Ok(component) => return Ok((component, Source::Cached)),
            Err(e) => {
                tracing::warn!(path = %path.display(), "ignoring unusable compiled-component cache entry: {e}")
            }
        }
    }
    let component = Component::new(engine, bytes)?;
    if let Err(e) = store(&path, &component.serialize()?) {
        tracing::warn!(path = %path.display(), "cannot cache the compiled component: {e}");
    }
    Ok((component, Source::Compiled))
}

fn store(path: &Path, artifact: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().expect("artifact paths have a folder");
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        std::process::id(),
        path.file_name().unwrap().to_string_lossy()
    ));
    std::fs::write(&tmp, artifact)?;
    std::fs::rename(&tmp, path)
}
