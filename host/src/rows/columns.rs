//! The lean row path: rows for the sink's own log table made straight into
//! the Arrow columns the writer appends, in one pass over each payload,
//! instead of JSON → encoded rows → decoded again → Arrow. The JSON mapping
//! (`fluss_row_codec::json`, the same coercions as the `json-to-row`
//! transform) writes each cell into its column's builder; metadata columns
//! are filled from the message as the row is made. Every row is checked
//! once, by the mapping, against the columns it was built from.

use std::ops::Range;

use arrow::array::{ArrayRef, BooleanArray};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use fluss_row_codec::{Cell, RowKind, RowSink};

use crate::batch::MessageBatch;
use crate::rows::MessageOutcome;
use crate::rows::metadata::MetadataColumn;
use crate::rows::to_fluss::ColumnBuilder;
use crate::schema::TableSchema;

/// Rows of the sink's table as Arrow record batches (one per chunk of the
/// batch), in message order, with each row's message.
#[derive(Debug, Clone, Default)]
pub struct ColumnRows {
    /// Each segment's first row, its batch, and the bytes of its rows'
    /// arrays, on average.
    segments: Vec<(usize, RecordBatch, usize)>,
    /// The message of each row, within the batch.
    messages: Vec<u32>,
}

impl ColumnRows {
    /// Number of rows.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// True when there are no rows.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// The message of each row.
    pub fn messages(&self) -> &[u32] {
        &self.messages
    }

    /// The rows of each segment (one chunk's), as ranges of row numbers.
    pub fn segments(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        self.segments
            .iter()
            .map(|(start, batch, _)| *start..start + batch.num_rows())
    }

    /// Bytes the Arrow arrays of each row of the segment `segment` (from
    /// [`ColumnRows::segments`]) hold, on average: the bytes the rows take,
    /// not the room their builders had.
    pub fn row_bytes(&self, segment: &Range<usize>) -> usize {
        self.segment_of(segment.start).2
    }

    /// Bytes the Arrow arrays of the rows `rows` hold, about (each
    /// segment's rows at its average).
    pub fn bytes(&self, rows: Range<usize>) -> usize {
        self.segments()
            .map(|segment| {
                let (start, end) = (segment.start.max(rows.start), segment.end.min(rows.end));
                end.saturating_sub(start) * self.row_bytes(&segment)
            })
            .sum()
    }

    /// The rows `rows` as one record batch: a slice of one segment's batch
    /// without copying, or the slices of several joined.
    pub fn record(&self, rows: Range<usize>) -> Result<RecordBatch, String> {
        let mut slices = Vec::new();
        let mut at = rows.start;
        while at < rows.end {
            let (start, batch, _) = self.segment_of(at);
            let end = rows.end.min(start + batch.num_rows());
            slices.push(batch.slice(at - start, end - at));
            at = end;
        }
        match slices.as_slice() {
            [one] => Ok(one.clone()),
            _ => {
                let schema = self
                    .segments
                    .first()
                    .map(|(_, b, _)| b.schema())
                    .ok_or("there are no rows")?;
                arrow::compute::concat_batches(&schema, &slices).map_err(|e| e.to_string())
            }
        }
    }

    fn segment_of(&self, row: usize) -> &(usize, RecordBatch, usize) {
        let i = self.segments.partition_point(|(start, _, _)| *start <= row);
        &self.segments[i.max(1) - 1]
    }

    /// Counts the rows' messages from `base` (which every one is at or past).
    pub(super) fn count_messages_from(&mut self, base: u32) {
        for m in &mut self.messages {
            *m -= base;
        }
    }

    /// Appends `other`'s rows, shifting their message indexes by `message_offset`.
    pub fn append(&mut self, other: ColumnRows, message_offset: u32) {
        let base = self.messages.len();
        self.segments.extend(
            other
                .segments
                .into_iter()
                .filter(|(_, b, _)| b.num_rows() > 0)
                .map(|(start, batch, bytes)| (start + base, batch, bytes)),
        );
        self.messages
            .extend(other.messages.into_iter().map(|m| m + message_offset));
    }
}

