//! Appends caught by a change of their table's columns: fluss-rs 1.0
//! refuses an Arrow batch narrower than the table once its metadata has the
//! added columns (`docs/fluss.md`, "Columns added to a table in use"), and
//! rows appended one by one through a writer made before the change, so
//! such a part, or such rows, go with NULL in those columns through the
//! table opened again.

use std::ops::Range;

use arrow::array::new_null_array;
use arrow::record_batch::RecordBatch;
use fluss::row::{Datum, GenericRow};
use fluss_row_codec::RowKind;

use crate::deadline::Deadline;
use crate::rows::keyed::KeyedRow;
use crate::schema::TablePath;
use crate::writer::delivery::racing_flush;
use crate::writer::tables::{Sink, Table};
use crate::writer::{FlussWriter, WriteError};

/// The distinct messages of the rows `part`, in order.
pub(in crate::writer) fn part_messages(
    messages: &[u32],
    part: Range<usize>,
) -> impl Iterator<Item = u32> + '_ {
    let mut last = None;
    messages[part]
        .iter()
        .copied()
        .filter(move |&m| last.replace(m) != Some(m))
}

/// `record` as `table` takes it: as it is, or, when it was made against
/// the columns the table had before its last ones were added (see
/// [`crate::schema::TableSchema::added_columns`]), with NULL in those.
pub(in crate::writer) fn widened(record: RecordBatch, table: &Table) -> Result<RecordBatch, String> {
    let fields = table.arrow_schema.fields();
    let made = record.num_columns();
    if made == fields.len() {
        return Ok(record);
    }
    if !table.schema.takes_cell_count(made) {
        return Err(format!(
            "the batch has {made} columns but the table has {}",
            fields.len()
        ));
    }
    let rows = record.num_rows();
    let mut columns = record.columns().to_vec();
    columns.extend(fields[made..].iter().map(|f| new_null_array(f.data_type(), rows)));
    RecordBatch::try_new(table.arrow_schema.clone(), columns).map_err(|e| e.to_string())
}

impl FlussWriter {
    /// Appends `record`, made for table `path` before columns were added to
    /// it, through the table opened again now (see
    /// [`FlussWriter::table_after_change`]), with NULL in those columns;
    /// `Ok(Err(reason))` when it refuses it for good.
    pub(in crate::writer) async fn append_after_change(
        &self,
        path: &TablePath,
        record: RecordBatch,
        what: &str,
        deadline: Deadline,
    ) -> Result<Result<(), String>, WriteError> {
        let table = self.table_after_change(path, deadline).await?;
        let record = widened(record, &table).map_err(|reason| WriteError::Table {
            table: path.to_string(),
            reason,
        })?;
        let Sink::Log(writer) = &table.sink else {
            return Ok(Err(format!("table {path} is no longer a log table")));
        };
        let again = self.deliver(path, what, true, deadline, || {
            writer.append_arrow_batch(record.clone())
        });
        racing_flush(again, writer.flush()).await
    }

    /// Appends the rows of `converted` at `indexes` (refused before they
    /// were taken by a writer older than the table) through the log table
    /// opened again, with NULL in the columns added since; `false` when
    /// Fluss's metadata does not show a change yet (the table is as it
    /// was), and nothing was sent.
    pub(in crate::writer) async fn append_rows_after_change(
        &self,
        table: &Table,
        converted: &[KeyedRow],
        indexes: &[usize],
        what: &str,
        deadline: Deadline,
        failures: &mut Vec<(u32, String)>,
    ) -> Result<bool, WriteError> {
        let reopened = self.table_after_change(&table.schema.path, deadline).await?;
        let Sink::Log(writer) = &reopened.sink else {
            return Ok(false);
        };
        if (reopened.table_id, reopened.schema_id) == (table.table_id, table.schema_id) {
            return Ok(false);
        }
        let width = reopened.schema.columns.len();
        let rows: Vec<KeyedRow> = indexes
            .iter()
            .map(|&i| {
                let (message, kind, row) = &converted[i];
                let mut row = row.clone();
                if row.values.len() < width {
                    row.values.resize(width, Datum::Null);
                }
                (*message, *kind, row)
            })
            .collect();
        tracing::info!(
            table = %table.schema.path,
            "{} row(s) refused by a writer older than table {} go through it opened again",
            rows.len(),
            table.schema.path
        );
        let send = |_: RowKind, row: &GenericRow<'static>| writer.append(row);
        self.send_rows(
            &reopened,
            &rows,
            what,
            send,
            || writer.flush(),
            deadline,
            failures,
        )
        .await?;
        Ok(true)
    }
}
