//! The lean row path for primary-key tables: the JSON mapping's rows made
//! straight into the `GenericRow`s fluss-rs's upsert writer takes, each
//! cell checked against its column as it is put in the row (the checks and
//! words of [`crate::rows::check`]), instead of JSON → encoded rows →
//! decoded, checked, grouped → converted. Metadata columns are filled from
//! the message as the row is made.
#![cfg_attr(not(feature = "test-support"), allow(unreachable_pub))]

use fluss::row::GenericRow;
use fluss_row_codec::{Cell, DEFAULT_TABLE, RowKind, RowSink};

use super::check::{check_cell, check_shape};
use super::json::JsonMapping;
use super::metadata::MetadataColumn;
use super::to_fluss::datum;
use super::{MessageOutcome, TransformOutput};
use crate::batch::MessageBatch;
use crate::schema::TableSchema;

/// One row for a primary-key table: its message (within the batch), its
/// kind (upsert or delete) and its cells as fluss-rs takes them.
pub(crate) type KeyedRow = (u32, RowKind, GenericRow<'static>);

/// What a batch became on the keyed lean path: one outcome per message,
/// and the rows of the messages whose outcome is [`MessageOutcome::Rows`].
#[derive(Debug, Clone, Default)]
pub struct KeyedOutput {
    /// One per input message, in order.
    pub outcomes: Vec<MessageOutcome>,
    pub(crate) rows: Vec<KeyedRow>,
}

impl KeyedOutput {
    /// Appends the output of the next messages of the same batch.
    pub fn append(&mut self, other: KeyedOutput) {
        let offset = self.outcomes.len() as u32;
        self.outcomes.extend(other.outcomes);
        self.rows.extend(
            other
                .rows
                .into_iter()
                .map(|(m, kind, row)| (m + offset, kind, row)),
        );
    }

    /// Number of rows.
    pub fn row_count(&self) -> usize {
        self.rows.len()
    }
}

/// Builds [`KeyedRow`]s one row at a time: a [`RowSink`] for the JSON
/// mapping, and the builder of a transform's rows (`guest_keyed.rs`). A
/// row with a cell that does not fit its column is left out and the
/// reason kept for [`KeyedRowsBuilder::take_refusal`].
pub(super) struct KeyedRowsBuilder<'b> {
    batch: &'b MessageBatch,
    /// The batch's index of message 0 of the rows built (metadata is read there).
    first: usize,
    schema: &'b TableSchema,
    /// Per column, the metadata it is filled with (empty: none are).
    metadata: Vec<Option<MetadataColumn>>,
    /// The message of the rows being built, counted from `first`.
    pub(super) message: u32,
    kind: RowKind,
    column: usize,
    row: GenericRow<'static>,
    refusal: Option<String>,
    /// Whether an upsert row left a column out since the last
    /// [`KeyedRowsBuilder::take_partial`]: a partial update, which this
    /// path does not write.
    partial: bool,
    pub(super) rows: Vec<KeyedRow>,
}

impl<'b> KeyedRowsBuilder<'b> {
    /// Rows (about `rows` of them) for `schema`'s table of the messages of
    /// `batch` from `first` on.
    pub(super) fn new(
        batch: &'b MessageBatch,
        first: usize,
        rows: usize,
        schema: &'b TableSchema,
        include_metadata: bool,
    ) -> Self {
        Self {
            batch,
            first,
            schema,
            metadata: MetadataColumn::columns_of(schema, include_metadata),
            message: 0,
            kind: RowKind::Upsert,
            column: 0,
            row: GenericRow::new(0),
            refusal: None,
            partial: false,
            rows: Vec::with_capacity(rows),
        }
    }

    /// Why the last rows did not fit, if one did not.
    pub(super) fn take_refusal(&mut self) -> Option<String> {
        self.refusal.take()
    }

    /// Whether an upsert row left a column out since the last call.
    pub(super) fn take_partial(&mut self) -> bool {
        std::mem::take(&mut self.partial)
    }

    /// Starts a row of `kind` that will have `cell_count` cells.
    pub(super) fn start_row(&mut self, kind: RowKind, cell_count: u16) {
        self.kind = kind;
        self.column = 0;
        self.row = GenericRow::new(self.schema.columns.len());
        if let Err(reason) = check_shape(self.schema, kind, cell_count) {
            self.refusal.get_or_insert(reason);
        }
    }

