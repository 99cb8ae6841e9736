//! A transform's rows on the lean path: rows for log tables whose Arrow
//! batches land whole (the sink's own and any it routes to) are checked and
//! put in the Arrow columns the writer appends, one set of builders per
//! table, in one pass over each row, instead of a check pass, a grouping
//! pass and an Arrow pass. Same checks, same dead-letter texts as the
//! writer's encoded path.

use std::ops::Range;

use arrow::datatypes::SchemaRef;
use fluss_row_codec::{Cell, RowSink};

use super::check::{check_cell, check_shape};
use super::columns::{ColumnOutput, ColumnRows, ColumnsBuilder};
use super::{MessageOutcome, TransformOutput};
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
    // Room for a row per message in each table: the builders of a chunk,
    // not of the whole batch.
    let rows = messages.len();
    let mut builders = tables
        .iter()
        .map(|table| {
            table
                .map(|t| ColumnsBuilder::new(batch, rows, t.schema, t.arrow_schema.clone(), include_metadata))
                .transpose()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut outcomes = output.outcomes[messages.clone()].to_vec();
    let mut misfits = Vec::new();
    let mut refused: Option<u32> = None;
    let mut current = u32::MAX;
    // Per table, the row count when the current message's first row came.
    let mut message_starts = vec![0; builders.len()];
    for (entry, row) in output.rows.iter_messages(messages) {
        let m = entry.message;
        if refused == Some(m) || matches!(outcomes[m as usize - base], MessageOutcome::DeadLetter(_)) {
            continue;
        }
        if current != m {
            current = m;
            for (start, builder) in message_starts.iter_mut().zip(&builders) {
                *start = builder.as_ref().map_or(0, |b| b.row_count());
            }
        }
        let (Some(Some(columns)), Some(Some(table))) = (
            builders.get_mut(entry.table as usize),
            tables.get(entry.table as usize),
        ) else {
            return Err(format!(
                "message {m} has a row for table index {}, which has no table",
                entry.table
            ));
        };
        let schema = table.schema;
        columns.for_message(m);
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
            for (builder, &start) in builders.iter_mut().zip(&message_starts) {
                if let Some(builder) = builder {
                    builder.spoil_rows_since(start);
                }
            }
            outcomes[m as usize - base] =
                MessageOutcome::DeadLetter(format!("table {}: {reason}", schema.path));
            misfits.push(m - base as u32);
            refused = Some(m);
        }
    }
    let mut made = builders.into_iter().map(|builder| {
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
        let arrow_schema = arrow_schema_of(&schema).unwrap();
        let (outcomes, record) = encoded_path(made.clone(), &schema, &batch);
        for chunk in [7, 3, 1] {
            let mut joined = ColumnOutput::default();
            for start in (0..7).step_by(chunk) {
                let part = guest_columns(
                    &made,
                    start..(start + chunk).min(7),
                    &batch,
                    &[Some(LeanTable {
                        schema: &schema,
                        arrow_schema: &arrow_schema,
                    })],
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

    #[test]
    fn routed_rows_go_to_their_tables_and_a_misfit_takes_its_message_out_of_every_table() {
        let sink = schema();
        let mut other = schema();
        other.path = TablePath::new("db", "other");
        other.columns.truncate(1);
        // (message, table, id); a NULL id does not fit the NOT NULL column.
        let rows = [
            (0, 0, Some(1)),
            (0, 1, Some(2)),
            (1, 1, Some(3)),
            (1, 0, Some(4)),
            (2, 0, Some(5)), // message 2 ...
            (2, 1, None),    // ... does not fit `other`: its row in the sink's table goes too
            (3, 0, Some(6)), // message 3 was dead-lettered before (an unresolved table)
            (3, 2, Some(7)),
            (4, 1, Some(8)),
        ];
        let mut b = RowsBuilder::new();
        let mut counts = [0u32; 5];
        for &(m, table, id) in &rows {
            counts[m as usize] += 1;
            b.begin_row(RowKind::Append, table);
            match id {
                Some(id) => b.bigint(id),
                None => b.null(),
            }
            if table == 0 {
                b.decimal("1.00");
                b.null();
            }
            b.end_row();
        }
        let tables = vec!["db.other".to_string(), "db.gone".to_string()];
        let mut made = TransformOutput {
            outcomes: counts.iter().map(|&c| MessageOutcome::Rows(c)).collect(),
            rows: RowBatch::from_encoded(b.into_bytes(), tables, &counts).unwrap(),
        };
        made.outcomes[3] = MessageOutcome::DeadLetter("table db.gone: not allowed".into());
        let (sink_arrow, other_arrow) = (arrow_schema_of(&sink).unwrap(), arrow_schema_of(&other).unwrap());
        let lean = [
            Some(LeanTable {
                schema: &sink,
                arrow_schema: &sink_arrow,
            }),
            Some(LeanTable {
                schema: &other,
                arrow_schema: &other_arrow,
            }),
            None,
        ];
        let batch = batch(5);
        let expected = |table: u16, schema: &TableSchema, ids: &[i64]| {
            let mut b = RowsBuilder::new();
            for &id in ids {
                b.begin_row(RowKind::Append, table);
                b.bigint(id);
                if table == 0 {
                    b.decimal("1.00");
                    b.null();
                }
                b.end_row();
            }
            let count = [ids.len() as u32];
            let rows = RowBatch::from_encoded(b.into_bytes(), vec!["db.other".into()], &count).unwrap();
            let views: Vec<_> = rows.iter().map(|(_, r)| r).collect();
            crate::rows::to_fluss::record_batch(&views, schema, &arrow_schema_of(schema).unwrap()).unwrap()
        };
        for chunk in [5, 2, 1] {
            let mut joined = ColumnOutput::default();
            for start in (0..5).step_by(chunk) {
                let part = guest_columns(&made, start..(start + chunk).min(5), &batch, &lean, false).unwrap();
                joined.append(part);
            }
            assert_eq!(joined.misfits, vec![2], "chunks of {chunk}");
            assert!(
                matches!(&joined.outcomes[2], MessageOutcome::DeadLetter(r) if r.starts_with("table db.other: ")),
                "{:?}",
                joined.outcomes[2]
            );
            assert_eq!(joined.outcomes[3], made.outcomes[3], "earlier dead letters stay");
            assert_eq!(joined.rows.messages(), &[0, 1], "chunks of {chunk}");
            assert_eq!(joined.rows.record(0..2).unwrap(), expected(0, &sink, &[1, 4]));
            let routed = joined.table_rows(1).unwrap();
            assert_eq!(routed.messages(), &[0, 1, 4], "chunks of {chunk}");
            assert_eq!(routed.record(0..3).unwrap(), expected(1, &other, &[2, 3, 8]));
            assert!(joined.table_rows(2).is_none_or(|r| r.is_empty()));
        }
    }
}
