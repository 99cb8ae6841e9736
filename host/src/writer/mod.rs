//! Writes rows to Apache Fluss through `fluss-rs`: Arrow record batches
//! appended to log tables, upserts and deletes on primary-key tables, every
//! write's acknowledgement awaited, transient failures retried with backoff,
//! permanent ones sent to the dead-letter table, all within one deadline
//! per call. One folder a role:
//!
//! - [`tables`]: opening, creating and checking tables, and which tables
//!   rows may be routed to;
//! - [`partitions`]: partitioned tables (rows placed in partitions, their
//!   values named, missing ones created);
//! - [`writes`]: one write of a batch's rows, from the chunks it takes to
//!   the report of every message: [`FlussWriter::write_within`], the one
//!   entry, takes the rows in any form a row stage makes ([`BatchRows`]);
//! - [`send`]: sending rows as each table takes them (Arrow appends, the
//!   lean path's columns, upserts and deletes, partial updates, Arrow IPC);
//! - [`delivery`]: acknowledgements, retries, failures and dead letters;
//! - [`nodelay`]: `TCP_NODELAY` on the client's connections (a workaround);
//! - [`unanswered`]: connections replaced when a write waits
//!   `request_timeout` for its answer (fluss-rs has no request timeout).

mod client_panics;
mod delivery;
mod error;
pub(crate) mod nodelay;
mod partitions;
mod send;
mod sender_thread;
mod settings;
mod tables;
mod unanswered;
mod writes;

use std::collections::HashMap;
use std::sync::Arc;

use fluss::client::{FlussAdmin, FlussConnection};
use fluss_row_codec::{RowKind, RowView};
use tokio::sync::Mutex;

use crate::batch::MessageBatch;
use crate::deadline::Deadline;
use crate::metrics::InstanceMetrics;
use crate::rows::{DeadLetterKind, MessageOutcome};
use crate::schema::{TablePath, TableSchema};
use tables::Table;

pub(crate) use delivery::dead_letter::{check_dead_letter_table, dead_letter_schema};
pub use error::{ClientError, WriteError};
// Chunk-level types: public only under `test-support` (`crate::test_support`).
pub use settings::WriterSettings;
#[cfg(any(test, feature = "test-support"))]
pub(crate) use tables::arrow_schema_of;
pub(crate) use tables::routing::TablePattern;
pub use tables::{AddedColumns, SchemaChange, TableKind};
#[cfg(feature = "test-support")]
pub use writes::chunks::AllMade;
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
pub use writes::chunks::MadeChunks;
#[cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]
pub use writes::finished::{ChunkFinisher, TransformedChunk};
pub use writes::input::{
    ArrowIpcPayloads, BatchRows, ColumnChunks, MadeRows, TransformedChunks, WriteTarget, Writing,
};

/// The Arrow record batch the writer appends for `output`'s rows of the
/// sink's own table (rows must fit `schema`; `arrow_schema` is Fluss's Arrow
/// form of it), for tests and benchmarks to compare against.
#[cfg(any(test, feature = "test-support"))]
pub(crate) fn to_record_batch(
    output: &crate::rows::TransformOutput,
    schema: &TableSchema,
    arrow_schema: &arrow::datatypes::SchemaRef,
) -> Result<arrow::record_batch::RecordBatch, String> {
    crate::rows::to_fluss::record_batch(&own_table_rows(output), schema, arrow_schema)
}

/// `output`'s rows of the sink's own table.
#[cfg(any(test, feature = "test-support"))]
pub(crate) fn own_table_rows(output: &crate::rows::TransformOutput) -> Vec<RowView<'_>> {
    output
        .rows
        .iter()
        .filter(|(e, _)| e.table == 0)
        .map(|(_, row)| row)
        .collect()
}

/// What became of a batch's messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteReport {
    /// Messages whose rows were all acknowledged.
    pub written: usize,
    /// Messages that became no rows.
    pub filtered: usize,
    /// Messages sent to the dead-letter table (or logged, without one).
    pub dead_lettered: usize,
}

impl WriteReport {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &WriteReport) {
        self.written += other.written;
        self.filtered += other.filtered;
        self.dead_lettered += other.dead_lettered;
    }
}

