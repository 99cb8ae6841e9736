//! What a batch became: one outcome per message and the rows, kept in the
//! compact encoding (see `fluss_row_codec`) until the writer turns them into
//! Arrow batches or keyed writes.

pub(crate) mod check;
pub(crate) mod columns;
pub(crate) mod decimal;
pub(crate) mod guest_columns;
pub(crate) mod guest_keyed;
pub(crate) mod json;
pub(crate) mod keyed;
pub(crate) mod metadata;
mod outcome;
mod read;
pub(crate) mod to_fluss;

use fluss_row_codec::{DEFAULT_TABLE, RowKind, RowView};

use crate::schema::TableSchema;
pub(crate) use check::partial_update_refusal;
pub use outcome::{DeadLetterKind, MessageOutcome};
pub(crate) use read::RowVisitor;

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
        self.entries.iter().map(|e| (*e, self.view(e)))
    }

    /// The rows of messages `messages`, with their entries (rows are in
    /// message order).
    pub(crate) fn iter_messages(
        &self,
        messages: std::ops::Range<usize>,
    ) -> impl Iterator<Item = (RowEntry, RowView<'_>)> + '_ {
        let (first, last) = (messages.start as u32, messages.end as u32);
        let start = self.entries.partition_point(|e| e.message < first);
        let end = self.entries.partition_point(|e| e.message < last);
        self.entries[start..end].iter().map(|e| (*e, self.view(e)))
    }

    fn view(&self, e: &RowEntry) -> RowView<'_> {
        RowView {
            kind: e.kind,
            table: e.table,
            cell_count: e.cell_count,
            cell_bytes: &self.bytes[e.start as usize + 5..e.end as usize],
            offset: e.start as usize,
        }
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

    /// Room for `rows` more rows of `bytes` more encoded bytes.
    pub fn reserve(&mut self, rows: usize, bytes: usize) {
        self.entries.reserve(rows);
        self.bytes.reserve(bytes);
    }

    /// The index of each of `names` among the batch's tables, as a row's
    /// table index (1-based), naming those it does not name yet.
    pub(crate) fn table_indexes(&mut self, names: &[String]) -> Vec<u16> {
        names
            .iter()
            .map(|name| match self.tables.iter().position(|t| t == name) {
                Some(i) => (i + 1) as u16,
                None => {
                    self.tables.push(name.clone());
                    self.tables.len() as u16
                }
            })
            .collect()
    }

    /// This batch (of `messages` messages) with each row of the sink's
    /// table that has `cells` cells given NULL cells up to `columns`: rows
    /// made for the table before columns were added to its end (Fluss adds
    /// columns only there), read back from the spool by a process that
    /// opened the table with them. Other rows are kept as they are.
    pub(crate) fn padded(&self, messages: usize, cells: u16, columns: u16) -> RowBatch {
        let mut rows = fluss_row_codec::RowsBuilder::with_capacity(self.bytes.len());
        let mut counts = vec![0u32; messages];
        for (entry, view) in self.iter() {
            rows.begin_row(entry.kind, entry.table);
            for cell in view.cells() {
                rows.cell(cell);
            }
            if entry.table == DEFAULT_TABLE && entry.cell_count == cells {
                for _ in cells..columns {
                    rows.null();
                }
            }
            rows.end_row();
            counts[entry.message as usize] += 1;
        }
        RowBatch::from_encoded(rows.into_bytes(), self.tables.clone(), &counts)
            .expect("rows re-encoded from rows that decoded")
    }

    /// Appends `other`'s rows, shifting their message indexes by `message_offset`.
    pub fn append(&mut self, other: &RowBatch, message_offset: u32) {
        let base = self.bytes.len() as u32;
        let remap = self.table_indexes(&other.tables);
        self.bytes.extend_from_slice(&other.bytes);
        self.entries.extend(other.entries.iter().map(|&e| RowEntry {
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
    /// Appends the output of the next messages of the same batch; taken
    /// whole, without a copy, when this one is empty.
    pub fn append(&mut self, other: TransformOutput) {
        if self.outcomes.is_empty() && self.rows.is_empty() && self.rows.tables.is_empty() {
            *self = other;
            return;
        }
        self.append_copy(&other);
    }

    /// The names of the tables the rows go to (`sink` for the sink's own).
    /// A table the guest named but sent no row of this output is not one:
    /// a transform that routes keeps naming every table it has met.
    pub(crate) fn table_names(&self, sink: &str) -> std::collections::BTreeSet<String> {
        // Index 0 is the sink's table, index i the guest's table i - 1.
        let mut written = vec![false; self.rows.tables().len() + 1];
        for (entry, _) in self.rows.iter() {
            if let Some(seen) = written.get_mut(entry.table as usize) {
                *seen = true;
            }
        }
        let sink_written = written[DEFAULT_TABLE as usize];
        let routed = (self.rows.tables().iter().zip(&written[1..]))
            .filter(|(_, w)| **w)
            .map(|(name, _)| name.clone());
        routed.chain(sink_written.then(|| sink.to_string())).collect()
    }

    /// Appends a copy of `other`, the output of the next messages of the
    /// same batch (for outputs shared with the spool).
    pub fn append_copy(&mut self, other: &TransformOutput) {
        let offset = self.outcomes.len() as u32;
        self.outcomes.extend_from_slice(&other.outcomes);
        self.rows.append(&other.rows, offset);
    }

    /// Room for `messages` more messages with `rows` more rows of `bytes`
    /// more encoded bytes.
    pub fn reserve(&mut self, messages: usize, rows: usize, bytes: usize) {
        self.outcomes.reserve(messages);
        self.rows.reserve(rows, bytes);
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
        let misfits = check::misfits(self, |table| lookup(self.rows.table_name(table)));
        if misfits.is_empty() {
            return;
        }
        for misfit in misfits {
            self.outcomes[misfit.message as usize] = MessageOutcome::DeadLetter(format!(
                "row {} for table {}: {}",
                misfit.ordinal, misfit.schema.path, misfit.reason
            ));
        }
        let outcomes = &self.outcomes;
        self.rows
            .retain_messages(|m| matches!(outcomes[m as usize], MessageOutcome::Rows(_)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fluss_row_codec::RowsBuilder;

    /// One BIGINT append row per `(table, value)`, encoded.
    pub(super) fn encoded(rows: &[(u16, i64)]) -> Vec<u8> {
        let mut b = RowsBuilder::new();
        for &(table, v) in rows {
            b.begin_row(RowKind::Append, table);
            b.bigint(v);
            b.end_row();
        }
        b.into_bytes()
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
    fn table_names_are_the_routed_tables_and_the_sinks_when_a_row_is_its() {
        let output = |rows: &[(u16, i64)], counts: &[u32]| TransformOutput {
            outcomes: counts.iter().map(|&n| MessageOutcome::Rows(n)).collect(),
            rows: RowBatch::from_encoded(encoded(rows), vec!["db.x".into()], counts).unwrap(),
        };
        let names = |o: TransformOutput| o.table_names("db.sink").into_iter().collect::<Vec<_>>();
        assert_eq!(names(output(&[(0, 1), (1, 2)], &[2])), ["db.sink", "db.x"]);
        assert_eq!(names(output(&[(1, 2)], &[1])), ["db.x"], "no row is the sink's");
        assert!(
            names(output(&[(0, 1)], &[1])) == ["db.sink"] && names(output(&[], &[0])).is_empty(),
            "a table named without a row is not written"
        );
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
    fn padding_gives_the_sink_tables_short_rows_null_cells_only() {
        // Message 0: a one-cell row of the sink's table and one of db.x;
        // message 1: none; message 2: a two-cell row of the sink's table.
        let mut b = RowsBuilder::new();
        for (table, cells) in [(0u16, 1), (1, 1), (0, 2)] {
            b.begin_row(RowKind::Append, table);
            for v in 0..cells {
                b.bigint(v);
            }
            b.end_row();
        }
        let batch = RowBatch::from_encoded(b.into_bytes(), vec!["db.x".into()], &[2, 0, 1]).unwrap();
        let padded = batch.padded(3, 1, 3);
        let rows: Vec<(u32, u16, Vec<fluss_row_codec::Cell<'_>>)> = padded
            .iter()
            .map(|(e, view)| (e.message, e.table, view.cells().collect()))
            .collect();
        use fluss_row_codec::Cell::{BigInt, Null};
        assert_eq!(
            rows,
            vec![
                (0, 0, vec![BigInt(0), Null, Null]),
                (0, 1, vec![BigInt(0)]),
                (2, 0, vec![BigInt(0), BigInt(1)]),
            ]
        );
    }

    /// A row as compared: its message, table name and encoded bytes.
    type RowShape = (u32, Option<String>, Vec<u8>);

    /// Each outcome, then each row's shape.
    fn shape(o: &TransformOutput) -> (Vec<MessageOutcome>, Vec<RowShape>) {
        let rows = o
            .rows
            .encoded_rows()
            .zip(o.rows.iter())
            .map(|((m, bytes), (e, _))| (m, o.rows.table_name(e.table).map(str::to_string), bytes.to_vec()))
            .collect();
        (o.outcomes.clone(), rows)
    }

    #[test]
    fn appending_to_an_empty_output_by_move_or_copy_gives_the_same_output() {
        let b = TransformOutput {
            outcomes: vec![MessageOutcome::DeadLetter("x".into()), MessageOutcome::Rows(2)],
            rows: RowBatch::from_encoded(encoded(&[(1, 2), (0, 3)]), vec!["db.b".into()], &[0, 2]).unwrap(),
        };
        let mut moved = TransformOutput::default();
        moved.append(b.clone());
        let mut copied = TransformOutput::default();
        copied.reserve(2, 2, b.rows.encoded_bytes());
        copied.append_copy(&b);
        assert_eq!(shape(&moved), shape(&b));
        assert_eq!(shape(&copied), shape(&b));
        // Then a second part lands after the first in both.
        moved.append(b.clone());
        copied.append_copy(&b);
        assert_eq!(shape(&moved), shape(&copied));
        assert_eq!(moved.counts(), (2, 0, 2));
        assert_eq!(
            shape(&moved).1.iter().map(|r| r.0).collect::<Vec<_>>(),
            vec![1, 1, 3, 3]
        );
    }
}
