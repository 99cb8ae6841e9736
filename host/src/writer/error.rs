//! Why a write failed as a whole, in words a user can act on.

/// Why a write failed as a whole.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// No connection to the cluster.
    #[error("cannot connect to Fluss at {servers}: {source}")]
    Connect {
        /// The bootstrap servers.
        servers: String,
        /// The client's error.
        source: ClientError,
    },
    /// The thread the writer's Fluss client sends from could not be started
    /// (the process is out of threads or memory).
    #[error(
        "cannot start the thread the Fluss writer client sends from: {source}; the process may be out of \
         threads or memory (ulimit -u, the container's pids limit)"
    )]
    SenderThread {
        /// Why the operating system refused.
        #[source]
        source: std::io::Error,
    },
    /// Fluss failed a request about a table (looking it up, creating it or
    /// its partitions).
    #[error("table {table}: {}", step_and(step.as_deref(), source))]
    Catalog {
        /// Which table.
        table: String,
        /// What the writer asked for, when it says more than the error.
        step: Option<String>,
        /// The client's error.
        source: ClientError,
    },
    /// A table could not be found, created or read.
    #[error("table {table}: {reason}")]
    Table {
        /// Which table.
        table: String,
        /// What went wrong.
        reason: String,
    },
    /// Fluss did not acknowledge a write before the call's deadline or within its retries.
    #[error(
        "Fluss did not acknowledge {what} before the deadline (delivery_timeout) or within {retries} retries: {reason}"
    )]
    Undelivered {
        /// What was being written.
        what: String,
        /// Retries made.
        retries: u32,
        /// The last error, or why there is none.
        reason: String,
        /// The last error the client gave, when there was one.
        #[source]
        last_error: Option<ClientError>,
    },
    /// The table's schema changed while it was written: the rows not yet
    /// acknowledged must be made again for its new columns.
    #[error(
        "table {table} changed in Fluss while it was written (a column was added): the rows are written again for its new columns"
    )]
    SchemaChanged {
        /// Which table.
        table: String,
    },
    /// Fluss did not answer a step other than a write before the deadline.
    #[error("Fluss did not answer before the deadline (delivery_timeout) while {step}")]
    DeadlinePassed {
        /// What the writer was doing.
        step: String,
    },
}

/// An error of fluss-rs's (`fluss::error::Error`; boxed, it is large), kept
/// as a [`WriteError`]'s source: downcast it to read it.
pub type ClientError = Box<dyn std::error::Error + Send + Sync>;

/// `step: error`, or the error alone.
fn step_and(step: Option<&str>, error: &ClientError) -> String {
    match step {
        Some(step) => format!("{step}: {error}"),
        None => error.to_string(),
    }
}