/// What a batch became on the lean path: one outcome per message, and the rows.
#[derive(Debug, Clone, Default)]
pub struct ColumnOutput {
    /// One per input message, in order.
    pub outcomes: Vec<MessageOutcome>,
    /// The rows of the messages whose outcome is [`MessageOutcome::Rows`],
    /// for the sink's table.
    pub rows: ColumnRows,
    /// The rows for the tables a transform routed to: entry `i` holds those
    /// for table `i + 1` of its output (see [`crate::rows::RowBatch::tables`]).
    pub(crate) routed: Vec<ColumnRows>,
    /// Messages whose rows a transform made but that did not fit the table
    /// (dead-lettered as `schema`, not as the stage's kind).
    pub(crate) misfits: Vec<u32>,
}

impl ColumnOutput {
    /// Appends the output of the next messages of the same batch.
    pub fn append(&mut self, other: ColumnOutput) {
        let offset = self.outcomes.len() as u32;
        self.outcomes.extend(other.outcomes);
        self.rows.append(other.rows, offset);
        if self.routed.len() < other.routed.len() {
            self.routed.resize_with(other.routed.len(), ColumnRows::default);
        }
        for (rows, more) in self.routed.iter_mut().zip(other.routed) {
            rows.append(more, offset);
        }
        self.misfits.extend(other.misfits.into_iter().map(|m| m + offset));
    }

    /// The output with the rows of its routed table `i + 1` moved to
    /// table `indexes[i]` (of a batch that names more tables); the tables
    /// it has no rows for are left empty.
    pub(crate) fn routed_to(mut self, indexes: &[u16]) -> Self {
        let identity = indexes.iter().enumerate().all(|(i, &t)| t as usize == i + 1);
        if identity {
            return self;
        }
        let count = indexes.iter().copied().max().unwrap_or(0) as usize;
        let mut placed: Vec<ColumnRows> = std::iter::repeat_with(ColumnRows::default).take(count).collect();
        for (rows, &index) in std::mem::take(&mut self.routed).into_iter().zip(indexes) {
            placed[index as usize - 1] = rows;
        }
        self.routed = placed;
        self
    }

    /// The rows for table `table` of the output (0: the sink's own).
    pub(crate) fn table_rows(&self, table: u16) -> Option<&ColumnRows> {
        match table {
            0 => Some(&self.rows),
            t => self.routed.get(t as usize - 1),
        }
    }
}

/// Builds [`ColumnRows`] one row at a time: a [`RowSink`] for the JSON
/// mapping. A cell its column cannot take (rare: the mapping makes cells
/// for their columns) spoils the row, which is left out at the end and
/// reported by [`ColumnsBuilder::take_refusal`].
pub(crate) struct ColumnsBuilder<'b> {
    batch: &'b MessageBatch,
    schema: &'b TableSchema,
    arrow_schema: SchemaRef,
    builders: Vec<ColumnBuilder>,
    /// Per column, the metadata it is filled with (empty: none are).
    metadata: Vec<Option<MetadataColumn>>,
    /// The message whose row is made next.
    message: u32,
    /// The next column of the current row.
    column: usize,
    refusal: Option<String>,
    spoiled: Vec<usize>,
    messages: Vec<u32>,
}

