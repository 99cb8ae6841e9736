//! Why an instance could not open or a batch could not be written.

use std::sync::Arc;

use crate::config::ConfigError;
use crate::schema::TablePath;
use crate::transform::TransformError;
use crate::writer::WriteError;

/// Why an instance could not open or a batch could not be written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PipelineError {
    /// The config is refused.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The transform did not load, or failed a batch as a whole.
    #[error(transparent)]
    Transform(#[from] TransformError),
    /// Fluss could not be reached or did not take the rows.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// The sink table does not match what the config says it is.
    #[error("table {table}: {reason}")]
    TableMismatch {
        /// The sink table.
        table: TablePath,
        /// What does not match.
        reason: String,
    },
    /// The spool could not be opened, or a batch could not be made durable.
    #[error(transparent)]
    Spool(#[from] crate::spool::SpoolError),
    /// The metrics endpoint could not start.
    #[error(transparent)]
    Metrics(#[from] crate::metrics::server::ServeError),
    /// Making a batch's rows failed (shared by everyone waiting for them).
    #[error(transparent)]
    Rows(Arc<PipelineError>),
    /// A worker task ended without a word (the runtime is shutting down).
    #[error("internal error: {step}: the task ended without an answer")]
    Unanswered {
        /// What the task was doing.
        step: &'static str,
    },
    /// A worker task ended without an answer (it panicked).
    #[error("internal error: {step}: {source}")]
    Worker {
        /// What the task was doing.
        step: &'static str,
        /// How it ended.
        source: tokio::task::JoinError,
    },
}