    /// Puts `cell` in column `index` of the current row, once it fits.
    fn put(&mut self, index: usize, cell: Cell<'_>) -> Result<(), String> {
        let column = &self.schema.columns[index];
        check_cell(self.schema, self.kind, column, cell)?;
        if matches!(cell, Cell::Absent) && self.kind == RowKind::Upsert {
            // Partial updates, the only rows to leave a column out, go the
            // encoded way: the JSON mapping's stage is chosen only without
            // them, and a transform's chunk with one is handed back.
            self.partial = true;
            return Err(format!(
                "column `{}` is absent; whole rows only on this path",
                column.name
            ));
        }
        self.row.set_field(index, datum(cell, column)?);
        Ok(())
    }
}

impl RowSink for KeyedRowsBuilder<'_> {
    fn begin_row(&mut self, kind: RowKind, _table: u16) {
        // The mapping's rows have a cell per column; too many or too few
        // are counted as they come.
        self.start_row(kind, self.schema.columns.len() as u16);
    }

    #[inline]
    fn cell(&mut self, cell: Cell<'_>) {
        let i = self.column;
        self.column += 1;
        if i >= self.schema.columns.len() {
            self.refusal
                .get_or_insert_with(|| "the row has more cells than the table has columns".into());
            return;
        }
        if self.refusal.is_some() {
            return;
        }
        let put = match self.metadata.get(i).copied().flatten() {
            Some(metadata) => {
                let (batch, message) = (self.batch, self.first + self.message as usize);
                metadata.with_cell(batch, message, |c| self.put(i, c))
            }
            None => self.put(i, cell),
        };
        if let Err(reason) = put {
            self.refusal = Some(reason);
        }
    }

    fn end_row(&mut self) {
        let columns = self.schema.columns.len();
        if self.schema.takes_cell_count(self.column) {
            // A row made before the table's last columns were added: they
            // get NULL (or, for metadata columns, the message's values).
            while self.column < columns {
                self.cell(Cell::Null);
            }
        }
        if self.column < columns {
            self.refusal.get_or_insert_with(|| {
                format!(
                    "the row has {} cells but the table has {columns} columns",
                    self.column
                )
            });
        }
        let row = std::mem::replace(&mut self.row, GenericRow::new(0));
        if self.refusal.is_none() {
            self.rows.push((self.message, self.kind, row));
        }
    }
}

/// The JSON mapping onto a primary-key table's rows, on the keyed lean
/// path: the same outcomes and dead-letter words as
/// [`JsonMapping::map_batch`] followed by the writer's check, without
/// encoded rows in between.
#[derive(Debug, Clone)]
pub struct KeyedMapping {
    mapping: JsonMapping,
    schema: TableSchema,
    include_metadata: bool,
}

impl KeyedMapping {
    /// `mapping` (onto one table, without partial updates) onto `schema`'s
    /// columns; with `include_metadata`, metadata columns are filled from
    /// each message.
    pub fn new(mapping: JsonMapping, schema: TableSchema, include_metadata: bool) -> Self {
        debug_assert!(mapping.maps_to_one_table() && !mapping.is_partial_update());
        Self {
            mapping,
            schema,
            include_metadata,
        }
    }

    /// The mapping it maps with (for encoded rows of the same messages).
    pub fn mapping(&self) -> &JsonMapping {
        &self.mapping
    }

    /// One row per JSON object; a payload that does not map, or whose row
    /// does not fit the table, is dead-lettered with the reason.
    pub fn map_batch(&self, batch: &MessageBatch) -> KeyedOutput {
        let mut rows = KeyedRowsBuilder::new(batch, 0, batch.len(), &self.schema, self.include_metadata);
        let mut outcomes = Vec::with_capacity(batch.len());
        for (i, message) in batch.iter().enumerate() {
            rows.message = i as u32;
            let mapped =
                self.mapping
                    .map_message_into(message.headers, message.payload, DEFAULT_TABLE, &mut rows);
            outcomes.push(match mapped.map(|()| rows.take_refusal()) {
                Ok(None) => MessageOutcome::Rows(1),
                Ok(Some(reason)) => {
                    MessageOutcome::DeadLetter(format!("table {}: {reason}", self.schema.path))
                }
                Err(reason) => MessageOutcome::DeadLetter(reason),
            });
        }
        KeyedOutput {
            outcomes,
            rows: rows.rows,
        }
    }

    /// [`KeyedMapping::map_batch`] as encoded rows (what the other stages
    /// give, for callers that want rows to look at).
    pub fn encoded(&self, batch: &MessageBatch) -> TransformOutput {
        self.mapping.map_batch(batch)
    }
}

#[cfg(test)]
mod tests {
    use fluss::row::Datum;

