//! A transform's rows on the lean path: rows all for the sink's own log
//! table (unpartitioned, its Arrow batches landing whole) are checked and
//! put in the Arrow columns the writer appends in one pass over each row,
//! instead of a check pass, a grouping pass and an Arrow pass. Same checks,
//! same dead-letter texts as the writer's encoded path.

use std::ops::Range;

use arrow::datatypes::SchemaRef;
use fluss_row_codec::{Cell, RowSink};

use super::check::{check_cell, check_shape};
use super::columns::{ColumnOutput, ColumnsBuilder};
use super::{MessageOutcome, TransformOutput};
use crate::batch::MessageBatch;
use crate::schema::TableSchema;

/// A transform's rows of the sink's own log table, messages `messages` of
/// `output` (made of `batch`), as Arrow columns: each row checked against
/// `schema` as [`crate::rows::check::check_row`] would, and its cells put
/// in their builders, in one pass (a DECIMAL's text read once, by its
/// builder). A message with a row that does not fit is dead-lettered with
/// the writer's words (`table …: …`) and all its rows left out. Every row
/// of `output` must be for the sink's table.
pub(crate) fn guest_columns(
    output: &TransformOutput,
    messages: Range<usize>,
    batch: &MessageBatch,
    schema: &TableSchema,
    arrow_schema: SchemaRef,
    include_metadata: bool,
) -> Result<ColumnOutput, String> {
    let base = messages.start;
    let mut columns = ColumnsBuilder::new(batch, schema, arrow_schema, include_metadata)?;
    let mut outcomes = output.outcomes[messages.clone()].to_vec();
    let mut misfits = Vec::new();
    let mut refused: Option<u32> = None;
    let mut first_row_of_message = (u32::MAX, 0);
    for (entry, row) in output.rows.iter_messages(messages) {
        debug_assert_eq!(entry.table, fluss_row_codec::DEFAULT_TABLE);
        if refused == Some(entry.message) {
            continue;
        }
        if first_row_of_message.0 != entry.message {
            first_row_of_message = (entry.message, columns.row_count());
        }
        columns.for_message(entry.message);
        columns.begin_row(entry.kind, entry.table);
        let mut misfit = check_shape(schema, row.kind, row.cell_count).err();
        for (cell, column) in row.cells().zip(&schema.columns) {
            if misfit.is_none() && !columns.fills_metadata() {
                misfit = check_cell(schema, row.kind, column, cell).err();
            }
            columns.cell(if misfit.is_some() { Cell::Null } else { cell });
        }
        if let Some(reason) = misfit {
            columns.refuse(reason);
        }
        columns.end_row();
        if let Some(reason) = columns.take_refusal() {
            let m = entry.message;
            columns.spoil_rows_since(first_row_of_message.1);
            outcomes[m as usize - base] =
                MessageOutcome::DeadLetter(format!("table {}: {reason}", schema.path));
            misfits.push(m - base as u32);
            refused = Some(m);
        }
    }
    let mut rows = columns.finish()?;
    rows.count_messages_from(base as u32);
    Ok(ColumnOutput {
        outcomes,
        rows,
        misfits,
    })
}

#[cfg(test)]
mod tests {
    use fluss_row_codec::{RowKind, RowsBuilder};

    use super::*;
    use crate::batch::Source;
    use crate::rows::RowBatch;
    use crate::rows::check::misfits;
    use crate::schema::{Column, DataType, TablePath};
    use crate::writer::{arrow_schema_of, to_record_batch};

    fn schema() -> TableSchema {
        TableSchema {
            path: TablePath::new("db", "t"),
            columns: vec![
                Column::new("id", DataType::BigInt, false),
                Column::new("amount", DataType::Decimal(4, 2), true),
                Column::new("iggy_offset", DataType::BigInt, true),
            ],
            primary_key: vec![],
            partition_keys: vec![],
        }
    }

