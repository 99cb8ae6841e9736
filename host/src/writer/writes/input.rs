//! The one way a batch's rows are written: [`FlussWriter::write_within`],
//! with the rows in one of the forms a row stage makes them in ([`BatchRows`]).
//! Each form goes the way its tables take rows ([`TableKind`], chosen when a
//! table is opened): Arrow columns appended to log tables whose batches
//! land whole, whole rows upserted to unpartitioned primary-key tables,
//! encoded rows sent row by row to the rest.
//!
//! [`TableKind`]: crate::writer::TableKind

use std::sync::Arc;

use futures::future::BoxFuture;

use crate::batch::MessageBatch;
use crate::deadline::Deadline;
use crate::rows::columns::ColumnOutput;
use crate::rows::keyed::KeyedOutput;
use crate::rows::{DeadLetterKind, TransformOutput};
use crate::schema::TablePath;
use crate::writer::writes::chunks::{AllMade, MadeChunks};
use crate::writer::writes::finished::TransformedChunk;
use crate::writer::{FlussWriter, WriteError, WriteReport};

/// Where and until when a batch's rows are written.
pub struct WriteTarget<'a> {
    writer: &'a FlussWriter,
    batch: &'a MessageBatch,
    table: &'a TablePath,
    deadline: Deadline,
}

/// A write under way: what became of the batch's messages.
pub type Writing<'a> = BoxFuture<'a, Result<WriteReport, WriteError>>;

/// A batch's rows in one of the forms the writer takes.
pub trait BatchRows<'a>: Send + 'a {
    /// Writes these rows of the target's batch to its table and the tables
    /// the rows name (see [`FlussWriter::write_within`]).
    fn write_to(self, to: WriteTarget<'a>) -> Writing<'a>;
}

/// Rows made whole before the write (a spool replay, routed JSON, partial
/// updates, a stage that makes encoded rows), with `stage` the kind of the
/// dead letters made while they were made.
pub struct MadeRows {
    rows: Arc<TransformOutput>,
    stage: DeadLetterKind,
}

impl MadeRows {
    /// `rows`, made by `stage`.
    pub fn new(rows: impl Into<Arc<TransformOutput>>, stage: DeadLetterKind) -> Self {
        Self {
            rows: rows.into(),
            stage,
        }
    }
}

impl<'a> BatchRows<'a> for MadeRows {
    fn write_to(self, to: WriteTarget<'a>) -> Writing<'a> {
        let chunks = AllMade(std::iter::once(Arc::new(TransformedChunk::from(self.rows))));
        let (w, batch, table) = (to.writer, to.batch, to.table);
        Box::pin(w.write_transformed_within(batch, chunks, table, self.stage, to.deadline))
    }
}

/// A transform's rows, one [`TransformedChunk`] per transform call in
/// message order, each written as soon as it is made; `stage` is the kind of
/// the dead letters made while they were made.
pub struct TransformedChunks<C> {
    /// The chunks, awaited until made.
    pub chunks: C,
    /// Where the dead letters made with the rows came from.
    pub stage: DeadLetterKind,
}

impl<'a, C: MadeChunks<Chunk = Arc<TransformedChunk>> + 'a> BatchRows<'a> for TransformedChunks<C> {
    fn write_to(self, to: WriteTarget<'a>) -> Writing<'a> {
        let (w, batch, table) = (to.writer, to.batch, to.table);
        Box::pin(w.write_transformed_within(batch, self.chunks, table, self.stage, to.deadline))
    }
}

/// The JSON mapping's rows made straight into the sink table's Arrow
/// columns, chunk by chunk, for a table of [`TableKind::Columns`].
///
/// [`TableKind::Columns`]: crate::writer::TableKind::Columns
pub struct ColumnChunks<C>(pub C);

impl<'a, C: MadeChunks<Chunk = ColumnOutput> + 'a> BatchRows<'a> for ColumnChunks<C> {
    fn write_to(self, to: WriteTarget<'a>) -> Writing<'a> {
        Box::pin(
            to.writer
                .write_columns_within(to.batch, self.0, to.table, to.deadline),
        )
    }
}

/// The JSON mapping's whole rows made straight into fluss-rs rows, for a
/// table of [`TableKind::KeyedRows`].
///
/// [`TableKind::KeyedRows`]: crate::writer::TableKind::KeyedRows
impl<'a> BatchRows<'a> for KeyedOutput {
    fn write_to(self, to: WriteTarget<'a>) -> Writing<'a> {
        Box::pin(
            to.writer
                .write_keyed_within(to.batch, self, to.table, to.deadline),
        )
    }
}

/// The batch's payloads themselves, Arrow IPC streams appended as they are
/// to a log table.
pub struct ArrowIpcPayloads;

impl<'a> BatchRows<'a> for ArrowIpcPayloads {
    fn write_to(self, to: WriteTarget<'a>) -> Writing<'a> {
        Box::pin(to.writer.write_arrow_ipc_within(to.batch, to.table, to.deadline))
    }
}

impl FlussWriter {
    /// Writes `rows`, made of `batch`, to `table` (the sink's own; routed
    /// rows name theirs), waits for every acknowledgement, and dead-letters
    /// what cannot be written, all before `deadline`. An error means some
    /// messages may not be in Fluss.
    pub async fn write_within<'a>(
        &'a self,
        batch: &'a MessageBatch,
        rows: impl BatchRows<'a>,
        table: &'a TablePath,
        deadline: Deadline,
    ) -> Result<WriteReport, WriteError> {
        let to = WriteTarget {
            writer: self,
            batch,
            table,
            deadline,
        };
        rows.write_to(to).await
    }

    /// [`FlussWriter::write_within`] within `delivery_timeout`.
    pub async fn write<'a>(
        &'a self,
        batch: &'a MessageBatch,
        rows: impl BatchRows<'a>,
        table: &'a TablePath,
    ) -> Result<WriteReport, WriteError> {
        let deadline = Deadline::after(self.settings.delivery_timeout);
        self.write_within(batch, rows, table, deadline).await
    }
}