/// What became of a batch's messages, and the dead letters to write (each
/// with its kind from `kinds`), from one outcome per message. With
/// `conversions_are_schema`, the JSON mapping's refusals of a value its
/// column's type does not take are `schema` (see
/// [`WriterSettings::conversions_are_schema`]).
fn report_of<'o>(
    outcomes: &'o [MessageOutcome],
    kinds: &[DeadLetterKind],
    conversions_are_schema: bool,
) -> (WriteReport, Vec<delivery::dead_letter::Letter<'o>>) {
    let mut report = WriteReport::default();
    let mut letters = Vec::new();
    for (i, outcome) in outcomes.iter().enumerate() {
        match outcome {
            MessageOutcome::Rows(0) => report.filtered += 1,
            MessageOutcome::Rows(_) => report.written += 1,
            MessageOutcome::DeadLetter(reason) => {
                report.dead_lettered += 1;
                let kind = match kinds[i] {
                    DeadLetterKind::Mapping
                        if conversions_are_schema
                            && fluss_row_codec::json::MapError::is_conversion(reason) =>
                    {
                        DeadLetterKind::Schema
                    }
                    kind => kind,
                };
                letters.push((i, kind, reason.as_str()));
            }
        }
    }
    (report, letters)
}

/// What a lean write leaves to be told: one outcome and one dead-letter
/// kind per message, and each table's rows by their messages.
struct LeanWritten<'t> {
    outcomes: Vec<MessageOutcome>,
    kinds: Vec<DeadLetterKind>,
    /// Per table written to, the message of each of its rows.
    rows: Vec<(&'t TablePath, &'t [u32])>,
}

impl FlussWriter {
    /// The end of a lean write: the messages Fluss `refused` become `write`
    /// dead letters, each table's rows of the messages still written are
    /// counted, and the dead letters are written; what became of `batch`'s
    /// messages.
    async fn finish_lean_write(
        &self,
        batch: &MessageBatch,
        written: LeanWritten<'_>,
        refused: Vec<(u32, String)>,
        deadline: Deadline,
    ) -> Result<WriteReport, WriteError> {
        let LeanWritten {
            mut outcomes,
            mut kinds,
            rows,
        } = written;
        for (message, reason) in refused {
            outcomes[message as usize] = MessageOutcome::DeadLetter(reason);
            kinds[message as usize] = DeadLetterKind::Write;
        }
        if let Some(metrics) = &self.metrics {
            for (path, messages) in rows {
                let written = messages
                    .iter()
                    .filter(|&&m| matches!(outcomes[m as usize], MessageOutcome::Rows(_)))
                    .count();
                if written > 0 {
                    metrics.rows_written(path, written as u64);
                }
            }
        }
        let (report, letters) = report_of(&outcomes, &kinds, self.settings.conversions_are_schema);
        self.dead_letter(batch, &letters, deadline).await?;
        Ok(report)
    }
}

/// The longest one send waits for room in the client's buffer.
const MAX_BUFFER_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// A row waiting to be written: its message, its kind, its cells.
type PendingRow<'a> = (u32, RowKind, RowView<'a>);

/// Rows written together: a table's index in the output, and a partition.
type GroupKey<'p> = (u16, Option<&'p str>);

/// The Fluss side of the sink: one connection, a writer per table.
pub struct FlussWriter {
    connection: Arc<FlussConnection>,
    admin: Arc<FlussAdmin>,
    settings: WriterSettings,
    tables: Mutex<HashMap<TablePath, Arc<Table>>>,
    router: tables::routing::Router,
    sweeper: Arc<nodelay::Sweeper>,
    sweeping: tokio::task::AbortHandle,
    metrics: Option<Arc<InstanceMetrics>>,
    /// A write was not acknowledged in time: the next one first fetches its
    /// table's metadata again (see `refresh_table_metadata`).
    stale: std::sync::atomic::AtomicBool,
    /// The last write ended without every acknowledgement: Fluss is in
    /// trouble, and the client's buffer may be full (see
    /// [`FlussWriter::append_may_wait`]).
    troubled: std::sync::atomic::AtomicBool,
    /// Schema changes writes met and followed, not yet reported by
    /// [`FlussWriter::follow_tables`].
    changes_met: std::sync::Mutex<Vec<SchemaChange>>,
    /// When the client's connections were last replaced for a write
    /// without an answer (see [`unanswered`]).
    connections_replaced: std::sync::Mutex<Option<std::time::Instant>>,
    /// When the connection's writer client was made (see [`client_panics`]).
    client_made: Mutex<std::time::Instant>,
    /// The tables this writer created and has not yet seen up.
    births: tables::Births,
    /// The tables Fluss's coordinator was seen to know (see
    /// [`tables::KnownTables`]).
    known_tables: tables::KnownTables,
    /// The thread the connection's writer client sends from (see
    /// [`sender_thread`]).
    sender: sender_thread::SenderThread,
}