    use super::*;
    use crate::batch::{Header, HeaderKind, Source};
    use crate::rows::check::misfits;
    use crate::rows::to_fluss::generic_row;
    use crate::schema::{Column, DataType, TablePath};

    fn schema() -> TableSchema {
        TableSchema {
            path: TablePath::new("db", "pk"),
            columns: vec![
                Column::new("id", DataType::BigInt, false),
                Column::new("name", DataType::String, false),
                Column::new("amount", DataType::Decimal(4, 2), true),
                Column::new("iggy_offset", DataType::BigInt, true),
            ],
            primary_key: vec!["id".into()],
            partition_keys: vec![],
            added_columns: 0,
        }
    }

    fn batch(messages: &[(&str, Option<&str>)]) -> MessageBatch {
        let mut batch = MessageBatch::new(Source::default());
        for (i, (payload, op)) in messages.iter().enumerate() {
            let headers: Vec<Header> = op
                .iter()
                .map(|op| Header {
                    key: "op".into(),
                    kind: HeaderKind::String,
                    value: op.as_bytes().to_vec(),
                })
                .collect();
            batch
                .push(100 + i as u64, i as u128, 0, payload.as_bytes(), headers)
                .unwrap();
        }
        batch
    }

    /// What the encoded path makes of `batch`: the mapping, metadata filled,
    /// the writer's check, then each row converted.
    fn encoded_path(
        mapping: &JsonMapping,
        schema: &TableSchema,
        batch: &MessageBatch,
    ) -> (Vec<MessageOutcome>, Vec<KeyedRow>) {
        let mut output = mapping.map_batch(batch);
        crate::rows::metadata::fill(&mut output, batch, |_| Some(schema));
        for misfit in misfits(&output, |_| Some(schema)) {
            output.outcomes[misfit.message as usize] =
                MessageOutcome::DeadLetter(format!("table {}: {}", schema.path, misfit.reason));
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
    fn the_keyed_path_gives_what_the_encoded_path_gives() {
        let schema = schema();
        let mapping = JsonMapping::new(&schema, RowKind::Upsert)
            .with_metadata(true)
            .with_op_header(Some("op".into()));
        let keyed = KeyedMapping::new(mapping.clone(), schema.clone(), true);
        let batch = batch(&[
            (r#"{"id":1,"name":"a","amount":"12.34"}"#, None),
            // Rounds past DECIMAL(4, 2)'s precision: the writer's check refuses it.
            (r#"{"id":2,"name":"b","amount":"123.456"}"#, None),
            (r#"{"id":3,"amount":"1.00"}"#, None),
            (r#"{"id":4,"name":"d"}"#, Some("delete")),
            (r#"{"id":5,"name":"e"}"#, Some("merge")),
            (r#"not json"#, None),
            (
                r#"{"id":7,"name":"g","amount":1.5,"iggy_offset":5}"#,
                Some("update"),
            ),
        ]);
        let (outcomes, rows) = encoded_path(&mapping, &schema, &batch);
        let made = keyed.map_batch(&batch);
        assert_eq!(made.outcomes, outcomes);
        assert_eq!(made.rows, rows);
        // Not vacuous: rows of both kinds were made, and some messages refused.
        assert_eq!(
            made.rows.iter().map(|(m, k, _)| (*m, *k)).collect::<Vec<_>>(),
            vec![(0, RowKind::Upsert), (3, RowKind::Delete), (6, RowKind::Upsert)]
        );
        assert!(matches!(&made.outcomes[1], MessageOutcome::DeadLetter(r) if r.contains("DECIMAL(4, 2)")));
        assert_eq!(
            &made.rows[2].2.values[3],
            &Datum::from(106i64),
            "the metadata column holds the message's offset, not the payload's"
        );
    }

    #[test]
    fn outputs_of_a_batch_s_chunks_append_in_message_order() {
        let schema = schema();
        let mapping = JsonMapping::new(&schema, RowKind::Upsert);
        let keyed = KeyedMapping::new(mapping, schema, false);
        let batch = batch(&[
            (r#"{"id":1,"name":"a"}"#, None),
            (r#"{"id":2}"#, None),
            (r#"{"id":3,"name":"c"}"#, None),
        ]);
        let mut whole = keyed.map_batch(&batch.slice(0..2));
        whole.append(keyed.map_batch(&batch.slice(2..3)));
        let at_once = keyed.map_batch(&batch);
        assert_eq!(whole.outcomes, at_once.outcomes);
        assert_eq!(whole.rows, at_once.rows);
        assert_eq!(
            whole.rows.iter().map(|(m, _, _)| *m).collect::<Vec<_>>(),
            vec![0, 2]
        );
    }
}
