//! A transform's rows on the keyed lean path: rows for an unpartitioned
//! primary-key table made straight into the `GenericRow`s fluss-rs's upsert
//! writer takes, each cell checked as it is put in its row, in one pass
//! over a chunk's rows (instead of the encoded path's check pass, grouping
//! pass and conversion pass). Same checks, same dead-letter texts as the
//! writer's encoded path; a chunk with a partial update (a row that leaves
//! a column out) or a row for another table is handed back for that path.

use fluss_row_codec::RowSink;

use super::keyed::{KeyedOutput, KeyedRowsBuilder};
use super::{MessageOutcome, TransformOutput};
use crate::batch::MessageBatch;
use crate::schema::TableSchema;

/// A chunk's rows for the keyed lean path, and the chunk's messages
/// dead-lettered because a row did not fit the table (counted from the
/// chunk's first message).
#[derive(Debug, Default)]
pub(crate) struct GuestKeyed {
    /// The chunk's outcomes (with the misfits dead-lettered) and rows.
    pub output: KeyedOutput,
    /// The messages whose rows did not fit.
    pub misfits: Vec<u32>,
}

/// The rows of `chunk` (a transform's output for the messages of `batch`
/// from `first` on) as rows of `schema`'s table, an unpartitioned
/// primary-key table: each row checked as
/// [`crate::rows::check::check_row`] would, metadata columns filled from
/// the message when `include_metadata`. A message with a row that does not
/// fit is dead-lettered with the writer's words (`table …: …`) and all its
/// rows left out; rows of messages already dead-lettered are skipped.
/// `None` when a row names another table or leaves a column out: the
/// encoded path writes such a chunk.
pub(crate) fn guest_keyed(
    chunk: &TransformOutput,
    first: usize,
    batch: &MessageBatch,
    schema: &TableSchema,
    include_metadata: bool,
) -> Option<GuestKeyed> {
    if !chunk.rows.tables().is_empty() {
        return None;
    }
    let mut builder = KeyedRowsBuilder::new(batch, first, chunk.rows.len(), schema, include_metadata);
    let mut outcomes = chunk.outcomes.clone();
    let mut misfits = Vec::new();
    let mut refused: Option<u32> = None;
    // Where the current message's rows start among those built.
    let (mut current, mut message_start) = (u32::MAX, 0);
    for (entry, row) in chunk.rows.iter() {
        let m = entry.message;
        if entry.table != 0 {
            return None;
        }
        if refused == Some(m) || matches!(outcomes[m as usize], MessageOutcome::DeadLetter(_)) {
            continue;
        }
        if current != m {
            (current, message_start) = (m, builder.rows.len());
            builder.message = m;
        }
        builder.start_row(row.kind, row.cell_count);
        for cell in row.cells() {
            builder.cell(cell);
        }
        builder.end_row();
        if builder.take_partial() {
            return None;
        }
        if let Some(reason) = builder.take_refusal() {
            builder.rows.truncate(message_start);
            outcomes[m as usize] = MessageOutcome::DeadLetter(format!("table {}: {reason}", schema.path));
            misfits.push(m);
            refused = Some(m);
        }
    }
    Some(GuestKeyed {
        output: KeyedOutput {
            outcomes,
            rows: builder.rows,
        },
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
    use crate::rows::keyed::KeyedRow;
    use crate::rows::to_fluss::generic_row;
    use crate::schema::{Column, DataType, TablePath};

    fn schema() -> TableSchema {
        TableSchema {
            path: TablePath::new("db", "pk"),
            columns: vec![
                Column::new("id", DataType::BigInt, false),
                Column::new("amount", DataType::Decimal(4, 2), true),
                Column::new("iggy_offset", DataType::BigInt, true),
            ],
            primary_key: vec!["id".into()],
            partition_keys: vec![],
            added_columns: 0,
        }
    }

    fn batch(count: usize) -> MessageBatch {
        let mut batch = MessageBatch::new(Source::default());
        for i in 0..count {
            batch.push(100 + i as u64, i as u128, 0, b"{}", []).unwrap();
        }
        batch
    }

    /// A row: its message, kind, id cell (`None`: NULL), amount (`None`:
    /// left out) and cell count (3, or fewer).
    type Spec = (u32, RowKind, Option<i32>, Option<&'static str>, u16);

    /// The output of messages `messages` (counted from its start) made of
    /// the rows `rows` of theirs; `dead` are dead-lettered by the transform.
    fn output(rows: &[Spec], messages: std::ops::Range<u32>, dead: &[u32]) -> TransformOutput {
        let mut b = RowsBuilder::new();
        let mut counts = vec![0u32; messages.len()];
        for &(m, kind, id, amount, cells) in rows.iter().filter(|r| messages.contains(&r.0)) {
            counts[(m - messages.start) as usize] += 1;
            b.begin_row(kind, 0);
            match id {
                // An INT widens into the BIGINT column.
                Some(id) => b.int(id),
                None => b.null(),
            }
            if cells > 1 {
                match amount {
                    Some(amount) => b.decimal(amount),
                    None => b.absent(),
                }
            }
            if cells > 2 {
                b.string("not an offset");
            }
            b.end_row();
        }
        let mut outcomes: Vec<MessageOutcome> = counts.iter().map(|&c| MessageOutcome::Rows(c)).collect();
        for &m in dead.iter().filter(|m| messages.contains(m)) {
            outcomes[(m - messages.start) as usize] = MessageOutcome::DeadLetter("the transform's".into());
        }
        TransformOutput {
            outcomes,
            rows: RowBatch::from_encoded(b.into_bytes(), vec![], &counts).unwrap(),
        }
    }

    /// What the writer's encoded path makes of `output`: metadata filled,
    /// rows checked, each kept row converted.
    fn encoded_path(
        mut output: TransformOutput,
        schema: &TableSchema,
        batch: &MessageBatch,
    ) -> (Vec<MessageOutcome>, Vec<KeyedRow>) {
        crate::rows::metadata::fill(&mut output, batch, |_| Some(schema));
        for misfit in misfits(&output, |_| Some(schema)) {
            output.outcomes[misfit.message as usize] =
                MessageOutcome::DeadLetter(format!("table {}: {}", misfit.schema.path, misfit.reason));
        }
        let rows = output
            .rows
            .iter()
            .filter(|(entry, _)| matches!(output.outcomes[entry.message as usize], MessageOutcome::Rows(_)))
            .map(|(entry, row)| (entry.message, entry.kind, generic_row(&row, schema).unwrap()))
            .collect();
        (output.outcomes, rows)
    }

    #[test]
    fn one_pass_gives_the_encoded_paths_outcomes_and_rows_chunk_by_chunk() {
        let schema = schema();
        let rows: [Spec; 10] = [
            (0, RowKind::Upsert, Some(1), Some("1.50"), 3),
            (1, RowKind::Upsert, Some(2), Some("99.996"), 3), // rounds past DECIMAL(4, 2)
            (2, RowKind::Upsert, Some(3), Some("2.25"), 3),   // message 2's first row fits ...
            (2, RowKind::Upsert, None, Some("2.50"), 3),      // ... its second has a NULL key
            (3, RowKind::Append, Some(4), Some("1"), 3),      // an append into a primary-key table
            (4, RowKind::Upsert, Some(5), Some("x1"), 3),     // not a decimal
            (5, RowKind::Delete, Some(6), Some("6.00"), 3),
            (7, RowKind::Upsert, Some(8), Some("8.08"), 2), // a cell short
            (8, RowKind::Upsert, Some(9), Some("9.09"), 3),
            (8, RowKind::Delete, Some(10), Some("0.10"), 3),
        ];
        // Message 6 is filtered (no rows); message 9 dead-lettered by the transform.
        let (count, dead) = (10u32, [9]);
        let batch = batch(count as usize);
        let (outcomes, expected) = encoded_path(output(&rows, 0..count, &dead), &schema, &batch);
        for size in [10, 3, 1] {
            let mut joined = KeyedOutput::default();
            let mut all_misfits = Vec::new();
            for start in (0..count).step_by(size) {
                let messages = start..(start + size as u32).min(count);
                let chunk = output(&rows, messages, &dead);
                let made = guest_keyed(&chunk, start as usize, &batch, &schema, true).unwrap();
                all_misfits.extend(made.misfits.iter().map(|m| m + start));
                joined.append(made.output);
            }
            assert_eq!(joined.outcomes, outcomes, "chunks of {size}");
            assert_eq!(joined.rows, expected, "chunks of {size}");
            assert_eq!(all_misfits, vec![1, 2, 3, 4, 7], "chunks of {size}");
        }
        // Not vacuous: rows of both kinds kept, the metadata column filled.
        assert_eq!(
            expected.iter().map(|(m, k, _)| (*m, *k)).collect::<Vec<_>>(),
            vec![
                (0, RowKind::Upsert),
                (5, RowKind::Delete),
                (8, RowKind::Upsert),
                (8, RowKind::Delete)
            ]
        );
        assert_eq!(
            expected[1].2.values[2],
            fluss::row::Datum::from(105i64),
            "the offset of message 5, not the row's text"
        );
        assert!(
            matches!(&outcomes[1], MessageOutcome::DeadLetter(r) if r == "table db.pk: column `amount`: 99.996 does not fit DECIMAL(4, 2)"),
            "{:?}",
            outcomes[1]
        );
        assert_eq!(outcomes[6], MessageOutcome::Rows(0), "filtered stays filtered");
    }

    #[test]
    fn a_chunk_with_a_partial_update_or_another_table_is_handed_back() {
        let schema = schema();
        let batch = batch(2);
        // A delete may leave a column out; an upsert that does is a partial update.
        let delete: [Spec; 1] = [(0, RowKind::Delete, Some(1), None, 3)];
        assert!(guest_keyed(&output(&delete, 0..1, &[]), 0, &batch, &schema, true).is_some());
        let partial: [Spec; 2] = [
            (0, RowKind::Upsert, Some(1), Some("1.00"), 3),
            (1, RowKind::Upsert, Some(2), None, 3),
        ];
        assert!(guest_keyed(&output(&partial, 0..2, &[]), 0, &batch, &schema, true).is_none());

        let mut b = RowsBuilder::new();
        b.begin_row(RowKind::Upsert, 1);
        b.int(1);
        b.decimal("1.00");
        b.null();
        b.end_row();
        let routed = TransformOutput {
            outcomes: vec![MessageOutcome::Rows(1)],
            rows: RowBatch::from_encoded(b.into_bytes(), vec!["db.other".into()], &[1]).unwrap(),
        };
        assert!(guest_keyed(&routed, 0, &batch, &schema, true).is_none());
    }
}
