//! Writing rows into the compact encoding.

use crate::{Cell, RowKind, tag};

/// Where mapped rows go, one row at a time: the compact encoding
/// ([`RowsBuilder`]) or, in the host, Arrow columns. A row is begun, given
/// one cell per column in table order, and ended; a row once begun is
/// always ended.
pub trait RowSink {
    /// Starts a row of `kind` for table `table` (0 = the default table).
    fn begin_row(&mut self, kind: RowKind, table: u16);
    /// Appends the next column's cell.
    fn cell(&mut self, cell: Cell<'_>);
    /// Finishes the row.
    fn end_row(&mut self);
}

impl RowSink for RowsBuilder {
    fn begin_row(&mut self, kind: RowKind, table: u16) {
        RowsBuilder::begin_row(self, kind, table);
    }
    #[inline]
    fn cell(&mut self, cell: Cell<'_>) {
        RowsBuilder::cell(self, cell);
    }
    fn end_row(&mut self) {
        RowsBuilder::end_row(self);
    }
}

/// Builds a buffer of encoded rows, one row at a time.
///
/// Call [`begin_row`](Self::begin_row), push one cell per column in the
/// table's column order, then [`end_row`](Self::end_row). A row that cannot
/// be finished is dropped with [`abandon_row`](Self::abandon_row).
#[derive(Debug, Default, Clone)]
pub struct RowsBuilder {
    buf: Vec<u8>,
    row_start: Option<usize>,
    cells: u16,
    rows: usize,
}

/// A position in a [`RowsBuilder`] to roll back to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    len: usize,
    rows: usize,
}

