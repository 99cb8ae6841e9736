//! A transform's rows on the lean path: rows for log tables whose Arrow
//! batches land whole (the sink's own and any it routes to) are checked and
//! put in the Arrow columns the writer appends, one set of builders per
//! table, in one pass over each row, instead of a check pass, a grouping
//! pass and an Arrow pass. Same checks, same dead-letter texts as the
//! writer's encoded path.

use std::ops::Range;

use arrow::datatypes::SchemaRef;
use fluss_row_codec::{Cell, RowCells, RowHead, RowKind, RowSink};

use super::check::{check_cell, check_shape};
use super::columns::{ColumnOutput, ColumnRows, ColumnsBuilder};
use super::{MessageOutcome, RowVisitor, TransformOutput};
use crate::batch::MessageBatch;
use crate::schema::TableSchema;

/// A table a transform's rows go to on the lean path: its schema and the
/// Arrow form of it.
#[derive(Clone, Copy)]
pub(crate) struct LeanTable<'t> {
    /// The table's columns.
    pub schema: &'t TableSchema,
    /// Fluss's Arrow form of `schema`.
    pub arrow_schema: &'t SchemaRef,
}

/// The tables a transform may route rows to whose lean-path columns can be
/// made where the rows are read, by the name a row gives its table (as
/// [`crate::rows::RowBatch::tables`] holds it); `None` for a name that must
/// be resolved by the writer first.
pub(crate) trait LeanRoutes {
    /// The table named `name`, when its columns can be made here.
    fn lean_table(&self, name: &str) -> Option<LeanTable<'_>>;
}

/// A transform's rows, messages `messages` of `output` (made of `batch`),
/// as Arrow columns of their tables: `tables[i]` is the table of the rows
/// whose table index is `i` (0: the sink's own; `None`: one whose messages
/// are all dead-lettered already). Each row is checked against its table
/// as [`crate::rows::check::check_row`] would, and its cells put in their
/// builders, in one pass (a DECIMAL's text read once, by its builder). A
/// message with a row that does not fit is dead-lettered with the writer's
/// words (`table …: …`) and all its rows, in every table, left out; the rows
/// of messages already dead-lettered are skipped.
pub(crate) fn guest_columns(
    output: &TransformOutput,
    messages: Range<usize>,
    batch: &MessageBatch,
    tables: &[Option<LeanTable<'_>>],
    include_metadata: bool,
) -> Result<ColumnOutput, String> {
    let base = messages.start;
    let outcomes = &output.outcomes[messages.clone()];
    let mut columns = GuestColumns::new(batch, base, messages.len(), tables, include_metadata)?;
    for (entry, row) in output.rows.iter_messages(messages) {
        if !matches!(
            outcomes[entry.message as usize - base],
            MessageOutcome::DeadLetter(_)
        ) {
            columns.take_row(
                entry.message,
                entry.kind,
                entry.table,
                entry.cell_count,
                row.cells(),
            );
        }
    }
    columns.finish(outcomes)
}

/// The lean path's columns of a transform's rows in the making, a row at a
/// time: what [`guest_columns`] makes of rows already read, and, as a
/// [`RowVisitor`], of rows as they are read from the transform's buffer
/// (each cell decoded once).
pub(crate) struct GuestColumns<'t> {
    batch: &'t MessageBatch,
    /// The rows a table's builders make room for.
    rows: usize,
    include_metadata: bool,
    tables: Vec<Option<LeanTable<'t>>>,
    /// Where the tables the rows name come from, besides those given.
    routes: Option<&'t dyn LeanRoutes>,
    builders: Vec<Option<ColumnsBuilder<'t>>>,
    /// The first message's index in the batch the rows were made of.
    base: usize,
    /// Messages with a row that does not fit, and why (the writer's words).
    misfits: Vec<(u32, String)>,
    refused: Option<u32>,
    current: u32,
    /// Per table, the row count when the current message's first row came.
    message_starts: Vec<usize>,
    /// Why the columns cannot be made, once they cannot.
    failure: Option<String>,
}

