//! Reading rows back from the compact encoding, and checking cells against
//! column types.

use crate::types::{Column, DataType};
use crate::{RowKind, tag};

/// Why an encoded buffer could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed row encoding at byte {offset}: {reason}")]
pub struct DecodeError {
    /// Where in the buffer the problem is.
    pub offset: usize,
    /// What is wrong there.
    pub reason: String,
}

/// One decoded cell, borrowing from the buffer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cell<'a> {
    /// NULL.
    Null,
    /// BOOLEAN.
    Boolean(bool),
    /// TINYINT.
    TinyInt(i8),
    /// SMALLINT.
    SmallInt(i16),
    /// INT.
    Int(i32),
    /// BIGINT.
    BigInt(i64),
    /// FLOAT.
    Float(f32),
    /// DOUBLE.
    Double(f64),
    /// STRING.
    String(&'a str),
    /// BYTES.
    Bytes(&'a [u8]),
    /// DECIMAL as text.
    Decimal(&'a str),
    /// DATE, days since the epoch.
    Date(i32),
    /// TIME, milliseconds of the day.
    Time(i32),
    /// TIMESTAMP, microseconds since the epoch.
    Timestamp(i64),
    /// TIMESTAMP_LTZ, microseconds since the epoch UTC.
    TimestampLtz(i64),
    /// Left out of a partial update: the column keeps its value.
    Absent,
}

impl Cell<'_> {
    /// The name of the cell's type, for messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::Null => "NULL",
            Self::Boolean(_) => "BOOLEAN",
            Self::TinyInt(_) => "TINYINT",
            Self::SmallInt(_) => "SMALLINT",
            Self::Int(_) => "INT",
            Self::BigInt(_) => "BIGINT",
            Self::Float(_) => "FLOAT",
            Self::Double(_) => "DOUBLE",
            Self::String(_) => "STRING",
            Self::Bytes(_) => "BYTES",
            Self::Decimal(_) => "DECIMAL",
            Self::Date(_) => "DATE",
            Self::Time(_) => "TIME",
            Self::Timestamp(_) => "TIMESTAMP",
            Self::TimestampLtz(_) => "TIMESTAMP_LTZ",
            Self::Absent => "ABSENT",
        }
    }

    /// Whether this cell can be written to `column` as it is. Integers fit
    /// wider integer columns and FLOAT fits DOUBLE; everything else must
    /// match its column's type (STRING fits CHAR, BYTES fits BINARY). An
    /// absent cell fits any column here; whether the row may leave the
    /// column out depends on the row and the table.
    #[inline]
    pub fn fits(&self, column: &Column) -> Result<(), String> {
        if self.fits_type(column) {
            Ok(())
        } else {
            Err(self.misfit(column))
        }
    }

    /// Whether the cell may go into `column` (see [`Cell::fits`]).
    #[inline(always)]
    fn fits_type(&self, column: &Column) -> bool {
        use DataType as T;
        match (self, column.data_type) {
            (Self::Null, _) => column.nullable,
            (Self::Absent, _) => true,
            (Self::Boolean(_), T::Boolean) => true,
            (Self::TinyInt(_), t) => t.is_integer(),
            (Self::SmallInt(_), T::SmallInt | T::Int | T::BigInt) => true,
            (Self::Int(_), T::Int | T::BigInt) => true,
            (Self::BigInt(_), T::BigInt) => true,
            (Self::Float(_), T::Float | T::Double) => true,
            (Self::Double(_), T::Double) => true,
            (Self::String(_), T::String | T::Char(_)) => true,
            (Self::Bytes(b), T::Binary(n)) => b.len() == n as usize,
            (Self::Bytes(_), T::Bytes) => true,
            (Self::Decimal(_), T::Decimal(..)) => true,
            (Self::Date(_), T::Date) => true,
            (Self::Time(_), T::Time(_)) => true,
            (Self::Timestamp(_), T::Timestamp(_)) => true,
            (Self::TimestampLtz(_), T::TimestampLtz(_)) => true,
            _ => false,
        }
    }

    /// Why the cell does not fit `column`.
    #[cold]
    #[inline(never)]
    fn misfit(&self, column: &Column) -> String {
        if matches!(self, Self::Null) {
            format!("column `{}` is NOT NULL but the row has NULL", column.name)
        } else {
            format!(
                "column `{}` is {} but the row has a {} value",
                column.name,
                column.data_type,
                self.type_name()
            )
        }
    }
}

/// One encoded row.
#[derive(Debug, Clone, Copy)]
pub struct RowView<'a> {
    /// What to do with the row.
    pub kind: RowKind,
    /// 0 for the default table, else a 1-based index into the output's tables.
    pub table: u16,
    /// How many cells the row has.
    pub cell_count: u16,
    /// The encoded cells.
    pub cell_bytes: &'a [u8],
    /// Where the row starts in the buffer.
    pub offset: usize,
}