    fn batch(count: usize) -> MessageBatch {
        let mut batch = MessageBatch::new(Source::default());
        for i in 0..count {
            batch.push(100 + i as u64, i as u128, 0, b"{}", []).unwrap();
        }
        batch
    }

    /// One row per `(message, kind, id cell, amount text)`; the counts per message.
    fn output(rows: &[(u32, RowKind, Option<i32>, &str)], messages: usize) -> TransformOutput {
        let mut b = RowsBuilder::new();
        let mut counts = vec![0u32; messages];
        for &(m, kind, id, amount) in rows {
            counts[m as usize] += 1;
            b.begin_row(kind, 0);
            match id {
                // An INT widens into the BIGINT column.
                Some(id) => b.int(id),
                None => b.absent(),
            }
            b.decimal(amount);
            b.string("not an offset");
            b.end_row();
        }
        TransformOutput {
            outcomes: counts.iter().map(|&c| MessageOutcome::Rows(c)).collect(),
            rows: RowBatch::from_encoded(b.into_bytes(), vec![], &counts).unwrap(),
        }
    }

    /// What the writer's encoded path makes of `output`: its outcomes and
    /// the record batch of the rows it keeps.
    fn encoded_path(
        mut output: TransformOutput,
        schema: &TableSchema,
        batch: &MessageBatch,
    ) -> (Vec<MessageOutcome>, arrow::record_batch::RecordBatch) {
        crate::rows::metadata::fill(&mut output, batch, |_| Some(schema));
        for misfit in misfits(&output, |_| Some(schema)) {
            output.outcomes[misfit.message as usize] =
                MessageOutcome::DeadLetter(format!("table {}: {}", misfit.schema.path, misfit.reason));
        }
        let outcomes = output.outcomes.clone();
        output
            .rows
            .retain_messages(|m| matches!(outcomes[m as usize], MessageOutcome::Rows(_)));
        let record = to_record_batch(&output, schema, &arrow_schema_of(schema).unwrap()).unwrap();
        (outcomes, record)
    }

    #[test]
    fn one_pass_gives_the_encoded_paths_outcomes_and_rows() {
        let schema = schema();
        let rows = [
            (0, RowKind::Append, Some(1), "1.50"),
            (1, RowKind::Append, Some(2), "99.996"), // rounds past DECIMAL(4, 2)
            (2, RowKind::Append, Some(3), "2.25"),
            (2, RowKind::Append, None, "2.50"), // absent on a log table: the whole message goes
            (3, RowKind::Upsert, Some(4), "1"), // an upsert into a log table
            (4, RowKind::Append, Some(5), "x1"), // not a decimal
            (6, RowKind::Append, Some(7), "7.07"),
            (6, RowKind::Append, Some(8), "8.08"),
        ];
        let batch = batch(7);
        let made = output(&rows, 7);
        let (outcomes, record) = encoded_path(made.clone(), &schema, &batch);
        for chunk in [7, 3, 1] {
            let mut joined = ColumnOutput::default();
            for start in (0..7).step_by(chunk) {
                let part = guest_columns(
                    &made,
                    start..(start + chunk).min(7),
                    &batch,
                    &schema,
                    arrow_schema_of(&schema).unwrap(),
                    true,
                )
                .unwrap();
                joined.append(part);
            }
            assert_eq!(joined.outcomes, outcomes, "chunks of {chunk}");
            assert_eq!(joined.misfits, vec![1, 2, 3, 4], "chunks of {chunk}");
            assert_eq!(joined.rows.messages(), &[0, 6, 6], "chunks of {chunk}");
            assert_eq!(joined.rows.record(0..3).unwrap(), record, "chunks of {chunk}");
        }
        assert!(
            matches!(&outcomes[1], MessageOutcome::DeadLetter(r) if r == "table db.t: column `amount`: 99.996 does not fit DECIMAL(4, 2)"),
            "{:?}",
            outcomes[1]
        );
        assert_eq!(outcomes[5], MessageOutcome::Rows(0), "filtered stays filtered");
    }
}
