//! Built transform components for the benchmarks that load them (engine,
//! languages): where they are, and how long loading takes.

use std::path::PathBuf;

use criterion::{BenchmarkId, Criterion};
use iggy_connector_fluss_sink::TableSchema;
use iggy_connector_fluss_sink::{Transform, TransformSpec};

/// The built component `name`; panics with the command that builds it.
pub(crate) fn component(name: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../target/wasm-transforms")
        .join(format!("{name}.wasm"));
    assert!(
        path.exists(),
        "{} is missing: run `cargo xtask build-transforms` first",
        path.display()
    );
    path
}

/// Benchmarks loading each `(label, component)` for `table`: compiled from
/// scratch, and from a warm on-disk cache.
pub(crate) fn load_times(c: &mut Criterion, group: &str, components: &[(&str, &str)], table: &TableSchema) {
    let mut group = c.benchmark_group(group);
    group.sample_size(10);
    for (label, file) in components {
        let dir = tempfile::tempdir().unwrap();
        let mut spec = TransformSpec::new(component(file));
        spec.cache_dir = None;
        let tables = std::slice::from_ref(table);
        group.bench_function(BenchmarkId::new("compile", label), |b| {
            b.iter(|| Transform::load(&spec, tables).unwrap())
        });
        spec.cache_dir = Some(dir.path().to_path_buf());
        Transform::load(&spec, tables).unwrap();
        group.bench_function(BenchmarkId::new("cached", label), |b| {
            b.iter(|| Transform::load(&spec, tables).unwrap())
        });
    }
    group.finish();
}
