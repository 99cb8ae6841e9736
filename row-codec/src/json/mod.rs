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
//! | STRING, CHAR | strings; numbers and booleans as their JSON text |
//! | BYTES, BINARY(n) | standard base64 strings (BINARY needs exactly n bytes) |
//! | DECIMAL(p, s) | numbers or decimal strings; at most p - s integer digits (use strings for exact values) |
//! | DATE | `"YYYY-MM-DD"`, or an integer count of days since 1970-01-01 |
//! | TIME | `"HH:MM:SS[.fff]"`, or an integer count of milliseconds of the day |
//! | TIMESTAMP | ISO-8601 `"YYYY-MM-DDTHH:MM:SS[.ffffff]"` (a space for `T` is accepted; an offset is converted to UTC and dropped), or integer epoch milliseconds |
//! | TIMESTAMP_LTZ | RFC 3339 with an offset, ISO-8601 without one (read as UTC), or integer epoch milliseconds |
//!
//! `null` and a missing field give NULL, which a NOT NULL column refuses.
//! Under [`JsonMapper::partial_update`] a missing field of a nullable column
//! is absent instead (left out of the update), while `null` stays NULL.
//! Fields without a column are ignored. Objects and arrays convert to nothing.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};

use crate::types::{Column, DataType};
use crate::{Cell, RowKind, RowSink};

mod convert;
mod flat;
mod skip;

use convert::ValueSeed;
use skip::Skip;

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
    columns: Vec<Column>,
    partial: bool,
    parser: JsonParser,
    flat_first: bool,
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
            columns,
            partial: false,
            parser: JsonParser::default(),
            flat_first: true,
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
        &self.columns
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
        let mut inline = [const { None }; INLINE_COLUMNS];
        let mut heap = Vec::new();
        let slots = self.slots(&mut inline, &mut heap);
        self.parse(payload, slots)?;
        // Every refusal comes before the row is begun: a sink is never left
        // with half a row.
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
        inline: &'s mut [Option<Typed<'de>>; INLINE_COLUMNS],
        heap: &'s mut Vec<Option<Typed<'de>>>,
    ) -> &'s mut [Option<Typed<'de>>] {
        let n = self.columns.len();
        if n <= INLINE_COLUMNS {
            &mut inline[..n]
        } else {
            heap.resize_with(n, || None);
            heap
        }
    }

    /// Parses `payload` into `slots`, one per column: a flat object with
    /// plain strings quickly (see [`flat`]), anything else, and every
    /// refusal, with the mapper's parser.
    fn parse<'de>(&self, payload: &'de [u8], slots: &mut [Option<Typed<'de>>]) -> Result<(), MapError> {
        if self.flat_first
            && let Ok(text) = simdutf8::basic::from_utf8(payload)
        {
            if flat::read_flat_object(self, text, slots) {
                return Ok(());
            }
            slots.iter_mut().for_each(|slot| *slot = None);
        }
        self.parse_with(self.parser, payload, slots)
    }

    fn parse_with<'de>(
        &self,
        parser: JsonParser,
        payload: &'de [u8],
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
            JsonParser::SerdeJson => match simdutf8::basic::from_utf8(payload) {
                Ok(text) => serde_json_object(serde_json::Deserializer::from_str(text), visitor),
                Err(_) => serde_json_object(serde_json::Deserializer::from_slice(payload), visitor),
            },
            #[cfg(not(target_arch = "wasm32"))]
            JsonParser::Sonic => {
                // Anything but an object is refused, and serde_json refuses
                // it at its first byte; sonic-rs reads the whole value first,
                // recursively: a payload of 200,000 `[` overflowed the stack
                // (found by fuzzing).
                if !starts_an_object(payload) {
                    return self.parse_with(JsonParser::SerdeJson, payload, slots);
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
                    return self.parse_with(JsonParser::SerdeJson, payload, slots);
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
        if self.columns.get(hint).is_some_and(|c| c.name == key) {
            return Some(hint);
        }
        self.columns.iter().position(|c| c.name == key)
    }
}