impl<'b> ColumnsBuilder<'b> {
    /// A builder for rows of `schema` (`arrow_schema` its Arrow form) made
    /// from `batch`'s messages, with room for `rows` rows; with
    /// `include_metadata`, metadata columns are filled from the message.
    pub(crate) fn new(
        batch: &'b MessageBatch,
        rows: usize,
        schema: &'b TableSchema,
        arrow_schema: SchemaRef,
        include_metadata: bool,
    ) -> Result<Self, String> {
        let n = rows;
        // Room for 16 bytes a string: reserving a batch's payload bytes in
        // every string column instead was slower in the consume bench (the
        // system allocator maps and faults in fresh pages for each batch's
        // reservations).
        let bytes = n * 16;
        let builders = arrow_schema
            .fields()
            .iter()
            .zip(&schema.columns)
            .map(|(field, column)| ColumnBuilder::new(field.data_type(), &column.data_type, n, bytes))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            batch,
            schema,
            arrow_schema,
            builders,
            metadata: MetadataColumn::columns_of(schema, include_metadata),
            message: 0,
            column: 0,
            refusal: None,
            spoiled: Vec::new(),
            messages: Vec::with_capacity(n),
        })
    }

    /// The next row (if any) is message `index`'s.
    pub(crate) fn for_message(&mut self, index: u32) {
        self.message = index;
    }

    /// Why the last row was left out, if it was.
    pub(crate) fn take_refusal(&mut self) -> Option<String> {
        self.refusal.take()
    }

    /// Leaves the current row out for `reason` (unless it already is).
    pub(super) fn refuse(&mut self, reason: String) {
        self.refusal.get_or_insert(reason);
    }

    /// Rows made so far, spoiled ones included.
    pub(super) fn row_count(&self) -> usize {
        self.messages.len()
    }

    /// Leaves every row from the `start`th on out.
    pub(super) fn spoil_rows_since(&mut self, start: usize) {
        self.spoiled.extend(start..self.messages.len());
    }

    /// Whether the next cell's column is filled from the message
    /// (a metadata column), whatever the cell holds.
    pub(super) fn fills_metadata(&self) -> bool {
        self.metadata.get(self.column).copied().flatten().is_some()
    }

    /// The rows made, without the spoiled ones.
    pub(crate) fn finish(self) -> Result<ColumnRows, String> {
        let mut columns = self
            .builders
            .into_iter()
            .map(ColumnBuilder::finish)
            .collect::<Result<Vec<ArrayRef>, _>>()?;
        let mut messages = self.messages;
        if !self.spoiled.is_empty() {
            let mut keep = vec![true; messages.len()];
            for &row in &self.spoiled {
                keep[row] = false;
            }
            let mask = BooleanArray::from(keep.clone());
            columns = columns
                .iter()
                .map(|c| arrow::compute::filter(c, &mask).map_err(|e| e.to_string()))
                .collect::<Result<_, _>>()?;
            let mut keep = keep.into_iter();
            messages.retain(|_| keep.next().unwrap_or(false));
        }
        let batch = RecordBatch::try_new(self.arrow_schema, columns).map_err(|e| e.to_string())?;
        let bytes: usize = batch
            .columns()
            .iter()
            .map(|c| {
                c.to_data()
                    .get_slice_memory_size()
                    .unwrap_or(c.get_array_memory_size())
            })
            .sum();
        let row_bytes = bytes / batch.num_rows().max(1);
        Ok(ColumnRows {
            segments: vec![(0, batch, row_bytes)],
            messages,
        })
    }
}

impl RowSink for ColumnsBuilder<'_> {
    fn begin_row(&mut self, _kind: RowKind, _table: u16) {
        self.column = 0;
    }

    #[inline]
    fn cell(&mut self, cell: Cell<'_>) {
        let i = self.column;
        self.column += 1;
        let Some(builder) = self.builders.get_mut(i) else {
            self.refusal
                .get_or_insert_with(|| "the row has more cells than the table has columns".into());
            return;
        };
        let pushed = match self.metadata.get(i).copied().flatten() {
            Some(metadata) => metadata.with_cell(self.batch, self.message as usize, |c| builder.push(c)),
            None => builder.push(cell),
        };
        if let Err(reason) = pushed {
            // Keep the columns in step: the row is dropped at the end.
            builder.push(Cell::Null).expect("every column builder takes NULL");
            self.refusal
                .get_or_insert_with(|| format!("column `{}`: {reason}", self.schema.columns[i].name));
        }
    }

    fn end_row(&mut self) {
        if self.schema.takes_cell_count(self.column) {
            // A row made before the table's last columns were added: they
            // get NULL (or, for metadata columns, the message's values).
            while self.column < self.builders.len() {
                self.cell(Cell::Null);
            }
        }
        for builder in self.builders.iter_mut().skip(self.column) {
            builder.push(Cell::Null).expect("every column builder takes NULL");
        }
        if self.column < self.builders.len() {
            self.refusal.get_or_insert_with(|| {
                format!(
                    "the row has {} cells but the table has {} columns",
                    self.column,
                    self.builders.len()
                )
            });
        }
        if self.refusal.is_some() {
            self.spoiled.push(self.messages.len());
        }
        self.messages.push(self.message);
    }
}

#[cfg(test)]
mod tests {
    use fluss_row_codec::RowKind;

    use super::*;
    use crate::batch::Source;
    use crate::rows::json::{ColumnMapping, JsonMapping};
    use crate::schema::{Column, DataType, TablePath};
    use crate::writer::{arrow_schema_of, to_record_batch};

    fn table(columns: &[(&str, &str, bool)]) -> TableSchema {
        TableSchema {
            path: TablePath::new("db", "t"),
            columns: columns
                .iter()
                .map(|(n, t, null)| Column::new(*n, t.parse::<DataType>().unwrap(), *null))
                .collect(),
            primary_key: vec![],
            partition_keys: vec![],
            added_columns: 0,
        }
    }

