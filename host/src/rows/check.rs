//! Whether rows fit their tables: the kind a table takes, one cell per
//! column of the column's type, absent cells only where a partial update
//! may leave them out, decimals within their precision. [`misfits`] is the
//! one place rows are checked; the writer (against the tables as Fluss has
//! them) and `fluss-sink dry-run` (through [`TransformOutput::check_rows`])
//! both call it.

use fluss_row_codec::{Cell, RowKind, RowView};

use super::decimal::decimal_unscaled;
use super::{MessageOutcome, TransformOutput};
use crate::schema::{DataType, TableSchema};

/// A message's first row that does not fit its table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Misfit<'s> {
    /// The message the row came from.
    pub message: u32,
    /// The row's place among its message's rows, from 1.
    pub ordinal: u32,
    /// The table it was checked against.
    pub schema: &'s TableSchema,
    /// Why it does not fit.
    pub reason: String,
}

/// Checks every row of the messages not yet dead-lettered against its
/// table's schema, as `schema_of` gives it for the row's table index;
/// rows of tables it gives no schema for are not checked. Gives, for each
/// message with a row that does not fit, its first such row.
pub(crate) fn misfits<'s>(
    output: &TransformOutput,
    schema_of: impl Fn(u16) -> Option<&'s TableSchema>,
) -> Vec<Misfit<'s>> {
    let mut misfits: Vec<Misfit<'s>> = Vec::new();
    let mut ordinal = 0u32;
    let mut last_message = u32::MAX;
    for (entry, row) in output.rows.iter() {
        ordinal = if entry.message == last_message {
            ordinal + 1
        } else {
            1
        };
        last_message = entry.message;
        let done = matches!(
            output.outcomes[entry.message as usize],
            MessageOutcome::DeadLetter(_)
        ) || misfits.last().is_some_and(|m| m.message == entry.message);
        if done {
            continue;
        }
        let Some(schema) = schema_of(entry.table) else {
            continue;
        };
        if let Err(reason) = check_row(schema, &row) {
            misfits.push(Misfit {
                message: entry.message,
                ordinal,
                schema,
                reason,
            });
        }
    }
    misfits
}

/// Whether one row can be written to `schema`'s table.
pub(crate) fn check_row(schema: &TableSchema, row: &RowView<'_>) -> Result<(), String> {
    check_shape(schema, row.kind, row.cell_count)?;
    let mut first_absent = None;
    for (cell, column) in row.cells().zip(&schema.columns) {
        check_cell(schema, row.kind, column, cell)?;
        if matches!(cell, Cell::Absent) {
            first_absent.get_or_insert(&column.name);
            continue;
        }
        // The codec checks that a DECIMAL cell is text; whether it fits the
        // column's precision after rounding to its scale is checked here.
        if let (Cell::Decimal(text), DataType::Decimal(p, s)) = (cell, column.data_type) {
            decimal_unscaled(text, p, s).map_err(|e| format!("column `{}`: {e}", column.name))?;
        }
    }
    // A partial update needs a table that can take one (checked once a row).
    if let (Some(name), RowKind::Upsert) = (first_absent, row.kind)
        && let Some(reason) = partial_update_refusal(schema)
    {
        return Err(format!("column `{name}` is absent, but {reason}"));
    }
    Ok(())
}

/// Whether a row of `kind` with `cell_count` cells suits `schema`'s table:
/// appends for log tables, upserts and deletes for primary-key tables, one
/// cell per column (the columns added while the sink had the table open
/// may be left out: they get NULL, see [`TableSchema::added_columns`]).
pub(crate) fn check_shape(schema: &TableSchema, kind: RowKind, cell_count: u16) -> Result<(), String> {
    match (kind, schema.has_primary_key()) {
        (RowKind::Append, true) => {
            return Err("an append row for a primary-key table; use upsert or delete".into());
        }
        (RowKind::Upsert | RowKind::Delete, false) => {
            return Err(format!(
                "a {} row for a log table; log tables take appends",
                kind.name()
            ));
        }
        _ => {}
    }
    if !schema.takes_cell_count(cell_count as usize) {
        return Err(format!(
            "the row has {} cells but the table has {} columns",
            cell_count,
            schema.columns.len()
        ));
    }
    Ok(())
}

/// Whether `cell` of a row of `kind` fits `column` of `schema`'s table: an
/// absent cell only where the row may leave the column out, any other of
/// the column's type (or one it widens from). A DECIMAL cell's precision
/// is not checked here but where its text is read ([`check_row`], or the
/// Arrow builder the cell goes into).
#[inline(always)]
pub(crate) fn check_cell(
    schema: &TableSchema,
    kind: RowKind,
    column: &crate::schema::Column,
    cell: Cell<'_>,
) -> Result<(), String> {
    if matches!(cell, Cell::Absent) {
        return absent_allowed(schema, kind, &column.name, column.nullable);
    }
    cell.fits(column)
}

/// Whether a row of `kind` may leave column `name` out: only upserts on
/// primary-key tables may (a partial update), never a key column, and
/// only a nullable one (Fluss fills the columns a partial update leaves
/// out of a new row with NULL). A delete needs its key only. Out of line:
/// absent cells are rare, and [`check_cell`] is inlined into the loops
/// over a row's cells.
#[inline(never)]
fn absent_allowed(schema: &TableSchema, kind: RowKind, name: &str, nullable: bool) -> Result<(), String> {
    if schema.primary_key.iter().any(|k| k == name) {
        return Err(format!("key column `{name}` is absent; a row must give its key"));
    }
    match kind {
        RowKind::Append => Err(format!(
            "column `{name}` is absent; a log table's rows give every column (NULL for none)"
        )),
        RowKind::Upsert if !nullable => Err(format!(
            "column `{name}` is absent but NOT NULL; a partial update may leave out nullable columns only"
        )),
        RowKind::Upsert | RowKind::Delete => Ok(()),
    }
}

