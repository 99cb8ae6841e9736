//! Shared helpers for the integration tests in `tests/tests/`.

use std::path::PathBuf;

pub mod fault_proxy;
pub mod fluss_cluster;
pub mod iggy;
pub mod local_cluster;
pub mod plugin;
pub mod recovery;

use fluss_row_codec::Cell;
use iggy_connector_fluss_sink::TransformOutput;
use iggy_connector_fluss_sink::{Column, DataType, TablePath, TableSchema};
use iggy_connector_fluss_sink::{Header, MessageBatch, Source};
use iggy_connector_fluss_sink::{Transform, TransformError, TransformSpec};

/// The repository's root folder.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the repo")
        .to_path_buf()
}

/// The built component of transform `name`; panics with the command that
/// builds it when it is missing.
pub fn component(name: &str) -> PathBuf {
    let path = repo_root()
        .join("target/wasm-transforms")
        .join(format!("{name}.wasm"));
    assert!(
        path.exists(),
        "{} is missing: run `cargo xtask build-transforms` first",
        path.display()
    );
    path
}

/// Loads the built component `name` with `config`, for `tables`, through the
/// shared compiled-component cache.
pub fn load_transform(
    name: &str,
    config: &[(&str, &str)],
    tables: &[TableSchema],
) -> Result<Transform, TransformError> {
    let mut spec = TransformSpec::new(component(name));
    spec.config = config
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    spec.cache_dir = Some(test_cache_dir());
    Transform::load(&spec, tables)
}

/// A TCP port on 127.0.0.1 that was free a moment ago (the OS picked it).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port on 127.0.0.1")
        .port()
}

/// Writes `line`, marked `figure:`, to the test process's standard error
/// past libtest's capture (which keeps a passing test's `eprintln!` to
/// itself): for the figures a passing run is read for, such as the failover
/// test's recovery times, which CI's log then shows.
pub fn figure(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "figure: {line}");
}

/// Awaits `step`, failing the test with `what` when it has not ended within
/// `limit`: a step whose other side never answers (fluss-rs has no timeout
/// of its own) names itself instead of hanging the test binary.
pub async fn within<T>(limit: std::time::Duration, what: &str, step: impl Future<Output = T>) -> T {
    match tokio::time::timeout(limit, step).await {
        Ok(out) => out,
        Err(_) => panic!("{what} did not end within {limit:?}"),
    }
}

/// The tests' HTTP client: every call bounded (10 s in all), so a server
/// that accepts and never answers fails the test instead of hanging it.
pub fn http() -> &'static ureq::Agent {
    static AGENT: std::sync::OnceLock<ureq::Agent> = std::sync::OnceLock::new();
    AGENT.get_or_init(|| {
        ureq::Agent::config_builder()
            .timeout_global(Some(std::time::Duration::from_secs(10)))
            .build()
            .into()
    })
}

/// What the plugin's Prometheus endpoint at `address` serves now; `None`
/// when it does not answer (within [`http`]'s bound).
pub fn metrics_text(address: &str) -> Option<String> {
    http()
        .get(format!("http://{address}/metrics"))
        .call()
        .ok()?
        .body_mut()
        .read_to_string()
        .ok()
}

/// The sum of every sample of metric `name` (any labels) that the plugin's
/// Prometheus endpoint at `address` exports now; `None` when it exports none.
pub fn scrape_sum(address: &str, name: &str) -> Option<f64> {
    let text = metrics_text(address)?;
    let samples: Vec<f64> = text
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    (!samples.is_empty()).then(|| samples.iter().sum())
}

/// A compiled-component cache shared by the tests (compiling is the slow part).
pub fn test_cache_dir() -> PathBuf {
    repo_root().join("target/test-component-cache")
}

/// A table schema from `(name, type, nullable)` triples.
pub fn table(path: &str, columns: &[(&str, &str, bool)], primary_key: &[&str]) -> TableSchema {
    TableSchema {
        path: path.parse::<TablePath>().expect("test table path"),
        columns: columns
            .iter()
            .map(|(name, ty, nullable)| {
                Column::new(*name, ty.parse::<DataType>().expect("test type"), *nullable)
            })
            .collect(),
        primary_key: primary_key.iter().map(|k| k.to_string()).collect(),
        partition_keys: vec![],
        added_columns: 0,
    }
}

/// A batch of `payloads` at offsets 0.., each with `headers`.
pub fn batch_of(payloads: &[&[u8]], headers: &[Vec<Header>]) -> MessageBatch {
    let mut batch = MessageBatch::new(Source {
        stream: "app".into(),
        topic: "events".into(),
        partition: 1,
    });
    for (i, payload) in payloads.iter().enumerate() {
        let h = headers.get(i).cloned().unwrap_or_default();
        batch
            .push(
                i as u64,
                1000 + i as u128,
                1_700_000_000_000_000 + i as u64,
                payload,
                h,
            )
            .expect("small batch");
    }
    batch
}

/// A batch of text payloads without headers.
pub fn text_batch(payloads: &[&str]) -> MessageBatch {
    let bytes: Vec<&[u8]> = payloads.iter().map(|p| p.as_bytes()).collect();
    batch_of(&bytes, &[])
}

/// `schema` partitioned by `keys`.
pub fn partitioned(mut schema: TableSchema, keys: &[&str]) -> TableSchema {
    schema.partition_keys = keys.iter().map(|k| k.to_string()).collect();
    schema
}

/// Each row of `output` as (message index, table name or "", kind, cells as debug text).
pub fn rows_of(output: &TransformOutput) -> Vec<(u32, String, &'static str, Vec<String>)> {
    output
        .rows
        .iter()
        .map(|(entry, row)| {
            let cells = row.cells().map(|c: Cell<'_>| format!("{c:?}")).collect();
            (
                entry.message,
                output.rows.table_name(entry.table).unwrap_or("").to_string(),
                entry.kind.name(),
                cells,
            )
        })
        .collect()
}
