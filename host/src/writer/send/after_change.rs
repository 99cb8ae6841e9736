//! Appends caught by a change of their table's columns: fluss-rs 1.0
//! refuses an Arrow batch narrower than the table once its metadata has the
//! added columns (`docs/fluss.md`, "Columns added to a table in use"), so
//! such a part goes, with NULL in those columns, through the table opened
//! again.

use std::ops::Range;

use arrow::array::new_null_array;
use arrow::record_batch::RecordBatch;

use crate::deadline::Deadline;
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
}
