//! The lean path's columns of a transform's rows against the writer's
//! encoded path, and rows read into columns as they decode against rows
//! read first.

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

/// One row per `(message, table, id)` (a NULL id for `None`), with the
/// sink table's other two cells where `full(table)`; the rows' encoding
/// and the count of each of `messages` messages.
fn routed_rows(
    rows: &[(u32, u16, Option<i64>)],
    messages: usize,
    full: impl Fn(u16) -> bool,
) -> (Vec<u8>, Vec<u32>) {
    let mut b = RowsBuilder::new();
    let mut counts = vec![0u32; messages];
    for &(m, table, id) in rows {
        counts[m as usize] += 1;
        b.begin_row(RowKind::Append, table);
        match id {
            Some(id) => b.bigint(id),
            None => b.null(),
        }
        if full(table) {
            b.decimal("1.00");
            b.null();
        }
        b.end_row();
    }
    (b.into_bytes(), counts)
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
    let (bytes, counts) = routed_rows(&rows, 5, |table| table == 0);
    let tables = vec!["db.other".to_string(), "db.gone".to_string()];
    let mut made = TransformOutput {
        outcomes: counts.iter().map(|&c| MessageOutcome::Rows(c)).collect(),
        rows: RowBatch::from_encoded(bytes, tables, &counts).unwrap(),
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

/// The sink's table and its Arrow form.
fn sink_table() -> (TableSchema, SchemaRef) {
    let schema = schema();
    let arrow_schema = arrow_schema_of(&schema).unwrap();
    (schema, arrow_schema)
}

/// `made`'s rows as the transform's buffer held them.
fn raw(made: &TransformOutput) -> Vec<u8> {
    made.rows
        .encoded_rows()
        .flat_map(|(_, bytes)| bytes.to_vec())
        .collect()
}

fn counts(made: &TransformOutput) -> Vec<u32> {
    made.outcomes
        .iter()
        .map(|o| match o {
            MessageOutcome::Rows(n) => *n,
            MessageOutcome::DeadLetter(_) => 0,
        })
        .collect()
}

#[test]
fn rows_put_in_columns_as_they_decode_are_the_columns_of_rows_read_first() {
    let (schema, arrow_schema) = sink_table();
    let lean = [Some(LeanTable {
        schema: &schema,
        arrow_schema: &arrow_schema,
    })];
    let rows = [
        (0, RowKind::Append, Some(1), "1.50"),
        (1, RowKind::Append, Some(2), "99.996"),
        (2, RowKind::Append, Some(3), "2.25"),
        (2, RowKind::Append, None, "2.50"),
        (3, RowKind::Upsert, Some(4), "1"),
        (4, RowKind::Append, Some(5), "x1"),
        (6, RowKind::Append, Some(7), "7.07"),
        (6, RowKind::Append, Some(8), "8.08"),
    ];
    let batch = batch(7);
    let made = output(&rows, 7);
    let expected = guest_columns(&made, 0..7, &batch, &lean, true).unwrap();
    let mut columns = GuestColumns::new(&batch, 0, 7, &lean, true).unwrap();
    let read = RowBatch::read(raw(&made), vec![], &counts(&made), Some(&mut columns)).unwrap();
    assert_eq!(read.len(), made.rows.len());
    let fused = columns.finish(&made.outcomes).unwrap();
    assert_eq!(fused.outcomes, expected.outcomes);
    assert_eq!(fused.misfits, vec![1, 2, 3, 4]);
    assert_eq!(fused.misfits, expected.misfits);
    assert_eq!(fused.rows.messages(), &[0, 6, 6]);
    assert_eq!(
        fused.rows.record(0..3).unwrap(),
        expected.rows.record(0..3).unwrap()
    );
}

#[test]
fn a_buffer_that_does_not_decode_fails_the_read_with_the_same_words() {
    let (schema, arrow_schema) = sink_table();
    let lean = [Some(LeanTable {
        schema: &schema,
        arrow_schema: &arrow_schema,
    })];
    let batch = batch(2);
    let made = output(
        &[
            (0, RowKind::Append, Some(1), "1.50"),
            (1, RowKind::Append, Some(2), "2.50"),
        ],
        2,
    );
    let bytes = raw(&made);
    let counts = counts(&made);
    // Cut anywhere, a row table index past the list, one row too many.
    let mut broken: Vec<(Vec<u8>, Vec<u32>)> = (1..bytes.len())
        .map(|cut| (bytes[..cut].to_vec(), counts.clone()))
        .collect();
    let mut far = bytes.clone();
    far[1] = 3;
    broken.push((far, counts.clone()));
    broken.push((bytes.clone(), vec![1, 0]));
    for (bytes, counts) in broken {
        let alone = RowBatch::from_encoded(bytes.clone(), vec![], &counts).unwrap_err();
        let mut columns = GuestColumns::new(&batch, 0, 2, &lean, false).unwrap();
        let read = RowBatch::read(bytes, vec![], &counts, Some(&mut columns)).unwrap_err();
        assert_eq!(read, alone);
    }
}

#[test]
fn a_row_for_a_table_without_columns_leaves_the_columns_unmade() {
    let (schema, arrow_schema) = sink_table();
    let lean = [Some(LeanTable {
        schema: &schema,
        arrow_schema: &arrow_schema,
    })];
    let batch = batch(2);
    let mut b = RowsBuilder::new();
    for table in [0, 1] {
        b.begin_row(RowKind::Append, table);
        b.bigint(1);
        b.decimal("1.00");
        b.null();
        b.end_row();
    }
    let mut columns = GuestColumns::new(&batch, 0, 2, &lean, false).unwrap();
    let read = RowBatch::read(
        b.into_bytes(),
        vec!["db.other".into()],
        &[1, 1],
        Some(&mut columns),
    )
    .unwrap();
    assert_eq!(read.len(), 2, "the rows are read whole all the same");
    let outcomes = [MessageOutcome::Rows(1), MessageOutcome::Rows(1)];
    let err = columns.finish(&outcomes).unwrap_err();
    assert!(err.contains("table index 1"), "{err}");
}

/// Routed tables by name, as the writer's open tables are.
struct Routes<'t>(Vec<(&'static str, LeanTable<'t>)>);

impl LeanRoutes for Routes<'_> {
    fn lean_table(&self, name: &str) -> Option<LeanTable<'_>> {
        self.0.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
    }
}

