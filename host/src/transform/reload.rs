//! Hot reload: a new version of the component file is compiled, `init`ed
//! and checked off the hot path, then swapped in between two batches. A
//! batch takes the version in force when it starts ([`Reloadable::current`])
//! and keeps it for all its calls, retries and bisection included, so no
//! message is processed by two versions or by none. A version that does
//! not compile, fails `init` or fails the self-check is refused and the
//! one in force keeps running.

use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;

use super::{Transform, TransformError, TransformSpec, version_of};
use crate::batch::{MessageBatch, Source};
use crate::schema::TableSchema;

/// What a check of the file found.
#[derive(Debug)]
pub(crate) enum ReloadOutcome {
    /// The file is as it was (or holds a version already refused).
    Unchanged,
    /// A new version is in force.
    Reloaded {
        /// The version before.
        from: String,
        /// The version now.
        to: String,
    },
    /// A new version was refused; the old one keeps running.
    Refused {
        /// The refused file's version, when it could be read.
        version: Option<String>,
        /// Why.
        reason: String,
    },
}

/// What identifies the file's contents cheaply: modification time and size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    Some(Stamp {
        modified: meta.modified().ok(),
        len: meta.len(),
    })
}

/// A transform whose file may be replaced while the sink runs.
pub(crate) struct Reloadable {
    spec: TransformSpec,
    /// The tables every version is initialised with (the sink's first).
    tables: RwLock<Vec<TableSchema>>,
    current: RwLock<Arc<Transform>>,
    /// The file's stamp when last looked at.
    seen: Mutex<Option<Stamp>>,
    /// The last version refused, not tried again until the file changes.
    refused: Mutex<Option<String>>,
}

impl Reloadable {
    /// Loads the transform of `spec` for `tables` (the sink's first).
    pub(crate) fn load(spec: TransformSpec, tables: &[TableSchema]) -> Result<Self, TransformError> {
        let seen = stamp(&spec.path);
        let transform = Transform::load(&spec, tables)?;
        Ok(Self {
            spec,
            tables: RwLock::new(tables.to_vec()),
            current: RwLock::new(Arc::new(transform)),
            seen: Mutex::new(seen),
            refused: Mutex::new(None),
        })
    }

    /// The version in force; a batch keeps the one it got for all its calls.
    pub(crate) fn current(&self) -> Arc<Transform> {
        self.current.read().expect("transform lock poisoned").clone()
    }

    /// Looks at the file and, when it holds a new version, loads it, checks
    /// it and swaps it in. Blocking (it may compile): call it off the async
    /// workers.
    pub(crate) fn check(&self) -> ReloadOutcome {
        let now = stamp(&self.spec.path);
        {
            let mut seen = self.seen.lock().expect("reload state poisoned");
            if *seen == now {
                return ReloadOutcome::Unchanged;
            }
            *seen = now;
        }
        let bytes = match std::fs::read(&self.spec.path) {
            Ok(b) => b,
            Err(e) => {
                return ReloadOutcome::Refused {
                    version: None,
                    reason: format!("cannot read {}: {e}", self.spec.path.display()),
                };
            }
        };
        let version = version_of(&bytes);
        let from = self.current().version().to_string();
        if version == from || self.refused.lock().expect("reload state poisoned").as_deref() == Some(&version)
        {
            return ReloadOutcome::Unchanged;
        }
        let refuse = |reason: String| {
            *self.refused.lock().expect("reload state poisoned") = Some(version.clone());
            ReloadOutcome::Refused {
                version: Some(version.clone()),
                reason,
            }
        };
        let tables = self.tables.read().expect("tables lock poisoned").clone();
        let candidate = match Transform::load(&self.spec, &tables) {
            Ok(t) => t,
            Err(e) => return refuse(e.to_string()),
        };
        if candidate.version() != version {
            // The file changed again while it was read: look again next time.
            *self.seen.lock().expect("reload state poisoned") = None;
            return ReloadOutcome::Unchanged;
        }
        if let Err(reason) = self_check(&candidate) {
            return refuse(reason);
        }
        *self.current.write().expect("transform lock poisoned") = Arc::new(candidate);
        ReloadOutcome::Reloaded { from, to: version }
    }
}

impl Reloadable {
    /// Initialises the version in force again for `tables` (the sink's
    /// first): its tables' columns changed. The version is loaded anew from
    /// the file it came from, checked as a reload is, and swapped in; on an
    /// error, the version in force keeps running with the tables it had.
    /// Blocking (it may compile): call it off the async workers.
    pub(crate) fn follow_tables(&self, tables: &[TableSchema]) -> Result<(), TransformError> {
        let candidate = Transform::load(&self.spec, tables)?;
        self_check(&candidate).map_err(TransformError::Setting)?;
        *self.tables.write().expect("tables lock poisoned") = tables.to_vec();
        *self.current.write().expect("transform lock poisoned") = Arc::new(candidate);
        Ok(())
    }
}

/// A new version must take an empty batch and return no outcome.
fn self_check(transform: &Transform) -> Result<(), String> {
    let empty = MessageBatch::new(Source {
        stream: String::new(),
        topic: String::new(),
        partition: 0,
    });
    let output = transform
        .process(&empty)
        .map_err(|e| format!("self-check (an empty batch) failed: {e}"))?;
    if !output.outcomes.is_empty() || !output.rows.is_empty() {
        return Err(format!(
            "self-check: an empty batch gave {} outcomes and {} rows",
            output.outcomes.len(),
            output.rows.len()
        ));
    }
    Ok(())
}