impl RowsBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty builder with room for `bytes` bytes.
    pub fn with_capacity(bytes: usize) -> Self {
        Self {
            buf: Vec::with_capacity(bytes),
            ..Self::default()
        }
    }

    /// Starts a row of `kind` for table `table` (0 = the default table).
    /// An unfinished row before it is abandoned.
    pub fn begin_row(&mut self, kind: RowKind, table: u16) {
        self.abandon_row();
        self.row_start = Some(self.buf.len());
        self.cells = 0;
        let [t0, t1] = table.to_le_bytes();
        self.buf.extend_from_slice(&[kind as u8, t0, t1, 0, 0]);
    }

    /// Finishes the current row, writing its cell count.
    pub fn end_row(&mut self) {
        if let Some(start) = self.row_start.take() {
            self.buf[start + 3..start + 5].copy_from_slice(&self.cells.to_le_bytes());
            self.rows += 1;
        }
    }

    /// Drops the row begun last, if it is unfinished.
    pub fn abandon_row(&mut self) {
        if let Some(start) = self.row_start.take() {
            self.buf.truncate(start);
        }
    }

    /// The current position, to [`rollback`](Self::rollback) to later.
    pub fn mark(&self) -> Mark {
        Mark {
            len: self.row_start.unwrap_or(self.buf.len()),
            rows: self.rows,
        }
    }

    /// Drops every row written since `mark`.
    pub fn rollback(&mut self, mark: Mark) {
        self.row_start = None;
        self.buf.truncate(mark.len);
        self.rows = mark.rows;
    }

    /// Finished rows so far.
    pub fn row_count(&self) -> usize {
        self.rows
    }

    /// Rows finished since `mark`.
    pub fn rows_since(&self, mark: Mark) -> usize {
        self.rows - mark.rows
    }

    /// The encoded bytes of the finished rows.
    pub fn as_bytes(&self) -> &[u8] {
        match self.row_start {
            Some(start) => &self.buf[..start],
            None => &self.buf,
        }
    }

    /// The encoded bytes, consuming the builder (an unfinished row is dropped).
    pub fn into_bytes(mut self) -> Vec<u8> {
        self.abandon_row();
        self.buf
    }

    /// Empties the builder, keeping its allocation.
    pub fn clear(&mut self) {
        self.buf.clear();
        self.row_start = None;
        self.rows = 0;
    }

    /// A cell of a tag and `N` bytes, appended at once (one capacity check,
    /// which a guest does not fold away between appends).
    #[inline]
    fn fixed<const N: usize>(&mut self, tag: u8, bytes: [u8; N]) {
        self.cells += 1;
        let mut cell = [0u8; 9];
        cell[0] = tag;
        cell[1..=N].copy_from_slice(&bytes);
        self.buf.extend_from_slice(&cell[..=N]);
    }

    #[inline]
    fn var(&mut self, tag: u8, bytes: &[u8]) {
        self.cells += 1;
        let [l0, l1, l2, l3] = (bytes.len() as u32).to_le_bytes();
        self.buf.reserve(5 + bytes.len());
        self.buf.extend_from_slice(&[tag, l0, l1, l2, l3]);
        self.buf.extend_from_slice(bytes);
    }

    /// Appends a decoded cell as it is (for rewriting rows).
    #[inline]
    pub fn cell(&mut self, cell: Cell<'_>) {
        match cell {
            Cell::Null => self.null(),
            Cell::Boolean(v) => self.boolean(v),
            Cell::TinyInt(v) => self.tinyint(v),
            Cell::SmallInt(v) => self.smallint(v),
            Cell::Int(v) => self.int(v),
            Cell::BigInt(v) => self.bigint(v),
            Cell::Float(v) => self.float(v),
            Cell::Double(v) => self.double(v),
            Cell::String(v) => self.string(v),
            Cell::Bytes(v) => self.bytes(v),
            Cell::Decimal(v) => self.decimal(v),
            Cell::Date(v) => self.date(v),
            Cell::Time(v) => self.time(v),
            Cell::Timestamp(v) => self.timestamp(v),
            Cell::TimestampLtz(v) => self.timestamp_ltz(v),
            Cell::Absent => self.absent(),
        }
    }

    /// Appends an absent cell: the column is left out of a partial update.
    pub fn absent(&mut self) {
        self.fixed(tag::ABSENT, []);
    }

    /// Appends a NULL cell.
    pub fn null(&mut self) {
        self.fixed(tag::NULL, []);
    }
    /// Appends a BOOLEAN cell.
    pub fn boolean(&mut self, v: bool) {
        self.fixed(tag::BOOLEAN, [v as u8]);
    }
    /// Appends a TINYINT cell.
    pub fn tinyint(&mut self, v: i8) {
        self.fixed(tag::TINYINT, v.to_le_bytes());
    }
    /// Appends a SMALLINT cell.
    pub fn smallint(&mut self, v: i16) {
        self.fixed(tag::SMALLINT, v.to_le_bytes());
    }
    /// Appends an INT cell.
    pub fn int(&mut self, v: i32) {
        self.fixed(tag::INT, v.to_le_bytes());
    }
    /// Appends a BIGINT cell.
    pub fn bigint(&mut self, v: i64) {
        self.fixed(tag::BIGINT, v.to_le_bytes());
    }
    /// Appends a FLOAT cell.
    pub fn float(&mut self, v: f32) {
        self.fixed(tag::FLOAT, v.to_le_bytes());
    }
    /// Appends a DOUBLE cell.
    pub fn double(&mut self, v: f64) {
        self.fixed(tag::DOUBLE, v.to_le_bytes());
    }
    /// Appends a STRING cell.
    pub fn string(&mut self, v: &str) {
        self.var(tag::STRING, v.as_bytes());
    }
    /// Appends a BYTES cell.
    pub fn bytes(&mut self, v: &[u8]) {
        self.var(tag::BYTES, v);
    }
    /// Appends a DECIMAL cell from its text, such as `-12.30`.
    pub fn decimal(&mut self, text: &str) {
        self.var(tag::DECIMAL, text.as_bytes());
    }
    /// Appends a DATE cell (days since 1970-01-01).
    pub fn date(&mut self, days: i32) {
        self.fixed(tag::DATE, days.to_le_bytes());
    }
    /// Appends a TIME cell (milliseconds of the day).
    pub fn time(&mut self, millis: i32) {
        self.fixed(tag::TIME, millis.to_le_bytes());
    }
    /// Appends a TIMESTAMP cell (microseconds since the epoch, no zone).
    pub fn timestamp(&mut self, micros: i64) {
        self.fixed(tag::TIMESTAMP, micros.to_le_bytes());
    }
    /// Appends a TIMESTAMP_LTZ cell (microseconds since the epoch, UTC).
    pub fn timestamp_ltz(&mut self, micros: i64) {
        self.fixed(tag::TIMESTAMP_LTZ, micros.to_le_bytes());
    }
}