impl<'t> GuestColumns<'t> {
    /// Columns for rows of `tables` (see [`guest_columns`]) made of
    /// `batch`'s messages from `base` on, with room for `rows` rows a table.
    pub(crate) fn new(
        batch: &'t MessageBatch,
        base: usize,
        rows: usize,
        tables: &[Option<LeanTable<'t>>],
        include_metadata: bool,
    ) -> Result<Self, String> {
        // Room for a row per message in each table: the builders of a chunk,
        // not of the whole batch.
        let builders = tables
            .iter()
            .map(|table| {
                table
                    .map(|t| {
                        ColumnsBuilder::new(batch, rows, t.schema, t.arrow_schema.clone(), include_metadata)
                    })
                    .transpose()
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            batch,
            rows,
            include_metadata,
            tables: tables.to_vec(),
            routes: None,
            message_starts: vec![0; builders.len()],
            builders,
            base,
            misfits: Vec::new(),
            refused: None,
            current: u32::MAX,
            failure: None,
        })
    }

    /// Columns that also take the rows for the tables `routes` has, when
    /// the rows name them (see [`RowVisitor::tables`]); without routes, a
    /// row for a table past those given fails the columns.
    pub(crate) fn with_routes(mut self, routes: &'t dyn LeanRoutes) -> Self {
        self.routes = Some(routes);
        self
    }

    /// Builders for the tables `names` (index `i + 1` is `names[i]`) past
    /// those the columns have: `Err` with why when one cannot be had here.
    fn add_tables(&mut self, names: &[String]) -> Result<(), String> {
        let known = self.tables.len();
        if names.len() < known {
            return Ok(());
        }
        let Some(routes) = self.routes.filter(|_| known > 0) else {
            return Err(format!(
                "the rows may name table index {known}, which has no table"
            ));
        };
        // Room for each table's share of the rows.
        let rows = self.rows.div_ceil(names.len());
        for name in &names[known - 1..] {
            let Some(table) = routes.lean_table(name) else {
                return Err(format!(
                    "the rows name table {name}, which the writer must resolve first"
                ));
            };
            let builder = ColumnsBuilder::new(
                self.batch,
                rows,
                table.schema,
                table.arrow_schema.clone(),
                self.include_metadata,
            )?;
            self.tables.push(Some(table));
            self.builders.push(Some(builder));
            self.message_starts.push(0);
        }
        Ok(())
    }

    /// Checks one row of message `m` and puts its cells in its table's
    /// builders; a row that does not fit refuses its message.
    pub(crate) fn take_row<'c>(
        &mut self,
        m: u32,
        kind: RowKind,
        table: u16,
        cell_count: u16,
        cells: impl Iterator<Item = Cell<'c>>,
    ) {
        if self.refused == Some(m) || self.failure.is_some() {
            return;
        }
        if self.current != m {
            self.current = m;
            for (start, builder) in self.message_starts.iter_mut().zip(&self.builders) {
                *start = builder.as_ref().map_or(0, |b| b.row_count());
            }
        }
        let (Some(Some(columns)), Some(Some(lean))) = (
            self.builders.get_mut(table as usize),
            self.tables.get(table as usize),
        ) else {
            self.failure = Some(format!(
                "message {m} has a row for table index {table}, which has no table"
            ));
            return;
        };
        let schema = lean.schema;
        columns.for_message(m);
        columns.begin_row(kind, table);
        let mut misfit = check_shape(schema, kind, cell_count).err();
        for (cell, column) in cells.zip(&schema.columns) {
            if misfit.is_none() && !columns.fills_metadata() {
                misfit = check_cell(schema, kind, column, cell).err();
            }
            columns.cell(if misfit.is_some() { Cell::Null } else { cell });
        }
        if let Some(reason) = misfit {
            columns.refuse(reason);
        }
        columns.end_row();
        if let Some(reason) = columns.take_refusal() {
            for (builder, &start) in self.builders.iter_mut().zip(&self.message_starts) {
                if let Some(builder) = builder {
                    builder.spoil_rows_since(start);
                }
            }
            self.misfits.push((m, format!("table {}: {reason}", schema.path)));
            self.refused = Some(m);
        }
    }

    /// The columns made, with `outcomes` (those of the messages from
    /// `base` on) where the rows that did not fit dead-letter their message.
    pub(crate) fn finish(self, outcomes: &[MessageOutcome]) -> Result<ColumnOutput, String> {
        if let Some(failure) = self.failure {
            return Err(failure);
        }
        let base = self.base;
        let mut outcomes = outcomes.to_vec();
        let mut misfits = Vec::with_capacity(self.misfits.len());
        for (m, reason) in self.misfits {
            outcomes[m as usize - base] = MessageOutcome::DeadLetter(reason);
            misfits.push(m - base as u32);
        }
        let mut made = self.builders.into_iter().map(|builder| {
            let mut rows = builder
                .map(ColumnsBuilder::finish)
                .transpose()?
                .unwrap_or_default();
            rows.count_messages_from(base as u32);
            Ok::<ColumnRows, String>(rows)
        });
        let rows = made.next().transpose()?.unwrap_or_default();
        Ok(ColumnOutput {
            outcomes,
            rows,
            routed: made.collect::<Result<_, _>>()?,
            misfits,
        })
    }
}

impl RowVisitor for GuestColumns<'_> {
    /// Makes builders for the tables the output names; gives up at once
    /// when it names one the columns cannot have, instead of at that
    /// table's first row.
    fn tables(&mut self, names: &[String]) {
        if self.failure.is_none()
            && let Err(reason) = self.add_tables(names)
        {
            self.failure = Some(reason);
        }
    }

    fn row(&mut self, message: u32, head: &RowHead, cells: &mut RowCells<'_, '_>) {
        let message = message + self.base as u32;
        self.take_row(message, head.kind, head.table, head.cell_count, cells);
    }
}

#[cfg(test)]
mod tests;