/// Reads one JSON object with `de` into `visitor`, then the end of the input.
fn serde_json_object<'de, R: serde_json::de::Read<'de>>(
    mut de: serde_json::Deserializer<R>,
    visitor: ObjectVisitor<'_, 'de>,
) -> Result<(), MapError> {
    match de.deserialize_map(visitor).and_then(|()| de.end()) {
        Ok(()) => Ok(()),
        Err(e) if e.is_data() => Err(MapError::NotAnObject),
        Err(e) => Err(MapError::InvalidJson(e.to_string())),
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

/// The text of one top-level field of a JSON object: a string as it is,
/// a number or boolean as its JSON text, `None` when missing or null. For
/// the same field in many payloads, make a [`JsonField`] once.
pub fn field_text(payload: &[u8], field: &str) -> Result<Option<String>, MapError> {
    JsonField::new(field).text(payload)
}

/// A reader of one top-level field of JSON objects, made once for many
/// payloads (see [`field_text`]).
#[derive(Debug, Clone)]
pub struct JsonField {
    mapper: JsonMapper,
}

impl JsonField {
    /// A reader of field `name`.
    pub fn new(name: &str) -> Self {
        Self {
            mapper: JsonMapper::new(vec![Column::new(name, DataType::String, true)]),
        }
    }

    /// The field's text in `payload`, as [`field_text`] reads it.
    pub fn text(&self, payload: &[u8]) -> Result<Option<String>, MapError> {
        let mut slot = [None];
        self.mapper.parse(payload, &mut slot)?;
        let [slot] = slot;
        Ok(match slot {
            Some(Typed::Text(text)) => Some(text.into_owned()),
            _ => None,
        })
    }
}

struct ObjectVisitor<'a, 'de> {
    mapper: &'a JsonMapper,
    slots: &'a mut [Option<Typed<'de>>],
    failure: &'a mut Option<MapError>,
    /// Set when a mapped value was a floating-point zero (see `parse_with`).
    zero: &'a std::cell::Cell<bool>,
    /// How fields without a column are skipped.
    skip: Skip,
}

impl<'de> Visitor<'de> for ObjectVisitor<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut hint = 0;
        while let Some(found) = map.next_key_seed(KeySeed {
            mapper: self.mapper,
            hint,
        })? {
            match found {
                Some(index) => {
                    let column = &self.mapper.columns[index];
                    match map.next_value_seed(ValueSeed {
                        column,
                        zero: self.zero,
                        skip: self.skip,
                    }) {
                        Ok(Ok(value)) => self.slots[index] = Some(value),
                        Ok(Err(reason)) => {
                            *self.failure = Some(MapError::Convert {
                                column: column.name.clone(),
                                data_type: column.data_type,
                                reason,
                            });
                            return Err(de::Error::custom("conversion failed"));
                        }
                        Err(e) => return Err(e),
                    }
                    hint = index + 1;
                }
                None => {
                    map.next_value_seed(self.skip)?;
                }
            }
        }
        Ok(())
    }
}