impl Drop for FlussWriter {
    fn drop(&mut self) {
        self.sweeping.abort();
        // Before the client is dropped: its sender is stopped where it is,
        // instead of being left to send what is left (see [`sender_thread`]).
        self.sender.stop();
        client_panics::forget(self.sender.id());
    }
}

impl FlussWriter {
    /// Connects to the cluster within `delivery_timeout` (the password is
    /// never logged).
    pub async fn connect(settings: WriterSettings) -> Result<Self, WriteError> {
        let deadline = Deadline::after(settings.delivery_timeout);
        Self::connect_within(settings, deadline).await
    }

    /// Connects to the cluster and checks the dead-letter table, within `deadline`.
    pub async fn connect_within(settings: WriterSettings, deadline: Deadline) -> Result<Self, WriteError> {
        let mut config = fluss::config::Config {
            bootstrap_servers: settings.bootstrap_servers.clone(),
            // A send blocks its thread while the client's buffer is full; cap
            // each wait so that a send never outlasts the call's deadline by
            // more than this (BufferExhausted is transient: the sink backs off
            // and sends again while its deadline allows).
            writer_buffer_wait_timeout_ms: settings.buffer_wait_timeout.min(MAX_BUFFER_WAIT).as_millis()
                as u64,
            // The client needs retries for idempotent writes; the sink's own
            // retries (`max_retries`, 0 allowed) and its deadline bound them.
            writer_retries: settings.max_retries.clamp(1, i32::MAX as u32) as i32,
            writer_batch_timeout_ms: settings.batch_timeout.as_millis() as i64,
            ..Default::default()
        };
        if let Some((user, password)) = &settings.sasl {
            config.security_protocol = "sasl".into();
            config.security_sasl_mechanism = "PLAIN".into();
            config.security_sasl_username = user.clone();
            config.security_sasl_password = password.clone();
        }
        let fail = |source: fluss::error::Error| WriteError::Connect {
            servers: settings.bootstrap_servers.clone(),
            source: Box::new(source),
        };
        let late = |step: &str| WriteError::DeadlinePassed {
            step: format!("{step} {}", settings.bootstrap_servers),
        };
        client_panics::watch();
        let sender =
            sender_thread::SenderThread::start().map_err(|source| WriteError::SenderThread { source })?;
        let connection = deadline
            .run(FlussConnection::new(config))
            .await
            .map_err(|_| late("connecting to"))?
            .map_err(fail)?;
        let connection = Arc::new(connection);
        let admin = connection.get_admin().map_err(fail)?;
        deadline
            .run(admin.get_server_nodes())
            .await
            .map_err(|_| late("listing the servers of"))?
            .map_err(fail)?;
        let sweeper = Arc::new(nodelay::Sweeper::new(
            connection.clone(),
            &settings.bootstrap_servers,
        ));
        sweeper.sweep_now().await;
        let sweeping = sweeper.spawn();
        let router = tables::routing::Router::new(
            settings.allowed_tables.clone(),
            settings.dead_letter_table.clone(),
        );
        let writer = Self {
            connection,
            admin,
            router,
            settings,
            tables: Mutex::new(HashMap::new()),
            sweeper,
            sweeping,
            metrics: None,
            stale: std::sync::atomic::AtomicBool::new(false),
            troubled: std::sync::atomic::AtomicBool::new(false),
            changes_met: std::sync::Mutex::new(Vec::new()),
            connections_replaced: std::sync::Mutex::new(None),
            client_made: Mutex::new(std::time::Instant::now()),
            births: tables::Births::default(),
            known_tables: tables::KnownTables::default(),
            sender,
        };
        writer
            .make_writer_client()
            .map_err(|source| WriteError::Connect {
                servers: writer.settings.bootstrap_servers.clone(),
                source: Box::new(source),
            })?;
        if let Some(path) = writer.settings.dead_letter_table.clone() {
            writer.open_dead_letter_table(&path, deadline).await?;
        }
        Ok(writer)
    }

