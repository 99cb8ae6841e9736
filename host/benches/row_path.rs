//! The sink's own CPU per row on the JSON path, without Fluss: JSON payloads
//! to rows, rows to the Arrow batch the writer appends, and the two
//! together (the encoded path of routed tables and dead letters; rows to
//! Arrow also with arrow's own `make_builder` builders, `rows_to_arrow_make_builder`),
//! against JSON straight to
//! Arrow columns in one pass (the lean path of log tables: the quick reader
//! of flat objects first, then sonic-rs, the native default, or serde_json,
//! the guests' parser; and each parser alone), at ~110 B, ~400 B and ~2 KB
//! messages, 1,000 a batch. And the runtime's messages buffer decoded
//! into a batch by the hand-written reader and by postcard with serde
//! derives (`runtime_buffers_*`).
//!
//! Run: `cargo bench -p iggy_connector_fluss_sink --bench row_path`.

use std::hint::black_box;
use std::time::Duration;

mod common;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use fluss_row_codec::RowKind;
use fluss_row_codec::json::JsonParser;
use iggy_connector_fluss_sink::JsonMapping;
use iggy_connector_fluss_sink::test_support::ColumnMapping;
use iggy_connector_fluss_sink::test_support::decode;
use iggy_connector_fluss_sink::test_support::{
    arrow_schema_of, to_record_batch, to_record_batch_with_arrow_builders,
};
use iggy_connector_fluss_sink::{MessageBatch, Source, TablePath};

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
    // The sink's own settings: fields without a column noted (a look at the
    // table follows), or refused so that their columns are added first
    // (`evolve_schema`); every field of these payloads has a column.
    let unknown_fields = |refuse| {
        ColumnMapping::new(
            mapping.clone().refusing_unknown_fields(refuse),
            schema.clone(),
            arrow_schema.clone(),
            false,
        )
    };
    let (noting, refusing) = (unknown_fields(false), unknown_fields(true));
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
        assert_eq!(
            to_record_batch_with_arrow_builders(&mapped, &schema, &arrow_schema).unwrap(),
            to_record_batch(&mapped, &schema, &arrow_schema).unwrap(),
            "arrow's builders make the same batch as the sink's"
        );
        group.bench_function(BenchmarkId::new("rows_to_arrow_make_builder", ROWS), |b| {
            b.iter(|| {
                black_box(
                    to_record_batch_with_arrow_builders(black_box(&mapped), &schema, &arrow_schema).unwrap(),
                )
            })
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
        assert_eq!(refusing.map_batch(&batch).rows.len(), ROWS, "no field is new");
        group.bench_function(
            BenchmarkId::new("json_to_arrow_one_pass_noting_fields", ROWS),
            |b| b.iter(|| black_box(noting.map_batch(black_box(&batch)))),
        );
        group.bench_function(
            BenchmarkId::new("json_to_arrow_one_pass_evolve_schema", ROWS),
            |b| b.iter(|| black_box(refusing.map_batch(black_box(&batch)))),
        );
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

/// The runtime's `RawMessages` buffer as a serde model, for postcard
/// (`docs/runtime-contract.md`): what decoding it with a library would be.
mod wire {
    use serde::{Deserialize, Serialize};

    #[derive(Serialize, Deserialize)]
    pub(crate) enum Schema {
        Json,
        Raw,
        Text,
        Proto,
        FlatBuffer,
        Avro,
    }

    #[derive(Serialize, Deserialize)]
    pub(crate) struct RawMessage<'a> {
        pub id: u128,
        pub offset: u64,
        pub checksum: u64,
        pub timestamp: u64,
        pub origin_timestamp: u64,
        pub headers: &'a [u8],
        pub payload: &'a [u8],
    }

    #[derive(Serialize, Deserialize)]
    pub(crate) struct RawMessages<'a> {
        pub schema: Schema,
        #[serde(borrow)]
        pub messages: Vec<RawMessage<'a>>,
    }
}

/// The runtime's messages buffer decoded into the batch the pipeline
/// carries: by the hand-written reader (`abi::decode`), and by postcard with
/// serde derives then the same batch, side by side.
fn runtime_buffers(c: &mut Criterion) {
    let source = || Source {
        stream: "app".into(),
        topic: "events".into(),
        partition: 1,
    };
    for (size_name, size) in SIZES {
        let batch = common::json_batch_sized(ROWS, size);
        let messages = wire::RawMessages {
            schema: wire::Schema::Json,
            messages: (0..batch.len())
                .map(|i| {
                    let m = batch.get(i);
                    wire::RawMessage {
                        id: m.id,
                        offset: m.offset,
                        checksum: 7,
                        timestamp: m.timestamp,
                        origin_timestamp: m.timestamp,
                        headers: &[],
                        payload: m.payload,
                    }
                })
                .collect(),
        };
        let bytes = postcard::to_allocvec(&messages).unwrap();
        let (_, hand) = decode::raw_messages(&bytes, source()).unwrap();
        assert_eq!(
            hand.len(),
            ROWS,
            "the hand-written reader reads the buffer postcard wrote"
        );
        let mut group = c.benchmark_group(format!("runtime_buffers_{size_name}"));
        group.throughput(Throughput::Elements(ROWS as u64));
        group.bench_function(BenchmarkId::new("hand_written", ROWS), |b| {
            b.iter(|| black_box(decode::raw_messages(black_box(&bytes), source()).unwrap()))
        });
        group.bench_function(BenchmarkId::new("postcard_serde", ROWS), |b| {
            b.iter(|| {
                let wire: wire::RawMessages<'_> = postcard::from_bytes(black_box(&bytes)).unwrap();
                let bytes_of: usize = wire.messages.iter().map(|m| m.payload.len()).sum();
                let mut out = MessageBatch::with_capacity(source(), wire.messages.len(), bytes_of);
                for m in &wire.messages {
                    let headers = decode::headers(m.headers).unwrap();
                    out.push(m.offset, m.id, m.timestamp, m.payload, headers).unwrap();
                }
                black_box(out)
            })
        });
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    targets = row_path, runtime_buffers
}
criterion_main!(benches);