struct KeySeed<'a> {
    mapper: &'a JsonMapper,
    hint: usize,
}

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = Option<usize>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = Option<usize>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a field name")
    }
    fn visit_str<E: de::Error>(self, key: &str) -> Result<Self::Value, E> {
        Ok(self.mapper.find(key, self.hint))
    }
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, NaiveDateTime};

    use super::convert::fast_iso_timestamp;
    use super::*;
    use crate::{Rows, RowsBuilder};

    /// A mapper onto eight columns of most types, `id` first (BIGINT NOT NULL).
    pub(super) fn mapper() -> JsonMapper {
        JsonMapper::new(vec![
            Column::new("id", DataType::BigInt, false),
            Column::new("name", DataType::String, true),
            Column::new("amount", DataType::Decimal(10, 2), true),
            Column::new("day", DataType::Date, true),
            Column::new("at", DataType::TimestampLtz(6), true),
            Column::new("blob", DataType::Bytes, true),
            Column::new("ok", DataType::Boolean, true),
            Column::new("ratio", DataType::Float, true),
        ])
    }

    fn cells(payload: &str) -> Result<Vec<String>, MapError> {
        let mut out = RowsBuilder::new();
        mapper().map_into(payload.as_bytes(), RowKind::Append, 0, &mut out)?;
        let bytes = out.into_bytes();
        let row = Rows::new(&bytes).next().unwrap().unwrap();
        Ok(row.cells().map(|c| format!("{c:?}")).collect())
    }

    #[test]
    fn maps_fields_by_name_in_any_order() {
        let got = cells(
            r#"{"at":"2024-01-02T03:04:05.5+01:00","extra":[1,{"x":2}],"name":"a\"b","id":7,
                "amount":"12.30","day":"2024-01-02","blob":"AAE=","ok":true,"ratio":0.5}"#,
        )
        .unwrap();
        assert_eq!(
            got,
            vec![
                "BigInt(7)",
                "String(\"a\\\"b\")",
                "Decimal(\"12.30\")",
                "Date(19724)",
                "TimestampLtz(1704161045500000)",
                "Bytes([0, 1])",
                "Boolean(true)",
                "Float(0.5)",
            ]
        );
    }

    #[test]
    fn under_partial_update_missing_fields_are_absent_and_null_stays_null() {
        let mut out = RowsBuilder::new();
        let partial = mapper().partial_update(true);
        partial
            .map_into(
                br#"{"id": 7, "name": null, "ok": true}"#,
                RowKind::Upsert,
                0,
                &mut out,
            )
            .unwrap();
        let err = partial
            .map_into(br#"{"name": "x"}"#, RowKind::Upsert, 0, &mut out)
            .unwrap_err();
        assert_eq!(err, MapError::MissingValue("id".into()), "keys stay required");
        let bytes = out.into_bytes();
        let row = Rows::new(&bytes).next().unwrap().unwrap();
        let got: Vec<String> = row.cells().map(|c| format!("{c:?}")).collect();
        assert_eq!(
            got,
            [
                "BigInt(7)",
                "Null",
                "Absent",
                "Absent",
                "Absent",
                "Absent",
                "Boolean(true)",
                "Absent"
            ]
        );
    }

    #[test]
    fn missing_nullable_fields_become_null() {
        let got = cells(r#"{"id": "42"}"#).unwrap();
        assert_eq!(got[0], "BigInt(42)");
        assert!(got[1..].iter().all(|c| c == "Null"));
        assert_eq!(format!("{:?}", Cell::Null), "Null");
    }

    #[test]
    fn errors_name_the_column_and_the_value() {
        assert_eq!(
            cells(r#"{"name": "x"}"#).unwrap_err(),
            MapError::MissingValue("id".into())
        );
        assert_eq!(
            cells(r#"{"id": null}"#).unwrap_err(),
            MapError::MissingValue("id".into())
        );
        let err = cells(r#"{"id": "seven"}"#).unwrap_err().to_string();
        assert_eq!(err, "column `id` (BIGINT): \"seven\" is not a BIGINT");
        let err = cells(r#"{"id": 1, "amount": 123456789.5}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("integer digits"), "{err}");
        let err = cells(r#"{"id": 1, "day": {"y": 1}}"#).unwrap_err().to_string();
        assert_eq!(err, "column `day` (DATE): found an object, expected a DATE");
        let err = cells(r#"{"id": 1.5}"#).unwrap_err().to_string();
        assert!(err.contains("found the number 1.5"), "{err}");
        assert_eq!(cells("[1,2]").unwrap_err(), MapError::NotAnObject);
        assert!(matches!(
            cells("{\"id\": 1").unwrap_err(),
            MapError::InvalidJson(_)
        ));
        assert!(matches!(
            cells("{\"id\": 1} x").unwrap_err(),
            MapError::InvalidJson(_)
        ));
    }

    #[test]
    fn field_text_reads_one_field() {
        assert_eq!(
            field_text(br#"{"a":1,"t":"x"}"#, "t").unwrap().as_deref(),
            Some("x")
        );
        assert_eq!(field_text(br#"{"t":12}"#, "t").unwrap().as_deref(), Some("12"));
        assert_eq!(field_text(br#"{"a":1}"#, "t").unwrap(), None);
        assert!(field_text(br#"{"t":{}}"#, "t").is_err());
    }

    #[test]
    fn one_field_reader_reads_each_payload_on_its_own() {
        let tenant = JsonField::new("t");
        let payloads: [&[u8]; 4] = [br#"{"t":"a"}"#, br#"{"x":1}"#, b"not json", br#"{"t":"b","u":2}"#];
        let read: Vec<Result<Option<String>, bool>> = payloads
            .iter()
            .map(|p| tenant.text(p).map_err(|_| true))
            .collect();
        assert_eq!(
            read,
            [Ok(Some("a".into())), Ok(None), Err(true), Ok(Some("b".into()))]
        );
    }

    #[test]
    fn integers_widen_and_range_check() {
        let m = JsonMapper::new(vec![Column::new("t", DataType::TinyInt, false)]);
        let mut out = RowsBuilder::new();
        assert!(m.map_into(br#"{"t": 127}"#, RowKind::Append, 0, &mut out).is_ok());
        let err = m
            .map_into(br#"{"t": 128}"#, RowKind::Append, 0, &mut out)
            .unwrap_err();
        assert_eq!(err.to_string(), "column `t` (TINYINT): 128 is out of range");
        assert_eq!(out.row_count(), 1);
    }

    #[test]
    fn the_fast_timestamp_path_agrees_with_chrono() {
        for text in [
            "2026-11-30T12:34:56",
            "2026-11-30 12:34:56.5",
            "2026-11-30T12:34:56.123456789",
            "2026-11-30T12:34:56.1234567891",
            "2026-11-30T12:34:56Z",
            "2026-11-30T12:34:56.25+05:30",
            "2026-11-30T01:00:00-02:00",
            "2024-02-29T00:00:00",
        ] {
            let fast = fast_iso_timestamp(text.as_bytes()).unwrap_or_else(|| panic!("{text}"));
            let slow = DateTime::parse_from_rfc3339(text)
                .map(|d| d.naive_utc())
                .or_else(|_| NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f"))
                .or_else(|_| NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f"))
                .unwrap();
            assert_eq!(fast, slow, "{text}");
        }
        for bad in [
            "2023-02-29T00:00:00",
            "2026-11-30T25:00:00",
            "2026-11-30T12:34:56.",
            "2026-11-30T12:34:56+0530",
        ] {
            assert_eq!(fast_iso_timestamp(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn timestamps_accept_several_forms() {
        let m = JsonMapper::new(vec![Column::new("ts", DataType::Timestamp(6), false)]);
        for (input, micros) in [
            (r#"{"ts": "1970-01-01T00:00:01"}"#, 1_000_000),
            (r#"{"ts": "1970-01-01 00:00:01.25"}"#, 1_250_000),
            (r#"{"ts": "1970-01-01T00:00:01Z"}"#, 1_000_000),
            (r#"{"ts": 1500}"#, 1_500_000),
        ] {
            let mut out = RowsBuilder::new();
            m.map_into(input.as_bytes(), RowKind::Append, 0, &mut out)
                .unwrap();
            let bytes = out.into_bytes();
            let row = Rows::new(&bytes).next().unwrap().unwrap();
            assert_eq!(row.cells().next().unwrap(), Cell::Timestamp(micros), "{input}");
        }
    }

    /// Payloads that are not UTF-8 are read from bytes by serde_json, as
    /// before the whole-payload check: a bad string is refused in
    /// serde_json's own words, in a mapped field or in one without a column.
    #[test]
    fn payloads_that_are_not_utf8_are_refused_in_serde_jsons_words() {
        let serde = mapper().with_parser(JsonParser::SerdeJson);
        for payload in [
            &b"{\"id\":1,\"name\":\"a\xffb\"}"[..],
            b"{\"id\":1,\"other\":\"a\xffb\"}",
            b"{\"id\":1,\"a\xffb\":2}",
        ] {
            let expected = serde_json::from_slice::<serde_json::Value>(payload).unwrap_err();
            assert!(expected.to_string().contains("invalid unicode"), "{expected}");
            let mut out = RowsBuilder::new();
            assert_eq!(
                serde.map_into(payload, RowKind::Append, 0, &mut out),
                Err(MapError::InvalidJson(expected.to_string()))
            );
        }
    }
}
