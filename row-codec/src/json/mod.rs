//! Mapping a JSON object onto one row by column name, without building a
//! JSON tree: keys are matched to columns as the parser meets them and each
//! value is converted straight to its column's type.
//!
//! # Coercion rules
//!
//! | column type | accepted JSON |
//! |---|---|
//! | BOOLEAN | `true`/`false`, the strings `"true"`/`"false"` |
//! | TINYINT, SMALLINT, INT, BIGINT | integers in range, numbers with no fraction, numeric strings |
//! | FLOAT, DOUBLE | any number, numeric strings |
//! | STRING | strings; numbers and booleans as their JSON text; objects and arrays as their JSON text under [`JsonMapper::nested_as_text`] |
//! | CHAR | strings; numbers and booleans as their JSON text |
//! | BYTES, BINARY(n) | standard base64 strings (BINARY needs exactly n bytes) |
//! | DECIMAL(p, s) | numbers or decimal strings; at most p - s integer digits once rounded to s (use strings for exact values) |
//! | DATE | `"YYYY-MM-DD"`, or an integer count of days since 1970-01-01 |
//! | TIME | `"HH:MM:SS[.fff]"`, or an integer count of milliseconds of the day |
//! | TIMESTAMP | ISO-8601 `"YYYY-MM-DDTHH:MM:SS[.ffffff]"` (a space for `T` is accepted; an offset is converted to UTC and dropped), or integer epoch milliseconds |
//! | TIMESTAMP_LTZ | RFC 3339 with an offset, ISO-8601 without one (read as UTC), or integer epoch milliseconds |
//!
//! `null` and a missing field give NULL, which a NOT NULL column refuses.
//! Under [`JsonMapper::partial_update`] a missing field of a nullable column
//! is absent instead (left out of the update), while `null` stays NULL.
//! Fields without a column are ignored, or, under
//! [`JsonMapper::unknown_fields`] with [`UnknownFields::Refuse`], refuse
//! the payload when their value is not `null` ([`MapError::UnknownField`]).
//! Objects and arrays convert to nothing, or under
//! [`JsonMapper::nested_as_text`] to STRING columns only.

use std::borrow::Cow;
use std::mem::ManuallyDrop;

#[cfg(not(target_arch = "wasm32"))]
use serde::Deserializer as _;

use crate::types::{Column, DataType};
use crate::{Cell, RowKind, RowSink};

mod convert;
mod field;
mod fields;
mod flat;
mod routed;
mod skip;
mod text;
mod unknown;
mod visit;

pub use convert::trim;
pub use field::{JsonField, field_text};
pub use fields::field_types;
pub use routed::Routed;
pub use unknown::{UNKNOWN_FIELD, UnknownFields};

use skip::Skip;
use visit::{ObjectVisitor, serde_json_object};

/// Why a JSON payload did not become a row.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    /// The payload is not valid JSON.
    #[error("payload is not valid JSON: {0}")]
    InvalidJson(String),
    /// The payload is JSON but not an object.
    #[error("payload is JSON but not an object")]
    NotAnObject,
    /// A NOT NULL column has no value.
    #[error("column `{0}` is NOT NULL but the payload has no value for it")]
    MissingValue(String),
    /// A field with a value names no column, and the mapper was told to
    /// refuse such payloads ([`UnknownFields::Refuse`]).
    #[error("{UNKNOWN_FIELD} `{0}`")]
    UnknownField(String),
    /// A value cannot become its column's type.
    #[error("column `{column}` ({data_type}): {reason}")]
    Convert {
        /// The column.
        column: String,
        /// Its type.
        data_type: DataType,
        /// What could not be converted and why.
        reason: String,
    },
}

/// Maps JSON objects onto rows of one column list.
#[derive(Debug, Clone)]
pub struct JsonMapper {
    /// The rows' columns, then the field read besides them, if any.
    columns: Vec<Column>,
    /// How many of `columns` rows have.
    visible: usize,
    /// The column whose value [`JsonMapper::map_routed_into`] hands on.
    field: Option<usize>,
    partial: bool,
    parser: JsonParser,
    flat_first: bool,
    unknown: UnknownFields,
    /// Whether objects and arrays are their JSON text in STRING columns.
    nested_as_text: bool,
    /// Set when a field without a column was met under [`UnknownFields::Note`];
    /// shared by the mapper's clones.
    noted: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// The JSON parser a [`JsonMapper`] reads payloads with. Both give the same
/// rows and the same refusals (tested on the same payloads); only the text
/// of an invalid-JSON error differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JsonParser {
    /// `serde_json`: what WebAssembly guests use.
    #[cfg_attr(target_arch = "wasm32", default)]
    SerdeJson,
    /// `sonic-rs`, which scans with SIMD: the native default (not built for
    /// WebAssembly).
    #[cfg(not(target_arch = "wasm32"))]
    #[default]
    Sonic,
}

