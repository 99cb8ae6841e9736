//! What a batch became: one outcome per message and the rows, kept in the
//! compact encoding (see `fluss_row_codec`) until the writer turns them into
//! Arrow batches or keyed writes.

use fluss_row_codec::{Cell, DEFAULT_TABLE, RowKind, RowView, Rows};

use crate::decimal::decimal_unscaled;
use crate::schema::{DataType, TableSchema};

/// What became of one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageOutcome {
    /// It became this many rows; zero means it was filtered out.
    Rows(u32),
    /// It cannot become rows, for this reason.
    DeadLetter(String),
}

/// Where one row sits in a [`RowBatch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowEntry {
    /// Index of the message the row came from, within its batch.
    pub message: u32,
    /// What to do with the row.
    pub kind: RowKind,
    /// 0 for the sink's table, else 1-based into [`RowBatch::tables`].
    pub table: u16,
    cell_count: u16,
    start: u32,
    end: u32,
}

/// Encoded rows with, for each, its message and its place in the buffer.
#[derive(Debug, Clone, Default)]
pub struct RowBatch {
    bytes: Vec<u8>,
    tables: Vec<String>,
    entries: Vec<RowEntry>,
}

impl RowBatch {
    /// Reads `bytes` (rows in the compact encoding) and gives each row to its
    /// message: message `i` owns the next `counts[i]` rows. Fails when the
    /// buffer does not decode, names a table index out of range, or holds
    /// more or fewer rows than the counts add up to.
    pub fn from_encoded(bytes: Vec<u8>, tables: Vec<String>, counts: &[u32]) -> Result<Self, String> {
        let expected: u64 = counts.iter().map(|&c| c as u64).sum();
        let mut entries = Vec::with_capacity(expected as usize);
        let mut owners = counts
            .iter()
            .enumerate()
            .flat_map(|(i, &c)| std::iter::repeat_n(i as u32, c as usize));
        for row in Rows::new(&bytes) {
            let row = row.map_err(|e| e.to_string())?;
            if row.table as usize > tables.len() {
                return Err(format!(
                    "row at byte {} names table index {} but the output lists {} tables",
                    row.offset,
                    row.table,
                    tables.len()
                ));
            }
            let message = owners.next().ok_or_else(|| {
                format!("the outcomes account for {expected} rows but the row buffer holds more")
            })?;
            entries.push(RowEntry {
                message,
                kind: row.kind,
                table: row.table,
                cell_count: row.cell_count,
                start: row.offset as u32,
                end: (row.offset + row.encoded_len()) as u32,
            });
        }
        if (entries.len() as u64) < expected {
            return Err(format!(
                "the outcomes account for {expected} rows but the row buffer holds {}",
                entries.len()
            ));
        }
        Ok(Self {
            bytes,
            tables,
            entries,
        })
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there are no rows.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Size of the encoded rows in bytes.
    pub fn encoded_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// Table names other than the sink's own, 1-based in [`RowEntry::table`].
    pub fn tables(&self) -> &[String] {
        &self.tables
    }

    /// The name a row's table index stands for; `None` for the sink's table.
    pub fn table_name(&self, table: u16) -> Option<&str> {
        if table == DEFAULT_TABLE {
            None
        } else {
            self.tables.get(table as usize - 1).map(String::as_str)
        }
    }

    /// Every row with its entry.
    pub fn iter(&self) -> impl Iterator<Item = (RowEntry, RowView<'_>)> + '_ {
        // Every row was fully decoded once when the batch was built, so the
        // views are rebuilt from the entries without decoding again.
        self.entries.iter().map(|e| {
            let row = RowView {
                kind: e.kind,
                table: e.table,
                cell_count: e.cell_count,
                cell_bytes: &self.bytes[e.start as usize + 5..e.end as usize],
                offset: e.start as usize,
            };
            (*e, row)
        })
    }

    /// Every row's message and its encoded bytes, in order (rows dropped by
    /// [`RowBatch::retain_messages`] left out): what [`RowBatch::from_encoded`]
    /// reads back.
    pub(crate) fn encoded_rows(&self) -> impl Iterator<Item = (u32, &[u8])> + '_ {
        self.entries
            .iter()
            .map(|e| (e.message, &self.bytes[e.start as usize..e.end as usize]))
    }

    /// Keeps only rows whose message `keep` accepts.
    pub fn retain_messages(&mut self, mut keep: impl FnMut(u32) -> bool) {
        self.entries.retain(|e| keep(e.message));
    }

    /// Appends `other`'s rows, shifting their message indexes by `message_offset`.
    pub fn append(&mut self, other: RowBatch, message_offset: u32) {
        let base = self.bytes.len() as u32;
        let remap: Vec<u16> = other
            .tables
            .iter()
            .map(|name| match self.tables.iter().position(|t| t == name) {
                Some(i) => (i + 1) as u16,
                None => {
                    self.tables.push(name.clone());
                    self.tables.len() as u16
                }
            })
            .collect();
        self.bytes.extend_from_slice(&other.bytes);
        self.entries.extend(other.entries.into_iter().map(|e| RowEntry {
            message: e.message + message_offset,
            table: if e.table == DEFAULT_TABLE {
                DEFAULT_TABLE
            } else {
                remap[e.table as usize - 1]
            },
            start: e.start + base,
            end: e.end + base,
            ..e
        }));
    }
}

/// The result of turning a batch into rows.
#[derive(Debug, Clone, Default)]
pub struct TransformOutput {
    /// One per input message, in order.
    pub outcomes: Vec<MessageOutcome>,
    /// The rows of the messages whose outcome is [`MessageOutcome::Rows`].
    pub rows: RowBatch,
}

impl TransformOutput {
    /// Appends the output of the next messages of the same batch.
    pub fn append(&mut self, other: TransformOutput) {
        let offset = self.outcomes.len() as u32;
        self.outcomes.extend(other.outcomes);
        self.rows.append(other.rows, offset);
    }

