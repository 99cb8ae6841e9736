//! What became of a message (one outcome each), and, for those that became
//! no rows, which stage of the sink refused them: the dead-letter table's
//! `error_kind`, and the metrics' `kind` label.

/// What became of one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageOutcome {
    /// It became this many rows; zero means it was filtered out.
    Rows(u32),
    /// It cannot become rows, for this reason.
    DeadLetter(String),
}

/// Where in the sink a message failed: the dead-letter table's `error_kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeadLetterKind {
    /// The JSON mapping could not make a row of the payload.
    Mapping,
    /// The WebAssembly transform failed on the message or dead-lettered it.
    Transform,
    /// An Arrow IPC payload did not decode or fit the table.
    ArrowIpc,
    /// A row named a table that cannot be had (unknown, not allowed).
    Table,
    /// A row does not fit its table's schema.
    Schema,
    /// A row's partition key is NULL or unusable, or its partition does
    /// not exist and may not be created.
    Partition,
    /// Fluss refused the message's rows for good.
    Write,
}

impl DeadLetterKind {
    /// Every kind.
    pub const ALL: [DeadLetterKind; 7] = [
        Self::Mapping,
        Self::Transform,
        Self::ArrowIpc,
        Self::Table,
        Self::Schema,
        Self::Partition,
        Self::Write,
    ];

    /// The name stored in the dead-letter table.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Mapping => "mapping",
            Self::Transform => "transform",
            Self::ArrowIpc => "arrow_ipc",
            Self::Table => "table",
            Self::Schema => "schema",
            Self::Partition => "partition",
            Self::Write => "write",
        }
    }
}

impl std::fmt::Display for DeadLetterKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
