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
    pub fn fits(&self, column: &Column) -> Result<(), String> {
        use DataType as T;
        let ok = match (self, column.data_type) {
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
        };
        if ok {
            Ok(())
        } else if matches!(self, Self::Null) {
            Err(format!(
                "column `{}` is NOT NULL but the row has NULL",
                column.name
            ))
        } else {
            Err(format!(
                "column `{}` is {} but the row has a {} value",
                column.name,
                column.data_type,
                self.type_name()
            ))
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
    pub fn cells(&self) -> impl Iterator<Item = Cell<'a>> + 'a {
        let mut reader = Reader {
            buf: self.cell_bytes,
            pos: 0,
            base: self.offset + 5,
        };
        (0..self.cell_count).map(move |_| reader.cell().expect("row was validated when read"))
    }

    /// The encoded row, header included.
    pub fn encoded_len(&self) -> usize {
        5 + self.cell_bytes.len()
    }
}

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
        if self.reader.pos >= self.reader.buf.len() {
            return None;
        }
        let result = self.reader.row();
        if result.is_err() {
            self.reader.pos = self.reader.buf.len();
        }
        Some(result)
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
            None => Err(self.error(format!(
                "needs {n} more bytes, {} left",
                self.buf.len() - self.pos
            ))),
        }
    }

    #[inline]
    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        Ok(self.take(N)?.try_into().expect("took N bytes"))
    }

    fn row(&mut self) -> Result<RowView<'a>, DecodeError> {
        let offset = self.base + self.pos;
        let [kind, t0, t1, c0, c1] = self.array::<5>()?;
        let kind = RowKind::from_byte(kind).ok_or_else(|| DecodeError {
            offset,
            reason: format!("unknown row kind {kind}"),
        })?;
        let cell_count = u16::from_le_bytes([c0, c1]);
        let start = self.pos;
        for _ in 0..cell_count {
            self.cell()?;
        }
        Ok(RowView {
            kind,
            table: u16::from_le_bytes([t0, t1]),
            cell_count,
            cell_bytes: &self.buf[start..self.pos],
            offset,
        })
    }

    #[inline]
    fn cell(&mut self) -> Result<Cell<'a>, DecodeError> {
        let [t] = self.array::<1>()?;
        Ok(match t {
            tag::NULL => Cell::Null,
            tag::BOOLEAN => match self.array::<1>()? {
                [0] => Cell::Boolean(false),
                [1] => Cell::Boolean(true),
                [b] => return Err(self.error(format!("boolean byte {b} is neither 0 nor 1"))),
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
            other => {
                self.pos -= 1;
                return Err(self.error(format!("unknown cell tag {other}")));
            }
        })
    }

    fn text(&mut self) -> Result<&'a str, DecodeError> {
        let len = u32::from_le_bytes(self.array()?) as usize;
        let at = self.pos;
        let bytes = self.take(len)?;
        if bytes.len() <= SHORT_TEXT && bytes.is_ascii() {
            // SAFETY: every ASCII byte sequence is valid UTF-8.
            return Ok(unsafe { std::str::from_utf8_unchecked(bytes) });
        }
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
mod tests {
    use super::*;
    use crate::RowsBuilder;

