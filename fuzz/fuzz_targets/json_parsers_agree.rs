//! The JSON mapping's two parsers, each behind the quick reader of flat
//! objects: for any payload, sonic-rs (the plugin's) and serde_json (the
//! guests') give the same encoded row or the same refusal, word for word,
//! as serde_json alone, onto columns of every kind of type; as the
//! mapping is by default, and as `evolve_schema` has it (a field without a
//! column refused, objects and arrays written into STRING columns).
#![no_main]

use fluss_row_codec::json::{JsonMapper, JsonParser, UnknownFields};
use fluss_row_codec::{Column, DataType, RowKind, RowsBuilder};
use libfuzzer_sys::fuzz_target;

fn columns() -> Vec<Column> {
    let col = |name: &str, ty: &str, nullable| Column::new(name, ty.parse::<DataType>().unwrap(), nullable);
    vec![
        col("id", "BIGINT", false),
        col("name", "STRING", true),
        col("score", "DOUBLE", true),
        col("ratio", "FLOAT", true),
        col("active", "BOOLEAN", true),
        col("tiny", "TINYINT", true),
        col("small", "SMALLINT", true),
        col("count", "INT", true),
        col("amount", "DECIMAL(10, 2)", true),
        col("day", "DATE", true),
        col("tm", "TIME(3)", true),
        col("at", "TIMESTAMP(6)", true),
        col("ltz", "TIMESTAMP_LTZ(3)", true),
        col("blob", "BYTES", true),
    ]
}

fn mapped(
    parser: JsonParser,
    flat_first: bool,
    evolving: bool,
    payload: &[u8],
    kind: RowKind,
) -> Result<Vec<u8>, String> {
    let unknown = if evolving {
        UnknownFields::Refuse
    } else {
        UnknownFields::Ignore
    };
    let mapper = JsonMapper::new(columns())
        .with_parser(parser)
        .flat_first(flat_first)
        .unknown_fields(unknown)
        .nested_as_text(evolving);
    let mut out = RowsBuilder::new();
    mapper
        .map_into(payload, kind, 0, &mut out)
        .map(|()| out.into_bytes())
        .map_err(|e| e.to_string())
}

fuzz_target!(|payload: &[u8]| {
    for (kind, evolving) in [
        (RowKind::Append, false),
        (RowKind::Delete, false),
        (RowKind::Append, true),
    ] {
        let reference = mapped(JsonParser::SerdeJson, false, evolving, payload, kind);
        for parser in [JsonParser::Sonic, JsonParser::SerdeJson] {
            let got = mapped(parser, true, evolving, payload, kind);
            assert_eq!(
                got,
                reference,
                "{parser:?}, evolving {evolving}, payload {:?}",
                String::from_utf8_lossy(payload)
            );
        }
    }
});
