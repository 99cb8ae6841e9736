//! A transform's chunks finished beside the transform: on the blocking
//! thread that made a chunk's rows, right after the call, rows bound for
//! the sink's own log table, and for the log tables it routes to that the
//! writer has open already, are checked and put in the lean path's Arrow
//! columns, so that the writer's one thread only sends them and chunks are
//! made into columns on every core. A chunk with rows for any other table
//! (one not open yet, or not a log table whose batches land whole), or one
//! finished for a table that has been opened anew since, is made into
//! columns by the writer as before: the same checks, the same dead-letter
//! texts. The writer resolves every table a finished chunk names as it
//! would the rows' own (`allowed_tables`, the tables-per-batch cap) and
//! takes its columns only when each is the very table they were made for.
#![cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]

use std::collections::HashMap;
use std::sync::Arc;

use crate::batch::MessageBatch;
use crate::rows::TransformOutput;
use crate::rows::columns::ColumnOutput;
use crate::rows::guest_columns::{LeanRoutes, LeanTable, guest_columns};
use crate::schema::TablePath;
use crate::writer::FlussWriter;
use crate::writer::tables::Table;

/// A transform's rows for one chunk of a batch's messages, with the lean
/// path's columns of them when those were made beside the rows.
pub struct TransformedChunk {
    /// The chunk's rows as the transform made them (what the spool keeps).
    pub rows: Arc<TransformOutput>,
    /// `rows` in the columns of the tables they were made for, by the
    /// rows' table index (0: the sink's own).
    columns: Option<(Vec<Arc<Table>>, ColumnOutput)>,
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
    /// The columns of the rows, when they were made, with the tables they
    /// were made for by the rows' table index (0: the sink's own).
    pub(in crate::writer) fn premade(&self) -> Option<(&[Arc<Table>], &ColumnOutput)> {
        self.columns
            .as_ref()
            .map(|(tables, columns)| (tables.as_slice(), columns))
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
    routes: Arc<OpenRoutes>,
    include_metadata: bool,
}

/// The log tables rows may be routed to that the writer had open, and that
/// take columns, when the finisher was made: where routed rows' columns can
/// be made beside the transform.
struct OpenRoutes {
    /// The sink's own table, which rows may name too.
    own: Arc<Table>,
    tables: HashMap<TablePath, Arc<Table>>,
}

impl OpenRoutes {
    /// The table named `name`, when it is the sink's own or one open.
    fn table(&self, name: &str) -> Option<&Arc<Table>> {
        let path = name.parse::<TablePath>().ok()?;
        if path == self.own.schema.path {
            return Some(&self.own);
        }
        self.tables.get(&path)
    }
}

impl LeanRoutes for OpenRoutes {
    fn lean_table(&self, name: &str) -> Option<LeanTable<'_>> {
        self.table(name).map(|t| LeanTable {
            schema: &t.schema,
            arrow_schema: &t.arrow_schema,
        })
    }
}

impl ChunkFinisher {
    /// `rows`, made of `chunk` (the chunk's own messages), with their Arrow
    /// columns when every row is for the sink's own table or one of the
    /// open tables the finisher knows; rows alone when one names any other
    /// table, or when the columns cannot be built (the writer then says
    /// why, as it would have).
    pub fn finish(&self, rows: Arc<TransformOutput>, chunk: &MessageBatch) -> TransformedChunk {
        let mut tables = vec![Some(self.lean_table())];
        for name in rows.rows.tables() {
            match self.routes.lean_table(name) {
                Some(table) => tables.push(Some(table)),
                None => return rows.into(),
            }
        }
        let messages = 0..rows.outcomes.len();
        let columns = guest_columns(&rows, messages, chunk, &tables, self.include_metadata);
        self.with_columns(rows, columns)
    }

    /// The table whose columns the finisher makes, as the lean path takes it.
    pub(crate) fn lean_table(&self) -> LeanTable<'_> {
        LeanTable {
            schema: &self.table.schema,
            arrow_schema: &self.table.arrow_schema,
        }
    }

    /// The open tables rows may be routed to (see [`LeanRoutes`]).
    pub(crate) fn routes(&self) -> &dyn LeanRoutes {
        self.routes.as_ref()
    }

    /// Whether the columns hold the metadata columns' values.
    pub(crate) fn include_metadata(&self) -> bool {
        self.include_metadata
    }

    /// `rows` with `columns` made of them for the finisher's table (see
    /// [`ChunkFinisher::lean_table`]) and the routed tables the rows name
    /// (see [`ChunkFinisher::routes`]); rows alone when the columns could
    /// not be made.
    pub(crate) fn with_columns(
        &self,
        rows: Arc<TransformOutput>,
        columns: Result<ColumnOutput, String>,
    ) -> TransformedChunk {
        let Ok(columns) = columns else {
            return rows.into();
        };
        let mut tables = vec![self.table.clone()];
        for name in rows.rows.tables() {
            match self.routes.table(name) {
                Some(table) => tables.push(table.clone()),
                None => return rows.into(),
            }
        }
        TransformedChunk {
            rows,
            columns: Some((tables, columns)),
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
        if !table.takes_columns() {
            return None;
        }
        let tables = self
            .routable_open_tables()
            .await
            .into_iter()
            .filter(|(_, t)| t.takes_columns())
            .collect();
        Some(ChunkFinisher {
            routes: Arc::new(OpenRoutes {
                own: table.clone(),
                tables,
            }),
            table,
            include_metadata: self.settings.include_metadata,
        })
    }
}
