//! A transform's chunks finished beside the transform: on the blocking
//! thread that made a chunk's rows, right after the call, rows bound for
//! the sink's own log table are checked and put in the lean path's Arrow
//! columns, so that the writer's one thread only sends them and chunks are
//! made into columns on every core. A chunk with rows for any other table
//! (routed rows must be resolved first), or one finished for a table that
//! has been opened anew since, is made into columns by the writer as
//! before: the same checks, the same dead-letter texts.

use std::sync::Arc;

use super::FlussWriter;
use super::tables::Table;
use crate::batch::MessageBatch;
use crate::rows::TransformOutput;
use crate::rows::columns::ColumnOutput;
use crate::rows::guest_columns::{LeanTable, guest_columns};
use crate::schema::TablePath;

/// A transform's rows for one chunk of a batch's messages, with the lean
/// path's columns of them when those were made beside the rows.
pub struct TransformedChunk {
    /// The chunk's rows as the transform made them (what the spool keeps).
    pub rows: Arc<TransformOutput>,
    /// `rows` in the columns of the table they were made for.
    columns: Option<(Arc<Table>, ColumnOutput)>,
}

impl From<Arc<TransformOutput>> for TransformedChunk {
    /// Rows alone: the writer makes them into what its table takes.
    fn from(rows: Arc<TransformOutput>) -> Self {
        Self { rows, columns: None }
    }
}

impl std::fmt::Debug for TransformedChunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransformedChunk")
            .field("rows", &self.rows)
            .field("columns", &self.columns.as_ref().map(|(_, columns)| columns))
            .finish()
    }
}

impl TransformedChunk {
    /// The columns of the rows, when they were made for `table` (the very
    /// table the writer has open now, not an earlier opening of it).
    pub(super) fn columns_for(&self, table: &Arc<Table>) -> Option<&ColumnOutput> {
        match &self.columns {
            Some((made_for, columns)) if Arc::ptr_eq(made_for, table) => Some(columns),
            _ => None,
        }
    }

    /// Whether the rows come with their columns made.
    pub fn has_columns(&self) -> bool {
        self.columns.is_some()
    }
}

/// Makes a transform's chunks into the lean path's columns of one table
/// where the transform made them (see [`FlussWriter::chunk_finisher`]).
#[derive(Clone)]
pub struct ChunkFinisher {
    table: Arc<Table>,
    include_metadata: bool,
}

impl ChunkFinisher {
    /// `rows`, made of `chunk` (the chunk's own messages), with their Arrow
    /// columns when every row is for the sink's own table; rows alone when
    /// one names a table, or when the columns cannot be built (the writer
    /// then says why, as it would have).
    pub fn finish(&self, rows: Arc<TransformOutput>, chunk: &MessageBatch) -> TransformedChunk {
        if !rows.rows.tables().is_empty() {
            return rows.into();
        }
        let table = [Some(self.lean_table())];
        let messages = 0..rows.outcomes.len();
        let columns = guest_columns(&rows, messages, chunk, &table, self.include_metadata);
        self.with_columns(rows, columns)
    }

    /// The table whose columns the finisher makes, as the lean path takes it.
    pub(crate) fn lean_table(&self) -> LeanTable<'_> {
        LeanTable {
            schema: &self.table.schema,
            arrow_schema: &self.table.arrow_schema,
        }
    }

    /// Whether the columns hold the metadata columns' values.
    pub(crate) fn include_metadata(&self) -> bool {
        self.include_metadata
    }

    /// `rows` with `columns` made of them for the finisher's table (see
    /// [`ChunkFinisher::lean_table`]); rows alone when the columns could
    /// not be made or the rows name another table.
    pub(crate) fn with_columns(
        &self,
        rows: Arc<TransformOutput>,
        columns: Result<ColumnOutput, String>,
    ) -> TransformedChunk {
        match columns {
            Ok(columns) if rows.rows.tables().is_empty() => TransformedChunk {
                rows,
                columns: Some((self.table.clone(), columns)),
            },
            _ => rows.into(),
        }
    }
}

impl FlussWriter {
    /// A finisher of chunks of rows for `path`, when `path` is open already
    /// and takes the lean path's columns (a log table whose Arrow batches
    /// land whole); `None` otherwise, without waiting for Fluss: the writer
    /// then makes the rows into what the table takes itself.
    pub async fn chunk_finisher(&self, path: &TablePath) -> Option<ChunkFinisher> {
        let table = self.open_table_now(path).await?;
        table.takes_columns().then(|| ChunkFinisher {
            table,
            include_metadata: self.settings.include_metadata,
        })
    }
}
