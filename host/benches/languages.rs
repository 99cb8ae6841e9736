//! The json-to-row transform in every guest language, on the same messages:
//! messages per second at 1,000-message batches, compile time and cached load
//! time, and component size. The table uses the column types every
//! language's json-to-row supports (BIGINT, STRING, DOUBLE).
//!
//! Needs the components: `cargo xtask build-transforms` first.
//! Run: `cargo bench -p iggy_connector_fluss_sink --bench languages`.

use std::hint::black_box;
use std::time::Duration;

mod common;
#[path = "common/components.rs"]
mod components;

use common::json_batch_sized;
use components::component;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use iggy_connector_fluss_sink::{DataType, TablePath, TableSchema};
use iggy_connector_fluss_sink::{Transform, TransformSpec};

/// (language, component file) pairs.
const COMPONENTS: &[(&str, &str)] = &[
    ("rust", "json-to-row"),
    ("python", "python-json-to-row"),
    ("js", "js-json-to-row"),
    ("c", "c-json-to-row"),
    ("go", "go-json-to-row"),
];

/// The engine benchmark's table with DECIMAL and TIMESTAMP read as DOUBLE and
/// STRING, the types every language's json-to-row supports.
fn table() -> TableSchema {
    let mut table = common::table(TablePath::new("bench", "events"));
    for column in &mut table.columns {
        column.data_type = match column.data_type {
            DataType::Decimal(..) => DataType::Double,
            DataType::Timestamp(_) => DataType::String,
            other => other,
        };
    }
    table
}

fn throughput(c: &mut Criterion) {
    let batch = json_batch_sized(1000, 200);
    let mut group = c.benchmark_group("languages_json_to_row");
    group.throughput(Throughput::Elements(1000));
    for (language, file) in COMPONENTS {
        let size = std::fs::metadata(component(file)).unwrap().len();
        eprintln!("component {language}: {file}.wasm, {} KiB", size / 1024);
        let mut spec = TransformSpec::new(component(file));
        spec.cache_dir = Some(std::env::temp_dir().join("fluss-sink-bench-cache"));
        let transform = Transform::load(&spec, &[table()]).unwrap();
        assert_eq!(
            transform.process(&batch).unwrap().rows.len(),
            1000,
            "{language}: every message maps"
        );
        group.bench_function(BenchmarkId::new(*language, 1000), |b| {
            b.iter(|| black_box(transform.process(black_box(&batch)).unwrap()))
        });
    }
    group.finish();
}

fn load_times(c: &mut Criterion) {
    components::load_times(c, "languages_load", COMPONENTS, &table());
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = throughput, load_times
}
criterion_main!(benches);