#[test]
fn routed_rows_put_in_columns_as_they_decode_are_the_columns_of_rows_read_first() {
    let (sink, sink_arrow) = sink_table();
    let mut other = schema();
    other.path = TablePath::new("db", "other");
    other.columns.truncate(1);
    let other_arrow = arrow_schema_of(&other).unwrap();
    let (sink_lean, other_lean) = (
        LeanTable {
            schema: &sink,
            arrow_schema: &sink_arrow,
        },
        LeanTable {
            schema: &other,
            arrow_schema: &other_arrow,
        },
    );
    // (message, table, id); a NULL id does not fit `other`'s NOT NULL column.
    let rows = [
        (0, 1, Some(1)),
        (0, 2, Some(2)),
        (1, 0, Some(3)),
        (1, 1, None), // message 1 does not fit `db.other`: its row in the sink's table goes too
        (2, 2, Some(4)),
        (3, 1, Some(5)),
    ];
    let (bytes, counts) = routed_rows(&rows, 4, |table| table != 1);
    // The sink's own table named as a routed one, as a transform may.
    let names = vec!["db.other".to_string(), "db.t".to_string()];
    let made = TransformOutput {
        outcomes: counts.iter().map(|&c| MessageOutcome::Rows(c)).collect(),
        rows: RowBatch::from_encoded(bytes.clone(), names.clone(), &counts).unwrap(),
    };
    let batch = batch(4);
    let all = [Some(sink_lean), Some(other_lean), Some(sink_lean)];
    let expected = guest_columns(&made, 0..4, &batch, &all, false).unwrap();
    let routes = Routes(vec![("db.other", other_lean), ("db.t", sink_lean)]);
    let mut columns = GuestColumns::new(&batch, 0, 4, &all[..1], false)
        .unwrap()
        .with_routes(&routes);
    RowBatch::read(bytes.clone(), names.clone(), &counts, Some(&mut columns)).unwrap();
    let fused = columns.finish(&made.outcomes).unwrap();
    assert_eq!(fused.outcomes, expected.outcomes);
    assert!(matches!(&fused.outcomes[1], MessageOutcome::DeadLetter(r) if r.starts_with("table db.other: ")));
    assert_eq!(fused.misfits, vec![1]);
    for table in 0..3 {
        let (fused, expected) = (
            fused.table_rows(table).unwrap(),
            expected.table_rows(table).unwrap(),
        );
        assert_eq!(fused.messages(), expected.messages(), "table {table}");
        assert_eq!(
            fused.record(0..fused.len()).unwrap(),
            expected.record(0..expected.len()).unwrap()
        );
    }
    assert_eq!(fused.table_rows(1).unwrap().messages(), &[0, 3]);
    assert_eq!(fused.table_rows(2).unwrap().messages(), &[0, 2]);

    // A name the routes do not have: no columns, and why.
    let partial = Routes(vec![("db.other", other_lean)]);
    let mut columns = GuestColumns::new(&batch, 0, 4, &all[..1], false)
        .unwrap()
        .with_routes(&partial);
    RowBatch::read(bytes, names, &counts, Some(&mut columns)).unwrap();
    let err = columns.finish(&made.outcomes).unwrap_err();
    assert!(err.contains("table db.t"), "{err}");
}