impl<'a> RowView<'a> {
    /// The row's cells in order. The row has been fully read already, so
    /// this cannot fail.
    pub fn cells(&self) -> ViewCells<'a> {
        ViewCells {
            reader: Reader {
                buf: self.cell_bytes,
                pos: 0,
                base: self.offset + 5,
            },
            left: self.cell_count,
        }
    }

    /// The encoded row, header included.
    pub fn encoded_len(&self) -> usize {
        5 + self.cell_bytes.len()
    }
}

/// The cells of a row read before (see [`RowView::cells`]). Its own type,
/// not a `map` over a range: zipped with another iterator, a mapped range
/// is read by index through an out-of-line call that returns each cell
/// through memory (perf: half the time of the host's rows-to-Arrow loop).
#[derive(Debug, Clone)]
pub struct ViewCells<'a> {
    reader: Reader<'a>,
    left: u16,
}

impl<'a> Iterator for ViewCells<'a> {
    type Item = Cell<'a>;

    #[inline(always)]
    fn next(&mut self) -> Option<Cell<'a>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        Some(self.reader.cell().expect("row was validated when read"))
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

impl ExactSizeIterator for ViewCells<'_> {}

/// Iterates the rows of a buffer, checking each fully as it goes.
#[derive(Debug, Clone)]
pub struct Rows<'a> {
    reader: Reader<'a>,
}

impl<'a> Rows<'a> {
    /// Rows of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Self {
            reader: Reader { buf, pos: 0, base: 0 },
        }
    }
}

impl<'a> Iterator for Rows<'a> {
    type Item = Result<RowView<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.read_next(Reader::row)
    }
}

/// A row's header, read before its cells (see [`Rows::next_head`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowHead {
    /// What to do with the row.
    pub kind: RowKind,
    /// 0 for the default table, else a 1-based index into the output's tables.
    pub table: u16,
    /// How many cells the row has.
    pub cell_count: u16,
    /// Where the row starts in the buffer.
    pub offset: usize,
}

impl<'a> Rows<'a> {
    /// The next row's header, for a reader that takes each cell as it is
    /// decoded instead of decoding the row twice (once to check it, once to
    /// use it): read its cells with [`Rows::cells`] before the next header.
    /// `None` at the end of the buffer; after an error, the end.
    pub fn next_head(&mut self) -> Option<Result<RowHead, DecodeError>> {
        self.read_next(Reader::head)
    }

    /// `read` from where the last row ended; `None` at the end of the
    /// buffer, and an error ends it.
    fn read_next<T>(
        &mut self,
        read: impl FnOnce(&mut Reader<'a>) -> Result<T, DecodeError>,
    ) -> Option<Result<T, DecodeError>> {
        if self.reader.pos >= self.reader.buf.len() {
            return None;
        }
        let result = read(&mut self.reader);
        if result.is_err() {
            self.reader.pos = self.reader.buf.len();
        }
        Some(result)
    }

    /// The cells of the row whose header `head` was read last, each checked
    /// as it is decoded.
    pub fn cells<'r>(&'r mut self, head: &RowHead) -> RowCells<'r, 'a> {
        RowCells {
            rows: self,
            left: head.cell_count,
            error: None,
        }
    }

    /// Where the next row starts, once the cells of the last are read.
    pub fn position(&self) -> usize {
        self.reader.base + self.reader.pos
    }
}

/// One row's cells as they are decoded (see [`Rows::cells`]): the
/// iteration stops at the first cell that does not decode, and
/// [`RowCells::finish`] says why.
#[derive(Debug)]
pub struct RowCells<'r, 'a> {
    rows: &'r mut Rows<'a>,
    left: u16,
    error: Option<DecodeError>,
}

impl<'a> Iterator for RowCells<'_, 'a> {
    type Item = Cell<'a>;

    #[inline]
    fn next(&mut self) -> Option<Cell<'a>> {
        if self.left == 0 || self.error.is_some() {
            return None;
        }
        self.left -= 1;
        match self.rows.reader.cell() {
            Ok(cell) => Some(cell),
            Err(e) => {
                self.rows.reader.pos = self.rows.reader.buf.len();
                self.error = Some(e);
                None
            }
        }
    }
}

impl RowCells<'_, '_> {
    /// Decodes the cells not taken, so that the next row can be read; the
    /// first cell that did not decode is the error.
    pub fn finish(mut self) -> Result<(), DecodeError> {
        while self.next().is_some() {}
        self.error.map_or(Ok(()), Err)
    }
}

/// Text up to this long is checked for ASCII a word at a time before any
/// UTF-8 check: most cells are short ASCII, and a UTF-8 check of a short
/// text costs a call and its setup (simdutf8 hands short inputs to core's
/// check, ~75 instructions for 5 bytes).
const SHORT_TEXT: usize = 64;

#[derive(Debug, Clone)]
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    base: usize,
}

impl<'a> Reader<'a> {
    fn error(&self, reason: impl Into<String>) -> DecodeError {
        DecodeError {
            offset: self.base + self.pos,
            reason: reason.into(),
        }
    }