/// Why `schema`'s table cannot take partial updates, if it cannot: Fluss
/// needs every column outside the primary key nullable.
pub(crate) fn partial_update_refusal(schema: &TableSchema) -> Option<String> {
    let column = schema
        .columns
        .iter()
        .find(|c| !c.nullable && !schema.primary_key.contains(&c.name))?;
    Some(format!(
        "the table cannot take partial updates: column `{}` is NOT NULL and not in the primary key (Fluss needs every other column nullable)",
        column.name
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::RowBatch;
    use crate::rows::tests::encoded;
    use crate::schema::{Column, TablePath};
    use fluss_row_codec::{Rows, RowsBuilder};

    fn schema() -> TableSchema {
        TableSchema {
            path: TablePath::new("db", "t"),
            columns: vec![Column::new("v", DataType::Int, false)],
            primary_key: vec![],
            partition_keys: vec![],
            added_columns: 0,
        }
    }

    #[test]
    fn a_decimal_past_its_columns_precision_does_not_fit() {
        let s = TableSchema {
            path: TablePath::new("db", "t"),
            columns: vec![Column::new("amount", DataType::Decimal(4, 2), true)],
            primary_key: vec![],
            partition_keys: vec![],
            added_columns: 0,
        };
        let mut b = RowsBuilder::new();
        for text in ["99.99", "99.996", "1x"] {
            b.begin_row(RowKind::Append, 0);
            b.decimal(text);
            b.end_row();
        }
        let bytes = b.into_bytes();
        let results: Vec<Result<(), String>> =
            Rows::new(&bytes).map(|r| check_row(&s, &r.unwrap())).collect();
        assert_eq!(results[0], Ok(()));
        assert_eq!(
            results[1],
            Err("column `amount`: 99.996 does not fit DECIMAL(4, 2)".into()),
            "rounding to the scale carries past the precision"
        );
        assert!(
            results[2]
                .as_ref()
                .unwrap_err()
                .contains("is not a decimal number")
        );
    }

    #[test]
    fn rows_that_do_not_fit_dead_letter_their_message() {
        let s = schema();
        let mut out = TransformOutput {
            outcomes: vec![
                MessageOutcome::Rows(1),
                MessageOutcome::Rows(1),
                MessageOutcome::Rows(1),
            ],
            rows: RowBatch::from_encoded(
                encoded(&[(0, 1), (1, 2), (0, 3)]),
                vec!["db.other".into()],
                &[1, 1, 1],
            )
            .unwrap(),
        };
        out.check_rows(|name| if name.is_none() { Some(&s) } else { None });
        assert_eq!(
            out.outcomes[0],
            MessageOutcome::DeadLetter(
                "row 1 for table db.t: column `v` is INT but the row has a BIGINT value".into()
            )
        );
        assert_eq!(
            out.outcomes[1],
            MessageOutcome::Rows(1),
            "unknown tables are left to the writer"
        );
        assert_eq!(out.rows.len(), 1);
    }

    #[test]
    fn kinds_must_suit_the_table() {
        let mut s = schema();
        s.columns[0].data_type = DataType::BigInt;
        let bytes = encoded(&[(0, 1)]);
        let row = Rows::new(&bytes).next().unwrap().unwrap();
        assert!(check_row(&s, &row).is_ok());
        s.primary_key = vec!["v".into()];
        assert!(check_row(&s, &row).unwrap_err().contains("primary-key table"));
    }

    #[test]
    fn only_partial_upserts_leave_nullable_non_key_columns_out() {
        let keyed = TableSchema {
            path: TablePath::new("db", "t"),
            columns: vec![
                Column::new("id", DataType::BigInt, false),
                Column::new("name", DataType::String, true),
                Column::new("score", DataType::Int, false),
            ],
            primary_key: vec!["id".into()],
            partition_keys: vec![],
            added_columns: 0,
        };
        let check = |schema: &TableSchema, kind: RowKind, cells: [bool; 3]| {
            let mut b = RowsBuilder::new();
            b.begin_row(kind, 0);
            for (i, present) in cells.into_iter().enumerate() {
                match (present, i) {
                    (false, _) => b.absent(),
                    (true, 1) => b.string("x"),
                    (true, _) => b.bigint(1),
                }
            }
            b.end_row();
            let bytes = b.into_bytes();
            let row = Rows::new(&bytes).next().unwrap().unwrap();
            check_row(schema, &row)
        };
        let mut keyed = keyed;
        keyed.columns[2].data_type = DataType::BigInt;
        let not_null = check(&keyed, RowKind::Upsert, [true, false, true]).unwrap_err();
        assert!(
            not_null.contains("cannot take partial updates: column `score`"),
            "{not_null}"
        );
        keyed.columns[2].nullable = true;
        assert!(check(&keyed, RowKind::Upsert, [true, false, true]).is_ok());
        assert!(check(&keyed, RowKind::Delete, [true, false, false]).is_ok());
        let key = check(&keyed, RowKind::Upsert, [false, true, true]).unwrap_err();
        assert!(key.contains("key column `id` is absent"), "{key}");
        keyed.columns[1].nullable = false;
        let not_null = check(&keyed, RowKind::Upsert, [true, false, true]).unwrap_err();
        assert!(not_null.contains("`name` is absent but NOT NULL"), "{not_null}");
        let mut log = keyed.clone();
        log.primary_key.clear();
        let append = check(&log, RowKind::Append, [true, false, true]).unwrap_err();
        assert!(append.contains("log table's rows give every column"), "{append}");
    }
}