    /// Messages that became rows, were filtered and were dead-lettered.
    pub fn counts(&self) -> (usize, usize, usize) {
        let mut counts = (0, 0, 0);
        for o in &self.outcomes {
            match o {
                MessageOutcome::Rows(0) => counts.1 += 1,
                MessageOutcome::Rows(_) => counts.0 += 1,
                MessageOutcome::DeadLetter(_) => counts.2 += 1,
            }
        }
        counts
    }

    /// Checks every row against its table's schema, as `lookup` gives it
    /// (`None` for the sink's own table); rows for tables it does not know
    /// are left for the writer to check. A message with a row that does not
    /// fit is dead-lettered with the reason and all its rows are dropped.
    pub fn check_rows<'s>(&mut self, lookup: impl Fn(Option<&str>) -> Option<&'s TableSchema>) {
        let mut failed = false;
        let mut ordinal = 0u32;
        let mut last_message = u32::MAX;
        for (entry, row) in self.rows.iter() {
            ordinal = if entry.message == last_message {
                ordinal + 1
            } else {
                1
            };
            last_message = entry.message;
            if matches!(
                self.outcomes[entry.message as usize],
                MessageOutcome::DeadLetter(_)
            ) {
                continue;
            }
            let Some(schema) = lookup(self.rows.table_name(entry.table)) else {
                continue;
            };
            if let Err(reason) = check_row(schema, &row) {
                self.outcomes[entry.message as usize] =
                    MessageOutcome::DeadLetter(format!("row {ordinal} for table {}: {reason}", schema.path));
                failed = true;
            }
        }
        if failed {
            let outcomes = &self.outcomes;
            self.rows
                .retain_messages(|m| matches!(outcomes[m as usize], MessageOutcome::Rows(_)));
        }
    }
}

