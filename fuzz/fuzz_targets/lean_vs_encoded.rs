//! The JSON mapping's two ways to Arrow: the one-pass lean path (straight
//! into Arrow builders) and the encoded path (compact rows, checked, then
//! Arrow) must give every message the same outcome, word for word, and
//! build the same record batch from the rows they take.
#![no_main]

use fluss_row_codec::RowKind;
use iggy_connector_fluss_sink::JsonMapping;
use iggy_connector_fluss_sink::test_support::ColumnMapping;
use iggy_connector_fluss_sink::test_support::{arrow_schema_of, to_record_batch};
use iggy_connector_fluss_sink::{Column, DataType, TableSchema};
use iggy_connector_fluss_sink::{MessageBatch, Source};
use libfuzzer_sys::fuzz_target;

fn schema() -> TableSchema {
    let columns = [
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
        ("small_dec", "DECIMAL(4, 2)", true),
        ("day", "DATE", true),
        ("tm", "TIME(3)", true),
        ("ts0", "TIMESTAMP(0)", true),
        ("ts6", "TIMESTAMP(6)", true),
        ("ts9", "TIMESTAMP(9)", true),
        ("ltz", "TIMESTAMP_LTZ(6)", true),
    ];
    TableSchema {
        path: "db.t".parse().unwrap(),
        columns: columns
            .iter()
            .map(|(name, ty, nullable)| Column::new(*name, ty.parse::<DataType>().unwrap(), *nullable))
            .collect(),
        primary_key: vec![],
        partition_keys: vec![],
        added_columns: 0,
    }
}

fuzz_target!(|payloads: Vec<Vec<u8>>| {
    let schema = schema();
    let arrow_schema = arrow_schema_of(&schema).unwrap();
    let mut batch = MessageBatch::new(Source {
        stream: "s".into(),
        topic: "t".into(),
        partition: 1,
    });
    for (i, p) in payloads.iter().enumerate() {
        batch.push(i as u64, i as u128, 1_000 + i as u64, p, []).unwrap();
    }

    let mapping = JsonMapping::new(&schema, RowKind::Append);
    let mut encoded = mapping.map_batch(&batch);
    encoded.check_rows(|_| Some(&schema));
    let lean = ColumnMapping::new(mapping, schema.clone(), arrow_schema.clone(), false).map_batch(&batch);

    assert_eq!(
        lean.outcomes, encoded.outcomes,
        "the same outcome for every message"
    );
    let expected = to_record_batch(&encoded, &schema, &arrow_schema);
    let got = lean.rows.record(0..lean.rows.messages().len());
    match (got, expected) {
        (Ok(got), Ok(expected)) => assert_eq!(got, expected, "the same record batch"),
        (got, expected) => assert_eq!(got.err(), expected.err(), "the same refusal"),
    }
});