    /// Opens the dead-letter table, creating it when absent; an existing
    /// table of another schema is refused.
    async fn open_dead_letter_table(&self, path: &TablePath, deadline: Deadline) -> Result<(), WriteError> {
        let exists = deadline
            .run(self.admin.table_exists(&tables::fluss_path(path)))
            .await
            .map_err(|_| WriteError::DeadlinePassed {
                step: format!("looking up the dead-letter table {path}"),
            })?
            .map_err(|source| WriteError::Catalog {
                table: path.to_string(),
                step: None,
                source: Box::new(source),
            })?;
        let schema = if exists {
            self.table(path, deadline).await?.schema.clone()
        } else {
            self.ensure_table_within(&dead_letter_schema(path.clone()), deadline)
                .await?
        };
        check_dead_letter_table(&schema).map_err(|reason| WriteError::Table {
            table: format!("{path} (dead_letter_table)"),
            reason,
        })
    }

    /// Counts this writer's acknowledgements, retries, rows and dead
    /// letters in `metrics`.
    pub fn observed_by(mut self, metrics: Arc<InstanceMetrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The settings in force.
    pub fn settings(&self) -> &WriterSettings {
        &self.settings
    }

    /// Creates `schema`'s database and table when absent, then opens it.
    pub async fn ensure_table(&self, schema: &TableSchema) -> Result<TableSchema, WriteError> {
        self.ensure_table_within(schema, Deadline::after(self.settings.delivery_timeout))
            .await
    }

    /// The schema of an existing table, read from Fluss.
    pub async fn table_schema(&self, path: &TablePath) -> Result<TableSchema, WriteError> {
        self.table_schema_within(path, Deadline::after(self.settings.delivery_timeout))
            .await
    }

    /// [`FlussWriter::table_schema`] within `deadline`.
    pub async fn table_schema_within(
        &self,
        path: &TablePath,
        deadline: Deadline,
    ) -> Result<TableSchema, WriteError> {
        Ok(self.table(path, deadline).await?.schema.clone())
    }

    /// Whether the catalog says `path` does not exist (a dropped table);
    /// `false` when Fluss does not answer within `delivery_timeout`.
    pub async fn table_is_gone(&self, path: &TablePath) -> bool {
        let asked = Deadline::after(self.settings.delivery_timeout)
            .run(self.admin.table_exists(&tables::fluss_path(path)))
            .await;
        matches!(asked, Ok(Ok(false)))
    }

    /// Makes the connection's writer client, unless it has one, on this
    /// writer's sender thread (a client made elsewhere, by a table opened
    /// without it, would send from the caller's runtime).
    fn make_writer_client(&self) -> fluss::error::Result<()> {
        let _on_sender = self.sender.enter();
        self.connection.get_or_create_writer_client().map(|_| ())
    }

    /// Closes the writer: what its client still holds gets up to `timeout`
    /// to be sent and acknowledged (a flush), then its sender is stopped
    /// (see [`sender_thread`]): nothing is sent after this returns.
    pub async fn close(&self, timeout: std::time::Duration) {
        let client = {
            let _on_sender = self.sender.enter();
            self.connection.get_or_create_writer_client()
        };
        match client {
            Ok(client) => match tokio::time::timeout(timeout, client.flush()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!("closing the Fluss writer: {e}"),
                Err(_) => tracing::warn!(
                    "closing the Fluss writer: rows not acknowledged within {timeout:?} are not sent"
                ),
            },
            Err(e) => tracing::warn!("closing the Fluss writer: {e}"),
        }
        self.sender.stop();
    }

    /// Closes the writer without sending what its client still holds: its
    /// sender is stopped at once. For a writer whose every batch not yet
    /// acknowledged is kept in the spool for the next open, which would
    /// write again whatever this one sent after its close.
    pub fn close_without_sending(&self) {
        self.sender.stop();
    }
}