    #[test]
    fn every_cell_round_trips() {
        let mut b = RowsBuilder::new();
        b.begin_row(RowKind::Upsert, 2);
        b.null();
        b.boolean(true);
        b.tinyint(-3);
        b.smallint(-300);
        b.int(70_000);
        b.bigint(-1 << 40);
        b.float(1.5);
        b.double(-2.25);
        b.string("héllo");
        b.bytes(&[0, 255]);
        b.decimal("-12.30");
        b.date(19_000);
        b.time(3_600_000);
        b.timestamp(1_700_000_000_000_000);
        b.timestamp_ltz(-5);
        b.absent();
        b.end_row();
        b.begin_row(RowKind::Delete, 0);
        b.end_row();
        let bytes = b.into_bytes();
        let rows: Vec<_> = Rows::new(&bytes).collect::<Result<_, _>>().unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].kind, RowKind::Upsert);
        assert_eq!(rows[0].table, 2);
        let cells: Vec<_> = rows[0].cells().collect();
        assert_eq!(
            cells,
            vec![
                Cell::Null,
                Cell::Boolean(true),
                Cell::TinyInt(-3),
                Cell::SmallInt(-300),
                Cell::Int(70_000),
                Cell::BigInt(-1 << 40),
                Cell::Float(1.5),
                Cell::Double(-2.25),
                Cell::String("héllo"),
                Cell::Bytes(&[0, 255]),
                Cell::Decimal("-12.30"),
                Cell::Date(19_000),
                Cell::Time(3_600_000),
                Cell::Timestamp(1_700_000_000_000_000),
                Cell::TimestampLtz(-5),
                Cell::Absent,
            ]
        );
        assert_eq!(rows[1].kind, RowKind::Delete);
        assert_eq!(rows[1].cell_count, 0);
    }

    #[test]
    fn abandoned_and_rolled_back_rows_leave_nothing() {
        let mut b = RowsBuilder::new();
        b.begin_row(RowKind::Append, 0);
        b.int(1);
        b.end_row();
        let mark = b.mark();
        b.begin_row(RowKind::Append, 0);
        b.int(2);
        b.end_row();
        b.begin_row(RowKind::Append, 0);
        b.int(3);
        b.rollback(mark);
        assert_eq!(b.row_count(), 1);
        let bytes = b.into_bytes();
        assert_eq!(Rows::new(&bytes).count(), 1);
    }

    #[test]
    fn truncated_and_garbage_buffers_are_errors() {
        let mut b = RowsBuilder::new();
        b.begin_row(RowKind::Append, 0);
        b.string("abc");
        b.end_row();
        let bytes = b.into_bytes();
        for cut in 1..bytes.len() {
            let r: Result<Vec<_>, _> = Rows::new(&bytes[..cut]).collect();
            assert!(r.is_err(), "cut at {cut} should fail");
        }
        let err = Rows::new(&[9, 0, 0, 0, 0]).next().unwrap().unwrap_err();
        assert!(err.reason.contains("row kind 9"), "{err}");
        let err = Rows::new(&[0, 0, 0, 1, 0, 99]).next().unwrap().unwrap_err();
        assert_eq!(err.offset, 5);
        assert!(err.reason.contains("cell tag 99"));
        let err = Rows::new(&[0, 0, 0, 1, 0, 8, 1, 0, 0, 0, 0xff])
            .next()
            .unwrap()
            .unwrap_err();
        assert!(err.reason.contains("UTF-8"), "{err}");
    }

    /// One STRING cell of `text`'s bytes, encoded by hand (the builder
    /// takes only `&str`).
    fn string_row(text: &[u8]) -> Vec<u8> {
        let mut bytes = vec![0, 0, 0, 1, 0, tag::STRING];
        bytes.extend_from_slice(&(text.len() as u32).to_le_bytes());
        bytes.extend_from_slice(text);
        bytes
    }

    #[test]
    fn text_is_checked_as_utf8_at_every_length() {
        for len in [1, 7, 8, 63, 64, 65, 200] {
            for (text, valid) in [
                ("a".repeat(len).into_bytes(), true),
                (format!("{}é", "a".repeat(len)).into_bytes(), true),
                // A lone continuation byte, first, in the middle, last.
                ([&[0x80][..], &b"a".repeat(len)].concat(), false),
                (
                    [&b"a".repeat(len / 2)[..], &[0xC3][..], &b"a".repeat(len / 2)].concat(),
                    false,
                ),
                ([&b"a".repeat(len)[..], &[0xff][..]].concat(), false),
            ] {
                let bytes = string_row(&text);
                let row = Rows::new(&bytes).next().unwrap();
                match row {
                    Ok(row) if valid => {
                        let [Cell::String(s)] = row.cells().collect::<Vec<_>>()[..] else {
                            panic!("one string cell")
                        };
                        assert_eq!(s.as_bytes(), &text[..]);
                    }
                    Err(err) if !valid => {
                        assert_eq!(err.offset, 10, "{err}");
                        assert!(err.reason.starts_with("text is not UTF-8"), "{err}");
                    }
                    other => panic!("{len} bytes, valid {valid}: {other:?}"),
                }
            }
        }
    }

    #[test]
    fn fits_allows_widening_only() {
        let col = |t: DataType, nullable| Column::new("c", t, nullable);
        assert!(Cell::Int(1).fits(&col(DataType::BigInt, false)).is_ok());
        assert!(Cell::BigInt(1).fits(&col(DataType::Int, false)).is_err());
        assert!(Cell::Float(1.0).fits(&col(DataType::Double, false)).is_ok());
        assert!(Cell::Null.fits(&col(DataType::Int, true)).is_ok());
        let err = Cell::Null.fits(&col(DataType::Int, false)).unwrap_err();
        assert!(err.contains("NOT NULL"), "{err}");
        let err = Cell::String("x").fits(&col(DataType::Int, true)).unwrap_err();
        assert_eq!(err, "column `c` is INT but the row has a STRING value");
        assert!(Cell::Bytes(&[1, 2]).fits(&col(DataType::Binary(2), true)).is_ok());
        assert!(Cell::Bytes(&[1]).fits(&col(DataType::Binary(2), true)).is_err());
    }
}