    fn batch(payloads: &[&str]) -> MessageBatch {
        let mut batch = MessageBatch::new(Source {
            stream: "s".into(),
            topic: "t".into(),
            partition: 3,
        });
        for (i, p) in payloads.iter().enumerate() {
            batch
                .push(100 + i as u64, 7 + i as u128, 1_000 + i as u64, p.as_bytes(), [])
                .unwrap();
        }
        batch
    }

    fn lean(schema: &TableSchema, metadata: bool) -> ColumnMapping {
        let mapping = JsonMapping::new(schema, RowKind::Append).with_metadata(metadata);
        ColumnMapping::new(
            mapping,
            schema.clone(),
            arrow_schema_of(schema).unwrap(),
            metadata,
        )
    }

    #[test]
    fn one_pass_makes_the_batch_the_encoded_rows_make_for_every_type() {
        let schema = table(&[
            ("b", "BOOLEAN", true),
            ("i8", "TINYINT", true),
            ("i16", "SMALLINT", true),
            ("i32", "INT", false),
            ("i64", "BIGINT", true),
            ("f", "FLOAT", true),
            ("d", "DOUBLE", true),
            ("s", "STRING", true),
            ("c", "CHAR(3)", true),
            ("by", "BYTES", true),
            ("bin", "BINARY(2)", true),
            ("dec", "DECIMAL(10, 2)", true),
            ("day", "DATE", true),
            ("tm", "TIME(3)", true),
            ("ts0", "TIMESTAMP(0)", true),
            ("ts3", "TIMESTAMP(3)", true),
            ("ts6", "TIMESTAMP(6)", true),
            ("ts9", "TIMESTAMP(9)", true),
            ("ltz", "TIMESTAMP_LTZ(6)", true),
        ]);
        let payloads = [
            r#"{"b":true,"i8":-3,"i16":300,"i32":7,"i64":"9000000000","f":1.5,"d":-2.25,"s":"héllo","c":"abc",
               "by":"AAEC","bin":"AAE=","dec":"12.345","day":"2026-12-01","tm":"12:30:00.250",
               "ts0":"2026-12-01T10:00:01","ts3":1700000000123,"ts6":"2026-12-01 10:00:00.123456",
               "ts9":"2026-12-01T10:00:00.5","ltz":"2026-12-01T10:00:00+02:00"}"#,
            r#"{"i32":1}"#,
            r#"{"i32":2,"s":42,"b":"false","dec":7}"#,
        ];
        let batch = batch(&payloads);
        let arrow_schema = arrow_schema_of(&schema).unwrap();
        let encoded = JsonMapping::new(&schema, RowKind::Append).map_batch(&batch);
        assert_eq!(encoded.counts(), (3, 0, 0));
        let expected = to_record_batch(&encoded, &schema, &arrow_schema).unwrap();
        let out = lean(&schema, false).map_batch(&batch);
        assert!(out.outcomes.iter().all(|o| *o == MessageOutcome::Rows(1)));
        assert_eq!(out.rows.messages(), &[0, 1, 2]);
        assert_eq!(out.rows.record(0..3).unwrap(), expected);
    }

    #[test]
    fn refusals_dead_letter_their_message_and_leave_no_row() {
        let schema = table(&[("id", "BIGINT", false), ("amount", "DECIMAL(4, 2)", true)]);
        let batch = batch(&[
            r#"{"id":1,"amount":"1.5"}"#,
            r#"{"amount":"1.5"}"#,
            // Rounds past DECIMAL(4, 2): the mapping refuses it, as on
            // every path that maps JSON.
            r#"{"id":3,"amount":"99.996"}"#,
            "not json",
            r#"{"id":5}"#,
        ]);
        let out = lean(&schema, false).map_batch(&batch);
        let reason = |i: usize| match &out.outcomes[i] {
            MessageOutcome::DeadLetter(r) => r.clone(),
            other => panic!("message {i}: {other:?}"),
        };
        assert_eq!(out.outcomes[0], MessageOutcome::Rows(1));
        assert_eq!(
            reason(1),
            "column `id` is NOT NULL but the payload has no value for it"
        );
        assert_eq!(
            reason(2),
            "column `amount` (DECIMAL(4, 2)): 99.996 does not fit DECIMAL(4, 2)"
        );
        assert!(
            reason(3).starts_with("payload is not valid JSON"),
            "{}",
            reason(3)
        );
        assert_eq!(out.outcomes[4], MessageOutcome::Rows(1));
        assert_eq!(out.rows.messages(), &[0, 4]);
        let ids = out.rows.record(0..2).unwrap();
        let ids = ids
            .column(0)
            .as_any()
            .downcast_ref::<arrow::array::Int64Array>()
            .unwrap();
        assert_eq!(ids.values(), &[1, 5]);
    }

    #[test]
    fn metadata_columns_are_filled_from_the_message() {
        let schema = table(&[
            ("v", "INT", true),
            ("iggy_stream", "STRING", false),
            ("iggy_partition", "INT", false),
            ("iggy_offset", "BIGINT", false),
            ("iggy_timestamp", "TIMESTAMP_LTZ(6)", false),
            ("iggy_message_id", "STRING", false),
        ]);
        let batch = batch(&[r#"{"v":1,"iggy_offset":999}"#, r#"{"v":2}"#]);
        let out = lean(&schema, true).map_batch(&batch);
        let mut encoded = JsonMapping::new(&schema, RowKind::Append)
            .with_metadata(true)
            .map_batch(&batch);
        crate::rows::metadata::fill(&mut encoded, &batch, |_| Some(&schema));
        let arrow_schema = arrow_schema_of(&schema).unwrap();
        let record = out.rows.record(0..2).unwrap();
        assert_eq!(record, to_record_batch(&encoded, &schema, &arrow_schema).unwrap());
        let offsets = record
            .column(3)
            .as_any()
            .downcast_ref::<arrow::array::Int64Array>()
            .unwrap();
        assert_eq!(
            offsets.values(),
            &[100, 101],
            "the message's offset, not the payload's"
        );
    }

    #[test]
    fn chunks_append_as_segments_and_a_record_may_join_them() {
        let schema = table(&[("id", "BIGINT", false)]);
        let mapping = lean(&schema, false);
        let mut out = mapping.map_batch(&batch(&[r#"{"id":1}"#, r#"{"id":2}"#]));
        out.append(mapping.map_batch(&batch(&["{}", r#"{"id":3}"#, r#"{"id":4}"#])));
        assert_eq!(out.outcomes.len(), 5);
        assert_eq!(out.rows.messages(), &[0, 1, 3, 4]);
        assert_eq!(out.rows.segments().collect::<Vec<_>>(), vec![0..2, 2..4]);
        let tail = out.rows.record(2..4).unwrap();
        let ids = tail
            .column(0)
            .as_any()
            .downcast_ref::<arrow::array::Int64Array>()
            .unwrap();
        assert_eq!(ids.values(), &[3, 4]);
        let joined = out.rows.record(1..3).unwrap();
        let ids = joined
            .column(0)
            .as_any()
            .downcast_ref::<arrow::array::Int64Array>()
            .unwrap();
        assert_eq!(ids.values(), &[2, 3], "a slice of each segment, joined");
    }

    #[test]
    fn the_bytes_of_rows_are_what_they_take_not_their_builders_room() {
        let schema = table(&[("id", "BIGINT", false), ("name", "STRING", true)]);
        let mapping = lean(&schema, false);
        let short: Vec<String> = (0..100).map(|i| format!(r#"{{"id":{i},"name":"a"}}"#)).collect();
        let long: Vec<String> = (0..100)
            .map(|i| format!(r#"{{"id":{i},"name":"{}"}}"#, "b".repeat(1000)))
            .collect();
        let (short, long): (Vec<&str>, Vec<&str>) = (
            short.iter().map(String::as_str).collect(),
            long.iter().map(String::as_str).collect(),
        );
        let mut out = mapping.map_batch(&batch(&short));
        out.append(mapping.map_batch(&batch(&long)));
        let (short_row, long_row) = (out.rows.bytes(0..1), out.rows.bytes(100..101));
        // An id (8 B), an offset (4 B) and the name's bytes, give or take
        // the validity bits: not the 16 B a string the builders reserve.
        assert!((12..=14).contains(&short_row), "{short_row}");
        assert!((1012..=1014).contains(&long_row), "{long_row}");
        assert_eq!(out.rows.bytes(0..200), 100 * (short_row + long_row));
        assert_eq!(
            out.rows.bytes(50..150),
            50 * (short_row + long_row),
            "a part of each segment"
        );
        assert_eq!(out.rows.bytes(7..7), 0);
    }
}
