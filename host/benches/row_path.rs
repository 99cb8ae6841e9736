//! The sink's own CPU per row on the JSON path, without Fluss: JSON payloads
//! to rows, rows to the Arrow batch the writer appends, and the two
//! together (the encoded path of routed tables and dead letters), against JSON straight to
//! Arrow columns in one pass (the lean path of log tables: the quick reader
//! of flat objects first, then sonic-rs, the native default, or serde_json,
//! the guests' parser; and each parser alone), at ~110 B, ~400 B and ~2 KB
//! messages, 1,000 a batch.
//!
//! Run: `cargo bench -p iggy_connector_fluss_sink --bench row_path`.

use std::hint::black_box;
use std::time::Duration;

mod common;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use fluss_row_codec::RowKind;
use fluss_row_codec::json::JsonParser;
use iggy_connector_fluss_sink::JsonMapping;
use iggy_connector_fluss_sink::TablePath;
use iggy_connector_fluss_sink::test_support::ColumnMapping;
use iggy_connector_fluss_sink::test_support::{arrow_schema_of, to_record_batch};

const SIZES: [(&str, usize); 3] = [("110B", 100), ("400B", 400), ("2KB", 2048)];
const ROWS: usize = 1000;

fn row_path(c: &mut Criterion) {
    let schema = common::table(TablePath::new("bench", "events"));
    let arrow_schema = arrow_schema_of(&schema).unwrap();
    let mapping = JsonMapping::new(&schema, RowKind::Append);
    let one_pass = ColumnMapping::new(mapping.clone(), schema.clone(), arrow_schema.clone(), false);
    let one_pass_serde_json = ColumnMapping::new(
        mapping.clone().with_parser(JsonParser::SerdeJson),
        schema.clone(),
        arrow_schema.clone(),
        false,
    );
    let parser_only = |parser| {
        ColumnMapping::new(
            mapping.clone().with_parser(parser).with_flat_first(false),
            schema.clone(),
            arrow_schema.clone(),
            false,
        )
    };
    let one_pass_sonic_only = parser_only(JsonParser::Sonic);
    let one_pass_serde_json_only = parser_only(JsonParser::SerdeJson);
    for (size_name, size) in SIZES {
        let batch = common::json_batch_sized(ROWS, size);
        let mapped = mapping.map_batch(&batch);
        assert_eq!(mapped.rows.len(), ROWS, "every message maps");
        let mut group = c.benchmark_group(format!("row_path_{size_name}"));
        group.throughput(Throughput::Elements(ROWS as u64));
        group.bench_function(BenchmarkId::new("json_to_rows", ROWS), |b| {
            b.iter(|| black_box(mapping.map_batch(black_box(&batch))))
        });
        group.bench_function(BenchmarkId::new("rows_to_arrow", ROWS), |b| {
            b.iter(|| black_box(to_record_batch(black_box(&mapped), &schema, &arrow_schema).unwrap()))
        });
        group.bench_function(BenchmarkId::new("json_to_arrow", ROWS), |b| {
            b.iter(|| {
                let mapped = mapping.map_batch(black_box(&batch));
                black_box(to_record_batch(&mapped, &schema, &arrow_schema).unwrap())
            })
        });
        let columns = one_pass.map_batch(&batch);
        assert_eq!(columns.rows.len(), ROWS, "every message maps");
        assert_eq!(
            columns.rows.record(0..ROWS).unwrap(),
            to_record_batch(&mapped, &schema, &arrow_schema).unwrap(),
            "both paths make the same batch"
        );
        group.bench_function(BenchmarkId::new("json_to_arrow_one_pass", ROWS), |b| {
            b.iter(|| black_box(one_pass.map_batch(black_box(&batch))))
        });
        group.bench_function(BenchmarkId::new("json_to_arrow_one_pass_serde_json", ROWS), |b| {
            b.iter(|| black_box(one_pass_serde_json.map_batch(black_box(&batch))))
        });
        group.bench_function(BenchmarkId::new("json_to_arrow_one_pass_sonic_only", ROWS), |b| {
            b.iter(|| black_box(one_pass_sonic_only.map_batch(black_box(&batch))))
        });
        group.bench_function(
            BenchmarkId::new("json_to_arrow_one_pass_serde_json_only", ROWS),
            |b| b.iter(|| black_box(one_pass_serde_json_only.map_batch(black_box(&batch)))),
        );
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    targets = row_path
}
criterion_main!(benches);
