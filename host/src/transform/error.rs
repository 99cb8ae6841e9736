//! Why a transform could not be loaded or run, and how a failed call is
//! described in a dead letter.

use std::path::PathBuf;

use wasmtime::Trap;

use super::{Limits, WIT_PACKAGE, WIT_VERSION, cache};

/// Why a transform could not be loaded or run.
#[derive(Debug, thiserror::Error)]
pub enum TransformError {
    /// The file is missing or unreadable.
    #[error("cannot read transform {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a component.
    #[error("transform {path} is not a WebAssembly component: {reason}")]
    NotAComponent {
        /// The file.
        path: PathBuf,
        /// What it is instead.
        reason: String,
    },
    /// The component did not compile.
    #[error("transform {path} does not compile: {source:#}")]
    Compile {
        /// The file.
        path: PathBuf,
        /// The compiler's error.
        source: wasmtime::Error,
    },
    /// The component targets another version of this project's WIT package.
    #[error(
        "transform {path} was built against {found}, but this sink implements {WIT_PACKAGE}@{WIT_VERSION}; rebuild it against this sink's wit/ folder"
    )]
    IncompatibleVersion {
        /// The file.
        path: PathBuf,
        /// The interface it imports.
        found: String,
    },
    /// The component is not a `transform` world (missing export, other imports).
    #[error(
        "transform {path} does not implement the `transform` world of {WIT_PACKAGE}@{WIT_VERSION}: {reason}"
    )]
    WrongWorld {
        /// The file.
        path: PathBuf,
        /// What is missing or foreign.
        reason: String,
    },
    /// Instantiation failed (start function trapped, memory cap at start, ...).
    #[error("cannot instantiate transform {path}: {reason}")]
    Instantiate {
        /// The file.
        path: PathBuf,
        /// Why, in the words of a dead letter.
        reason: String,
        /// Wasmtime's error.
        #[source]
        source: wasmtime::Error,
    },
    /// The guest's `init` returned an error or failed.
    #[error("transform {path} refused to start: {reason}")]
    Init {
        /// The file.
        path: PathBuf,
        /// The guest's message.
        reason: String,
    },
    /// A setting that cannot work.
    #[error("invalid transform setting: {0}")]
    Setting(String),
    /// The compiled-component cache folder cannot be trusted or created.
    #[error(transparent)]
    Cache(#[from] cache::CacheError),
}

/// Describes a failed call for a dead letter or a log line.
pub(super) fn describe_failure(error: &wasmtime::Error, limits: &Limits, guest_said: Option<&str>) -> String {
    let mut text = match error.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => format!(
            "the transform ran past its CPU deadline of {:?} (transform.call_timeout)",
            limits.call_timeout
        ),
        Some(Trap::StackOverflow) => format!(
            "the transform overflowed its {} KiB stack (transform.max_stack)",
            limits.max_stack / 1024
        ),
        Some(trap) => format!("the transform trapped: {trap}"),
        None => format!("the transform failed: {}", error.root_cause()),
    };
    if let Some(said) = guest_said {
        text.push_str(&format!(" (it logged: {said})"));
    }
    text
}