#[test]
fn rows_made_before_columns_were_added_get_null_there_on_both_paths() {
    let mut schema = schema();
    schema.columns[2] = Column::new("note", DataType::String, true);
    let mut b = RowsBuilder::new();
    // Message 0: a row made against the two columns the table had; 1: one
    // that stops short of those too; 2: a row with the added column.
    for cells in [1, 2, 3] {
        b.begin_row(RowKind::Append, 0);
        b.bigint(cells);
        if cells != 2 {
            b.decimal("1.50");
        }
        if cells == 3 {
            b.string("added");
        }
        b.end_row();
    }
    let made = TransformOutput {
        outcomes: vec![MessageOutcome::Rows(1); 3],
        rows: RowBatch::from_encoded(b.into_bytes(), vec![], &[1, 1, 1]).unwrap(),
    };
    let batch = batch(3);
    let columns_of = |schema: &TableSchema| {
        let arrow_schema = arrow_schema_of(schema).unwrap();
        let table = LeanTable {
            schema,
            arrow_schema: &arrow_schema,
        };
        guest_columns(&made, 0..3, &batch, &[Some(table)], false).unwrap()
    };
    let short = |cells| {
        MessageOutcome::DeadLetter(format!(
            "table db.t: the row has {cells} cells but the table has 3 columns"
        ))
    };

    // Before the sink saw the column added: a short row does not fit.
    let unaware = columns_of(&schema);
    assert_eq!(unaware.outcomes, [short(2), short(1), MessageOutcome::Rows(1)]);

    schema.added_columns = 1;
    let (outcomes, record) = encoded_path(made.clone(), &schema, &batch);
    assert_eq!(
        outcomes,
        [MessageOutcome::Rows(1), short(1), MessageOutcome::Rows(1)]
    );
    let lean = columns_of(&schema);
    assert_eq!(lean.outcomes, outcomes);
    assert_eq!(lean.rows.record(0..2).unwrap(), record);
    assert_eq!(record.num_rows(), 2);
    let notes = record.column(2);
    assert!(notes.is_null(0) && !notes.is_null(1), "{notes:?}");
}