    #[inline]
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        match end {
            Some(end) => {
                let bytes = &self.buf[self.pos..end];
                self.pos = end;
                Ok(bytes)
            }
            None => Err(self.short_of(n)),
        }
    }

    /// The error of a cell or row cut short: out of line, so that the
    /// reads that cannot fail stay small enough to inline.
    #[cold]
    #[inline(never)]
    fn short_of(&self, n: usize) -> DecodeError {
        self.error(format!(
            "needs {n} more bytes, {} left",
            self.buf.len() - self.pos
        ))
    }

    #[inline]
    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        Ok(self.take(N)?.try_into().expect("took N bytes"))
    }

    fn head(&mut self) -> Result<RowHead, DecodeError> {
        let offset = self.base + self.pos;
        let [kind, t0, t1, c0, c1] = self.array::<5>()?;
        let kind = RowKind::from_byte(kind).ok_or_else(|| DecodeError {
            offset,
            reason: format!("unknown row kind {kind}"),
        })?;
        Ok(RowHead {
            kind,
            table: u16::from_le_bytes([t0, t1]),
            cell_count: u16::from_le_bytes([c0, c1]),
            offset,
        })
    }

    fn row(&mut self) -> Result<RowView<'a>, DecodeError> {
        let head = self.head()?;
        let start = self.pos;
        for _ in 0..head.cell_count {
            self.cell()?;
        }
        Ok(RowView {
            kind: head.kind,
            table: head.table,
            cell_count: head.cell_count,
            cell_bytes: &self.buf[start..self.pos],
            offset: head.offset,
        })
    }

    /// One cell. Inlined into the loops over a row's cells: returned
    /// through memory, a cell cost its reader a store-forwarding stall
    /// (perf: the hottest instruction of the host's row reading).
    #[inline(always)]
    fn cell(&mut self) -> Result<Cell<'a>, DecodeError> {
        let [t] = self.array::<1>()?;
        Ok(match t {
            tag::NULL => Cell::Null,
            tag::BOOLEAN => match self.array::<1>()? {
                [0] => Cell::Boolean(false),
                [1] => Cell::Boolean(true),
                [b] => return Err(self.not_boolean(b)),
            },
            tag::TINYINT => Cell::TinyInt(i8::from_le_bytes(self.array()?)),
            tag::SMALLINT => Cell::SmallInt(i16::from_le_bytes(self.array()?)),
            tag::INT => Cell::Int(i32::from_le_bytes(self.array()?)),
            tag::BIGINT => Cell::BigInt(i64::from_le_bytes(self.array()?)),
            tag::FLOAT => Cell::Float(f32::from_le_bytes(self.array()?)),
            tag::DOUBLE => Cell::Double(f64::from_le_bytes(self.array()?)),
            tag::STRING => Cell::String(self.text()?),
            tag::BYTES => {
                let len = u32::from_le_bytes(self.array()?) as usize;
                Cell::Bytes(self.take(len)?)
            }
            tag::DECIMAL => Cell::Decimal(self.text()?),
            tag::DATE => Cell::Date(i32::from_le_bytes(self.array()?)),
            tag::TIME => Cell::Time(i32::from_le_bytes(self.array()?)),
            tag::TIMESTAMP => Cell::Timestamp(i64::from_le_bytes(self.array()?)),
            tag::TIMESTAMP_LTZ => Cell::TimestampLtz(i64::from_le_bytes(self.array()?)),
            tag::ABSENT => Cell::Absent,
            other => return Err(self.unknown_tag(other)),
        })
    }

    #[cold]
    #[inline(never)]
    fn not_boolean(&self, byte: u8) -> DecodeError {
        self.error(format!("boolean byte {byte} is neither 0 nor 1"))
    }

    /// The error of an unknown tag, at the tag's own offset.
    #[cold]
    #[inline(never)]
    fn unknown_tag(&mut self, tag: u8) -> DecodeError {
        self.pos -= 1;
        self.error(format!("unknown cell tag {tag}"))
    }

    #[inline(always)]
    fn text(&mut self) -> Result<&'a str, DecodeError> {
        let len = u32::from_le_bytes(self.array()?) as usize;
        let at = self.pos;
        let bytes = self.take(len)?;
        if bytes.len() <= SHORT_TEXT && bytes.is_ascii() {
            // SAFETY: every ASCII byte sequence is valid UTF-8.
            return Ok(unsafe { std::str::from_utf8_unchecked(bytes) });
        }
        self.long_text(bytes, at)
    }

    /// [`Reader::text`] past the short ASCII ones, out of line.
    #[inline(never)]
    fn long_text(&self, bytes: &'a [u8], at: usize) -> Result<&'a str, DecodeError> {
        // Checked with SIMD; core's check only words the refusal.
        simdutf8::basic::from_utf8(bytes).map_err(|_| {
            let reason = match std::str::from_utf8(bytes) {
                Err(e) => format!("text is not UTF-8: {e}"),
                Ok(_) => "text is not UTF-8".to_string(),
            };
            DecodeError {
                offset: self.base + at,
                reason,
            }
        })
    }
}

#[cfg(test)]
mod tests;