/// Whether one row can be written to `schema`'s table.
pub fn check_row(schema: &TableSchema, row: &RowView<'_>) -> Result<(), String> {
    match (row.kind, schema.has_primary_key()) {
        (RowKind::Append, true) => {
            return Err("an append row for a primary-key table; use upsert or delete".into());
        }
        (RowKind::Upsert | RowKind::Delete, false) => {
            return Err(format!(
                "a {} row for a log table; log tables take appends",
                row.kind.name()
            ));
        }
        _ => {}
    }
    if row.cell_count as usize != schema.columns.len() {
        return Err(format!(
            "the row has {} cells but the table has {} columns",
            row.cell_count,
            schema.columns.len()
        ));
    }
    let mut first_absent = None;
    for (cell, column) in row.cells().zip(&schema.columns) {
        if matches!(cell, Cell::Absent) {
            absent_allowed(schema, row.kind, &column.name, column.nullable)?;
            first_absent.get_or_insert(&column.name);
            continue;
        }
        cell.fits(column)?;
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

/// Whether a row of `kind` may leave column `name` out: only upserts on
/// primary-key tables may (a partial update), never a key column, and
/// only a nullable one (Fluss fills the columns a partial update leaves
/// out of a new row with NULL). A delete needs its key only.
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
pub fn partial_update_refusal(schema: &TableSchema) -> Option<String> {
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
    use crate::schema::{Column, DataType, TablePath};
    use fluss_row_codec::RowsBuilder;

    fn encoded(rows: &[(u16, i64)]) -> Vec<u8> {
        let mut b = RowsBuilder::new();
        for &(table, v) in rows {
            b.begin_row(RowKind::Append, table);
            b.bigint(v);
            b.end_row();
        }
        b.into_bytes()
    }

    fn schema() -> TableSchema {
        TableSchema {
            path: TablePath::new("db", "t"),
            columns: vec![Column::new("v", DataType::Int, false)],
            primary_key: vec![],
            partition_keys: vec![],
        }
    }

    #[test]
    fn rows_go_to_their_messages() {
        let batch = RowBatch::from_encoded(
            encoded(&[(0, 1), (1, 2), (0, 3)]),
            vec!["db.x".into()],
            &[2, 0, 1],
        )
        .unwrap();
        let owners: Vec<u32> = batch.iter().map(|(e, _)| e.message).collect();
        assert_eq!(owners, vec![0, 0, 2]);
        assert_eq!(batch.table_name(1), Some("db.x"));
        assert_eq!(batch.table_name(0), None);
    }

    #[test]
    fn counts_must_match_the_rows() {
        let err = RowBatch::from_encoded(encoded(&[(0, 1), (0, 2)]), vec![], &[1]).unwrap_err();
        assert!(err.contains("holds more"), "{err}");
        let err = RowBatch::from_encoded(encoded(&[(0, 1)]), vec![], &[1, 1]).unwrap_err();
        assert!(err.contains("holds 1"), "{err}");
        let err = RowBatch::from_encoded(encoded(&[(3, 1)]), vec![], &[1]).unwrap_err();
        assert!(err.contains("table index 3"), "{err}");
    }

    #[test]
    fn append_remaps_tables_and_messages() {
        let mut a = TransformOutput {
            outcomes: vec![MessageOutcome::Rows(1)],
            rows: RowBatch::from_encoded(encoded(&[(1, 1)]), vec!["db.a".into()], &[1]).unwrap(),
        };
        let b = TransformOutput {
            outcomes: vec![MessageOutcome::DeadLetter("x".into()), MessageOutcome::Rows(2)],
            rows: RowBatch::from_encoded(
                encoded(&[(1, 2), (2, 3)]),
                vec!["db.b".into(), "db.a".into()],
                &[0, 2],
            )
            .unwrap(),
        };
        a.append(b);
        let rows: Vec<(u32, Option<&str>)> = a
            .rows
            .iter()
            .map(|(e, _)| (e.message, a.rows.table_name(e.table)))
            .collect();
        assert_eq!(
            rows,
            vec![(0, Some("db.a")), (2, Some("db.b")), (2, Some("db.a"))]
        );
        assert_eq!(a.counts(), (2, 0, 1));
    }

    #[test]
    fn a_decimal_past_its_columns_precision_does_not_fit() {
        let s = TableSchema {
            path: TablePath::new("db", "t"),
            columns: vec![Column::new("amount", DataType::Decimal(4, 2), true)],
            primary_key: vec![],
            partition_keys: vec![],
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
