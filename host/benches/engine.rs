//! Messages per second through the transform engine, against the same JSON
//! mapping done natively in the same run (with serde_json, the parser the
//! guest runs, and with sonic-rs, the sink's native default).
//!
//! Needs the components: `cargo xtask build-transforms` first.
//! Run: `cargo bench -p iggy_connector_fluss_sink --bench engine`.

use std::hint::black_box;
use std::time::Duration;

mod common;
#[path = "common/components.rs"]
mod components;

use common::json_batch_sized;
use components::component;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use fluss_row_codec::RowKind;
use fluss_row_codec::json::JsonParser;
use iggy_connector_fluss_sink::JsonMapping;
use iggy_connector_fluss_sink::{Header, HeaderKind, MessageBatch, Transform, TransformSpec};
use iggy_connector_fluss_sink::{TablePath, TableSchema};

const BATCH_SIZES: [usize; 4] = [1, 100, 1000, 10_000];

fn table() -> TableSchema {
    common::table(TablePath::new("bench", "events"))
}

fn load(name: &str) -> Transform {
    load_with(name, &[])
}

fn load_with(name: &str, config: &[(&str, &str)]) -> Transform {
    let mut spec = TransformSpec::new(component(name));
    spec.cache_dir = None;
    spec.config = config
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Transform::load(&spec, &[table()]).unwrap()
}

/// `batch` again with each message's tenant (`t0`..`t2`) in a `tenant`
/// header, as the consume bench hands them to `tenant-router`.
fn with_tenants(batch: &MessageBatch) -> MessageBatch {
    let mut routed = MessageBatch::new(batch.source.clone());
    for (i, m) in batch.iter().enumerate() {
        let tenant = Header {
            key: "tenant".into(),
            kind: HeaderKind::String,
            value: format!("t{}", i % 3).into_bytes(),
        };
        routed
            .push(m.offset, m.id, m.timestamp, m.payload, [tenant])
            .unwrap();
    }
    routed
}

fn engine(c: &mut Criterion) {
    let noop = load("noop");
    let json_wasm = load("json-to-row");
    let router_wasm = load_with("tenant-router", &[("prefix", "tenant_")]);
    // The same code natively: row-codec's mapping with serde_json, the
    // parser the guest runs; and the sink's own native default (sonic-rs).
    let native = JsonMapping::new(&table(), RowKind::Append).with_parser(JsonParser::SerdeJson);
    let native_sonic = JsonMapping::new(&table(), RowKind::Append);
    for n in BATCH_SIZES {
        let batch = json_batch_sized(n, 200);
        let mean_len = batch.iter().map(|m| m.payload.len()).sum::<usize>() / n;
        assert!(
            (180..=220).contains(&mean_len),
            "payloads average {mean_len} bytes"
        );
        assert_eq!(
            json_wasm.process(&batch).unwrap().rows.len(),
            n,
            "every message maps"
        );
        assert_eq!(native.map_batch(&batch).rows.len(), n, "every message maps");
        let routed = with_tenants(&batch);
        let router_output = router_wasm.process(&routed).unwrap();
        assert_eq!(router_output.rows.len(), n, "every message is routed");
        assert_eq!(
            router_output.rows.tables().len(),
            n.min(3),
            "to one table per tenant"
        );

        let mut group = c.benchmark_group(format!("batch_{n}"));
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function(BenchmarkId::new("noop_wasm", n), |b| {
            b.iter(|| black_box(noop.process(black_box(&batch)).unwrap()))
        });
        group.bench_function(BenchmarkId::new("json_to_row_wasm", n), |b| {
            b.iter(|| black_box(json_wasm.process(black_box(&batch)).unwrap()))
        });
        group.bench_function(BenchmarkId::new("tenant_router_wasm", n), |b| {
            b.iter(|| black_box(router_wasm.process(black_box(&routed)).unwrap()))
        });
        group.bench_function(BenchmarkId::new("json_to_row_native", n), |b| {
            b.iter(|| black_box(native.map_batch(black_box(&batch))))
        });
        group.bench_function(BenchmarkId::new("json_to_row_native_sonic", n), |b| {
            b.iter(|| black_box(native_sonic.map_batch(black_box(&batch))))
        });
        group.finish();
    }
}

fn load_times(c: &mut Criterion) {
    components::load_times(
        c,
        "load",
        &[("noop", "noop"), ("json-to-row", "json-to-row")],
        &table(),
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = engine, load_times
}
criterion_main!(benches);