/// Tables of up to this many columns map a message without allocating
/// (its parsed values sit on the stack).
const INLINE_COLUMNS: usize = 16;

/// The slots of a message's values on the stack (see [`JsonMapper::slots`]).
#[derive(Default)]
struct Inline<'de> {
    /// Dropped by hand: only the first `used`, as many as the table has
    /// columns. An array of [`INLINE_COLUMNS`] dropped whole checked every
    /// slot, a tenth of `map_into` for a table of six columns (perf); the
    /// slots past `used` are never filled.
    slots: ManuallyDrop<[Option<Typed<'de>>; INLINE_COLUMNS]>,
    used: usize,
}

impl Drop for Inline<'_> {
    fn drop(&mut self) {
        for slot in &mut self.slots[..self.used] {
            *slot = None;
        }
    }
}

/// A value converted for its column. The tag is a word (`repr(u64)`):
/// with a byte, the small payloads sat in the bytes after it, and moving a
/// value into its slot copied them with overlapping narrow stores that
/// the slot's wide loads then stalled on (perf: a fifth of the lean path).
#[repr(u64)]
enum Typed<'de> {
    Null,
    Boolean(bool),
    TinyInt(i8),
    SmallInt(i16),
    Int(i32),
    BigInt(i64),
    Float(f32),
    Double(f64),
    Text(Cow<'de, str>),
    Bytes(Vec<u8>),
    Decimal(Cow<'de, str>),
    Date(i32),
    Time(i32),
    Timestamp(i64),
    TimestampLtz(i64),
}

impl JsonMapper {
    /// A mapper for rows with these columns, in this order.
    pub fn new(columns: Vec<Column>) -> Self {
        Self {
            visible: columns.len(),
            columns,
            field: None,
            partial: false,
            parser: JsonParser::default(),
            flat_first: true,
            unknown: UnknownFields::Ignore,
            nested_as_text: false,
            noted: Default::default(),
        }
    }

    /// With `on`, an object or array is written into a STRING column as its
    /// JSON text (keys in the payload's order) instead of being refused: for
    /// a sink that makes STRING columns of such fields (`evolve_schema`).
    pub fn nested_as_text(mut self, on: bool) -> Self {
        self.nested_as_text = on;
        self
    }

    /// Whether objects and arrays are written into STRING columns as text.
    pub fn is_nested_as_text(&self) -> bool {
        self.nested_as_text
    }

    /// What is done with a field that names no column (see [`UnknownFields`]).
    pub fn unknown_fields(mut self, unknown: UnknownFields) -> Self {
        self.unknown = unknown;
        self
    }

    /// What is done with a field that names no column.
    pub fn unknown_fields_mode(&self) -> UnknownFields {
        self.unknown
    }

    /// Whether a field without a column was met under
    /// [`UnknownFields::Note`] since the last call (by this mapper or a
    /// clone of it).
    pub fn take_unknown_field_noted(&self) -> bool {
        use std::sync::atomic::Ordering;
        self.noted.load(Ordering::Relaxed) && self.noted.swap(false, Ordering::Relaxed)
    }

    /// Notes a field without a column (see [`UnknownFields::Note`]): a
    /// load first, so that mappers on many threads meeting such fields all
    /// the time do not keep taking the flag's cache line from each other.
    #[cold]
    fn note_unknown_field(&self) {
        use std::sync::atomic::Ordering;
        if !self.noted.load(Ordering::Relaxed) {
            self.noted.store(true, Ordering::Relaxed);
        }
    }

    /// With `on`, a field missing from the payload is an absent cell when
    /// its column is nullable (a partial update leaves it as it is); NOT
    /// NULL columns, the keys among them, are always required.
    pub fn partial_update(mut self, on: bool) -> Self {
        self.partial = on;
        self
    }

    /// Reads payloads with `parser` (see [`JsonParser`]).
    pub fn with_parser(mut self, parser: JsonParser) -> Self {
        self.parser = parser;
        self
    }

    /// With `on` (the default), a flat object whose strings have no escapes
    /// is read by a quick reader of its own before the parser is asked; the
    /// parser reads whatever that reader is not sure of, and every refusal
    /// is the parser's. Off, the parser reads every payload: for comparing
    /// the two.
    pub fn flat_first(mut self, on: bool) -> Self {
        self.flat_first = on;
        self
    }

    /// Whether the quick reader of flat objects goes first.
    pub fn is_flat_first(&self) -> bool {
        self.flat_first
    }

    /// The parser payloads are read with.
    pub fn parser(&self) -> JsonParser {
        self.parser
    }

    /// Whether missing fields are absent cells (see [`Self::partial_update`]).
    pub fn is_partial_update(&self) -> bool {
        self.partial
    }

    /// The columns rows are mapped onto.
    pub fn columns(&self) -> &[Column] {
        &self.columns[..self.visible]
    }

    /// Maps `payload` to one row of `kind` for `table` in `out`. On error
    /// nothing is added to `out`.
    pub fn map_into<S: RowSink + ?Sized>(
        &self,
        payload: &[u8],
        kind: RowKind,
        table: u16,
        out: &mut S,
    ) -> Result<(), MapError> {
        let mut inline = Inline::default();
        let mut heap = Vec::new();
        let slots = self.slots(&mut inline, &mut heap);
        self.parse(payload, slots)?;
        self.emit(slots, kind, table, out)
    }

    /// The row of the values in `slots` (one per column), of `kind` for
    /// `table`, added to `out`; a NOT NULL column without a value refuses
    /// it before it is begun, so that a sink is never left with half a row.
    fn emit<S: RowSink + ?Sized>(
        &self,
        slots: &[Option<Typed<'_>>],
        kind: RowKind,
        table: u16,
        out: &mut S,
    ) -> Result<(), MapError> {
        let slots = &slots[..self.visible];
        for (column, slot) in self.columns.iter().zip(slots.iter()) {
            if !column.nullable && matches!(slot, None | Some(Typed::Null)) {
                return Err(MapError::MissingValue(column.name.clone()));
            }
        }
        out.begin_row(kind, table);
        for slot in slots.iter() {
            out.cell(match slot {
                None if self.partial => Cell::Absent,
                None | Some(Typed::Null) => Cell::Null,
                Some(Typed::Boolean(v)) => Cell::Boolean(*v),
                Some(Typed::TinyInt(v)) => Cell::TinyInt(*v),
                Some(Typed::SmallInt(v)) => Cell::SmallInt(*v),
                Some(Typed::Int(v)) => Cell::Int(*v),
                Some(Typed::BigInt(v)) => Cell::BigInt(*v),
                Some(Typed::Float(v)) => Cell::Float(*v),
                Some(Typed::Double(v)) => Cell::Double(*v),
                Some(Typed::Text(v)) => Cell::String(v),
                Some(Typed::Bytes(v)) => Cell::Bytes(v),
                Some(Typed::Decimal(v)) => Cell::Decimal(v),
                Some(Typed::Date(v)) => Cell::Date(*v),
                Some(Typed::Time(v)) => Cell::Time(*v),
                Some(Typed::Timestamp(v)) => Cell::Timestamp(*v),
                Some(Typed::TimestampLtz(v)) => Cell::TimestampLtz(*v),
            });
        }
        out.end_row();
        Ok(())
    }

    /// One empty slot per column: in `inline` for up to [`INLINE_COLUMNS`]
    /// columns (no allocation), else in `heap`.
    fn slots<'s, 'de>(
        &self,
        inline: &'s mut Inline<'de>,
        heap: &'s mut Vec<Option<Typed<'de>>>,
    ) -> &'s mut [Option<Typed<'de>>] {
        let n = self.columns.len();
        if n <= INLINE_COLUMNS {
            inline.used = n;
            &mut inline.slots[..n]
        } else {
            heap.resize_with(n, || None);
            heap
        }
    }

    /// Parses `payload` into `slots`, one per column: a flat object with
    /// plain strings quickly (see [`flat`]), anything else, and every
    /// refusal, with the mapper's parser.
    fn parse<'de>(&self, payload: &'de [u8], slots: &mut [Option<Typed<'de>>]) -> Result<(), MapError> {
        let mut utf8 = Utf8::Unchecked;
        if self.flat_first {
            utf8 = match simdutf8::basic::from_utf8(payload) {
                Ok(text) if flat::read_flat_object(self, text, slots) => return Ok(()),
                Ok(text) => {
                    slots.iter_mut().for_each(|slot| *slot = None);
                    Utf8::Valid(text)
                }
                Err(_) => Utf8::Invalid,
            };
        }
        self.parse_with(self.parser, payload, utf8, slots)
    }

    fn parse_with<'de>(
        &self,
        parser: JsonParser,
        payload: &'de [u8],
        utf8: Utf8<'de>,
        slots: &mut [Option<Typed<'de>>],
    ) -> Result<(), MapError> {
        let mut failure = None;
        let zero = std::cell::Cell::new(false);
        let visitor = ObjectVisitor {
            mapper: self,
            slots,
            failure: &mut failure,
            zero: &zero,
            skip: Skip::for_parser(parser),
        };
        // A conversion failure stops the parser with a custom error; the
        // failure itself says what was wrong.
        let parsed = match parser {
            // serde_json checks the UTF-8 of every string it reads from
            // bytes, a byte at a time in WebAssembly; one SIMD check of the
            // whole payload lets it read the same text as a `str`, unchecked.
            // A payload that is not UTF-8 is read from bytes, so that its
            // refusal is serde_json's own, as before.
            JsonParser::SerdeJson => match utf8.text(payload) {
                Some(text) => serde_json_object(serde_json::Deserializer::from_str(text), visitor),
                None => serde_json_object(serde_json::Deserializer::from_slice(payload), visitor),
            },
            #[cfg(not(target_arch = "wasm32"))]
            JsonParser::Sonic => {
                // Anything but an object is refused, and serde_json refuses
                // it at its first byte; sonic-rs reads the whole value first,
                // recursively: a payload of 200,000 `[` overflowed the stack
                // (found by fuzzing).
                if !starts_an_object(payload) {
                    return self.parse_with(JsonParser::SerdeJson, payload, utf8, slots);
                }
                let mut de = sonic_rs::Deserializer::from_slice(payload);
                let parsed = de.deserialize_map(visitor).and_then(|()| de.end());
                // A payload sonic-rs refuses, or one with a value the mapping
                // refuses, is read again by serde_json, so that refusals (and
                // their text) are the same as everywhere else: sonic-rs may
                // meet a value it can refuse before the invalid JSON serde_json
                // stops at (`"blob":00…`: sonic-rs reads a 0, serde_json an
                // invalid number; found by fuzzing). So is one with a
                // floating-point zero (sonic-rs 0.5 reads `-0.0` as `0.0`):
                // the rare payload pays, not the others.
                if parsed.is_err() || failure.is_some() || zero.get() {
                    slots.iter_mut().for_each(|slot| *slot = None);
                    return self.parse_with(JsonParser::SerdeJson, payload, utf8, slots);
                }
                Ok(())
            }
        };
        match failure {
            Some(err) => Err(err),
            None => parsed,
        }
    }

    #[inline]
    fn find(&self, key: &str, hint: usize) -> Option<usize> {
        let key = key.as_bytes();
        if self
            .columns
            .get(hint)
            .is_some_and(|c| same_bytes(c.name.as_bytes(), key))
        {
            return Some(hint);
        }
        self.columns
            .iter()
            .position(|c| same_bytes(c.name.as_bytes(), key))
    }
}

/// `a == b` a word at a time: field names and table names are short, and
/// `==` calls `memcmp`, which WebAssembly's runtime library compares a byte
/// at a time.
pub fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let word = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().expect("eight bytes"));
    let half = |s: &[u8], at: usize| u32::from_le_bytes(s[at..at + 4].try_into().expect("four bytes"));
    match n {
        0..4 => a.iter().zip(b).all(|(x, y)| x == y),
        // Two words that overlap cover the whole name.
        4..8 => half(a, 0) == half(b, 0) && half(a, n - 4) == half(b, n - 4),
        _ => (0..n / 8).all(|i| word(a, i * 8) == word(b, i * 8)) && word(a, n - 8) == word(b, n - 8),
    }
}

/// What [`JsonMapper::parse`] already knows of a payload's UTF-8, so that
/// a payload the quick reader hands on is not checked again.
#[derive(Debug, Clone, Copy)]
enum Utf8<'de> {
    /// Not checked yet.
    Unchecked,
    /// Checked: the payload as text.
    Valid(&'de str),
    /// Checked: not UTF-8.
    Invalid,
}

impl<'de> Utf8<'de> {
    /// `payload` as text if it is UTF-8, checking it only if not done yet.
    fn text(self, payload: &'de [u8]) -> Option<&'de str> {
        match self {
            Utf8::Unchecked => simdutf8::basic::from_utf8(payload).ok(),
            Utf8::Valid(text) => Some(text),
            Utf8::Invalid => None,
        }
    }
}

/// Whether `payload`'s first byte past JSON whitespace opens an object.
#[cfg(not(target_arch = "wasm32"))]
fn starts_an_object(payload: &[u8]) -> bool {
    payload
        .iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        .is_some_and(|b| *b == b'{')
}

#[cfg(test)]
mod tests;
