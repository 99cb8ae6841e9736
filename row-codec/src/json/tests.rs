//! The JSON mapping's tests.

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
    assert!(err.ends_with("123456789.5 does not fit DECIMAL(10, 2)"), "{err}");
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
fn same_bytes_is_eq_at_every_length_and_every_difference() {
    for n in 0..40 {
        let a: Vec<u8> = (0..n as u8).map(|i| b'a' + i % 26).collect();
        assert!(same_bytes(&a, &a.clone()), "{n}");
        for at in 0..n {
            let mut b = a.clone();
            b[at] ^= 0x20;
            assert!(!same_bytes(&a, &b), "{n} bytes, differing at {at}");
        }
        assert!(
            !same_bytes(&a, &[a.as_slice(), b"x"].concat()),
            "{n} against {}",
            n + 1
        );
    }
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

#[test]
fn the_quick_reader_converts_texts_and_bigints_as_the_parser_does() {
    let columns = || {
        vec![
            Column::new("id", DataType::BigInt, true),
            Column::new("name", DataType::String, true),
            Column::new("code", DataType::Char(3), true),
        ]
    };
    let read = |mapper: &JsonMapper, payload: &str| {
        let mut out = RowsBuilder::new();
        mapper
            .map_into(payload.as_bytes(), RowKind::Append, 0, &mut out)
            .map(|()| {
                let bytes = out.into_bytes();
                let row = Rows::new(&bytes).next().unwrap().unwrap();
                row.cells().map(|c| format!("{c:?}")).collect::<Vec<_>>()
            })
            .map_err(|e| e.to_string())
    };
    let quick = JsonMapper::new(columns());
    let parser = JsonMapper::new(columns()).flat_first(false);
    for payload in [
        r#"{"id":7,"name":"a","code":"xyz"}"#,
        r#"{"id":-7,"name":"","code":"ab"}"#,
        r#"{"name":" padded ","code":" x "}"#,
        r#"{"id":9223372036854775807}"#,
        r#"{"id":-9223372036854775808}"#,
        r#"{"id":9223372036854775808}"#,
        r#"{"id":18446744073709551615}"#,
        r#"{"id":7.0}"#,
        r#"{"id":7.5}"#,
        r#"{"id":1e3}"#,
        r#"{"id":-0}"#,
        r#"{"id":"7"}"#,
        r#"{"id":null,"name":null}"#,
        r#"{"id":true}"#,
        r#"{"name":7,"code":false}"#,
        r#"{"name":"first","name":"second","id":1,"id":2}"#,
        r#"{"name":"a\"b","name":"plain"}"#,
        r#"{"name":"plain","name":"a\"b"}"#,
    ] {
        assert_eq!(read(&quick, payload), read(&parser, payload), "{payload}");
    }
    // The cases above reach the quick reader's own conversions.
    assert_eq!(
        read(&quick, r#"{"id":-7,"name":"a"}"#).unwrap()[..2],
        ["BigInt(-7)", "String(\"a\")"]
    );
}

/// Every way a mapper reads a payload: the quick reader first or not, each parser.
fn every_reader(mapper: JsonMapper) -> Vec<JsonMapper> {
    let mut all = Vec::new();
    for flat_first in [true, false] {
        all.push(
            mapper
                .clone()
                .flat_first(flat_first)
                .with_parser(JsonParser::SerdeJson),
        );
        #[cfg(not(target_arch = "wasm32"))]
        all.push(
            mapper
                .clone()
                .flat_first(flat_first)
                .with_parser(JsonParser::Sonic),
        );
    }
    all
}

#[test]
fn refusing_unknown_fields_names_the_first_one_with_a_value_on_every_reader() {
    let refusing = mapper().unknown_fields(UnknownFields::Refuse);
    for mapper in every_reader(refusing) {
        let map = |payload: &str| {
            let mut out = RowsBuilder::new();
            mapper
                .map_into(payload.as_bytes(), RowKind::Append, 0, &mut out)
                .map(|()| out.into_bytes().len())
        };
        let why = format!("{:?} flat first {}", mapper.parser(), mapper.is_flat_first());
        assert_eq!(
            map(r#"{"id":1,"extra":"x","more":2}"#),
            Err(MapError::UnknownField("extra".into())),
            "{why}"
        );
        assert_eq!(
            map(r#"{"id":1,"nested":{"a":[1,2]}}"#),
            Err(MapError::UnknownField("nested".into())),
            "{why}"
        );
        // A field whose value is null adds nothing: the row is made.
        assert!(map(r#"{"id":1,"later":null,"name":"n"}"#).is_ok(), "{why}");
        assert!(map(r#"{"id":1,"name":"n"}"#).is_ok(), "{why}");
        // Other refusals still come first where the payload says so.
        assert_eq!(map(r#"[1]"#), Err(MapError::NotAnObject), "{why}");
    }
    // Ignored by default, on every reader.
    for mapper in every_reader(mapper()) {
        let mut out = RowsBuilder::new();
        let mapped = mapper.map_into(br#"{"id":1,"extra":"x"}"#, RowKind::Append, 0, &mut out);
        assert_eq!(mapped, Ok(()));
    }
}

#[test]
fn an_unknown_field_refusal_is_recognised_by_its_text() {
    let text = MapError::UnknownField("a `b` c".into()).to_string();
    assert_eq!(MapError::unknown_field_of(&text), Some("a `b` c"));
    let other = MapError::MissingValue("extra".into()).to_string();
    assert_eq!(MapError::unknown_field_of(&other), None);
}

#[test]
fn a_conversion_refusal_is_recognised_by_its_text() {
    let mut out = RowsBuilder::new();
    let mapper = JsonMapper::new(vec![Column::new("id (x)", DataType::BigInt, false)]);
    let refused = mapper
        .map_into(br#"{"id (x)":"two"}"#, RowKind::Append, 0, &mut out)
        .unwrap_err();
    assert!(matches!(refused, MapError::Convert { .. }), "{refused:?}");
    assert!(MapError::is_conversion(&refused.to_string()), "{refused}");
    for other in [
        MapError::MissingValue("id` (BIGINT): x".into()),
        MapError::MissingValue("id".into()),
        MapError::UnknownField("id".into()),
        MapError::NotAnObject,
        MapError::InvalidJson("column `a` (b".into()),
    ] {
        assert!(!MapError::is_conversion(&other.to_string()), "{other}");
    }
}

#[test]
fn objects_and_arrays_are_their_json_text_in_a_string_column_only_when_asked() {
    let mapper = JsonMapper::new(vec![
        Column::new("s", DataType::String, true),
        Column::new("n", DataType::BigInt, true),
    ]);
    for mapper in every_reader(mapper.clone()) {
        let mut out = RowsBuilder::new();
        assert!(
            matches!(
                mapper.map_into(br#"{"s":[1]}"#, RowKind::Append, 0, &mut out),
                Err(MapError::Convert { reason, .. }) if reason == "found an array, expected a STRING"
            ),
            "refused by default"
        );
    }
    for mapper in every_reader(mapper.nested_as_text(true)) {
        let map = |payload: &str| {
            let mut out = RowsBuilder::new();
            mapper.map_into(payload.as_bytes(), RowKind::Append, 0, &mut out)?;
            let bytes = out.into_bytes();
            let row = Rows::new(&bytes).next().unwrap().unwrap();
            Ok::<_, MapError>(row.cells().map(|c| format!("{c:?}")).collect::<Vec<_>>())
        };
        assert_eq!(
            map(r#"{"s":{"b":[1,"x",null],"a":true}}"#).unwrap()[0],
            r#"String("{\"b\":[1,\"x\",null],\"a\":true}")"#
        );
        assert_eq!(
            map(r#"{"s":[{"k":2.5}]}"#).unwrap()[0],
            r#"String("[{\"k\":2.5}]")"#
        );
        assert!(matches!(
            map(r#"{"n":{"a":1}}"#),
            Err(MapError::Convert { reason, .. }) if reason == "found an object, expected a BIGINT"
        ));
    }
}

#[test]
fn noting_unknown_fields_maps_the_row_and_tells_once_on_every_reader() {
    let noting = mapper().unknown_fields(UnknownFields::Note);
    for mapper in every_reader(noting) {
        let why = format!("{:?} flat first {}", mapper.parser(), mapper.is_flat_first());
        let mut out = RowsBuilder::new();
        let clone = mapper.clone();
        mapper
            .map_into(br#"{"id":1,"name":"n"}"#, RowKind::Append, 0, &mut out)
            .unwrap();
        assert!(
            !mapper.take_unknown_field_noted(),
            "{why}: no field without a column yet"
        );
        mapper
            .map_into(
                br#"{"id":2,"extra":{"a":1},"name":"n"}"#,
                RowKind::Append,
                0,
                &mut out,
            )
            .unwrap();
        assert!(clone.take_unknown_field_noted(), "{why}: noted, seen by a clone");
        assert!(!mapper.take_unknown_field_noted(), "{why}: told once");
        assert_eq!(Rows::new(&out.into_bytes()).count(), 2, "{why}: both rows made");
    }
    let ignoring = mapper();
    let mut out = RowsBuilder::new();
    ignoring
        .map_into(br#"{"id":2,"extra":1}"#, RowKind::Append, 0, &mut out)
        .unwrap();
    assert!(!ignoring.take_unknown_field_noted(), "ignored by default");
}
