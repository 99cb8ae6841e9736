//! The row encoding shared by the sink host and its WebAssembly transforms.
//!
//! A transform returns its rows as one byte buffer instead of a WIT list of
//! variants: lifting a `list<variant>` costs the host a call per cell, while a
//! byte buffer crosses the component boundary as one copy. This crate defines
//! that buffer ([`encode`] writes it, [`decode`] reads it back), the Fluss
//! column types it is checked against ([`types`]), and the JSON-object-to-row
//! mapping ([`json`]) used both natively by the host and inside the
//! `json-to-row` transform, so the two can be benchmarked on the same code
//! (natively it reads payloads with sonic-rs by default; see
//! [`json::JsonParser`]). Mapped rows go to a [`RowSink`]: the encoding, or
//! in the host the Arrow columns of its lean path.
//!
//! # Layout
//!
//! A buffer is a sequence of rows. Every integer is little-endian.
//!
//! ```text
//! row   := kind:u8 table:u16 cell-count:u16 cell*
//! kind  := 0 append | 1 upsert | 2 delete
//! table := 0 the sink's default table | n  the n-th name of the output's table list (1-based)
//! cell  := tag:u8 payload
//! ```
//!
//! | tag | cell | payload |
//! |---|---|---|
//! | 0 | null | none |
//! | 1 | boolean | u8 (0 or 1) |
//! | 2 | tinyint | i8 |
//! | 3 | smallint | i16 |
//! | 4 | int | i32 |
//! | 5 | bigint | i64 |
//! | 6 | float | f32 |
//! | 7 | double | f64 |
//! | 8 | string | u32 length, UTF-8 bytes |
//! | 9 | bytes | u32 length, bytes |
//! | 10 | decimal | u32 length, decimal text such as `-12.30` |
//! | 11 | date | i32 days since 1970-01-01 |
//! | 12 | time | i32 milliseconds of the day |
//! | 13 | timestamp | i64 microseconds since 1970-01-01, no time zone |
//! | 14 | timestamp-ltz | i64 microseconds since 1970-01-01 UTC |
//! | 15 | absent | none: the column is left out of a partial update |
//!
//! An absent cell (since WIT 0.3.0) is not NULL: an upsert with absent cells
//! updates only its present columns of the existing row (Fluss's partial
//! update); key columns must be present, and only upserts on primary-key
//! tables may leave columns out.

pub mod decode;
pub mod encode;
pub mod json;
pub mod types;

pub use decode::{Cell, DecodeError, RowCells, RowHead, RowView, Rows, ViewCells};
pub use encode::{RowSink, RowsBuilder};
pub use types::{Column, DataType, TypeParseError};

/// What Fluss does with a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum RowKind {
    /// Appended to a log table.
    Append = 0,
    /// Inserted or replaced by primary key in a primary-key table.
    Upsert = 1,
    /// Deleted by primary key from a primary-key table.
    Delete = 2,
}

impl RowKind {
    /// The kind for an encoded kind byte, if it is one.
    pub fn from_byte(byte: u8) -> Option<Self> {
        match byte {
            0 => Some(Self::Append),
            1 => Some(Self::Upsert),
            2 => Some(Self::Delete),
            _ => None,
        }
    }

    /// The lower-case name used in configs and messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::Append => "append",
            Self::Upsert => "upsert",
            Self::Delete => "delete",
        }
    }
}

/// Cell tags of the encoding (see the crate docs).
pub mod tag {
    /// SQL NULL.
    pub const NULL: u8 = 0;
    /// BOOLEAN as one byte.
    pub const BOOLEAN: u8 = 1;
    /// TINYINT as i8.
    pub const TINYINT: u8 = 2;
    /// SMALLINT as i16.
    pub const SMALLINT: u8 = 3;
    /// INT as i32.
    pub const INT: u8 = 4;
    /// BIGINT as i64.
    pub const BIGINT: u8 = 5;
    /// FLOAT as f32.
    pub const FLOAT: u8 = 6;
    /// DOUBLE as f64.
    pub const DOUBLE: u8 = 7;
    /// STRING as length-prefixed UTF-8.
    pub const STRING: u8 = 8;
    /// BYTES as length-prefixed bytes.
    pub const BYTES: u8 = 9;
    /// DECIMAL as length-prefixed decimal text.
    pub const DECIMAL: u8 = 10;
    /// DATE as i32 days since the epoch.
    pub const DATE: u8 = 11;
    /// TIME as i32 milliseconds of the day.
    pub const TIME: u8 = 12;
    /// TIMESTAMP as i64 microseconds since the epoch, no zone.
    pub const TIMESTAMP: u8 = 13;
    /// TIMESTAMP_LTZ as i64 microseconds since the epoch, UTC.
    pub const TIMESTAMP_LTZ: u8 = 14;
    /// A column left out of a partial update (not NULL: not written at all).
    pub const ABSENT: u8 = 15;
}

/// The table index that means "the sink's configured table".
pub const DEFAULT_TABLE: u16 = 0;
