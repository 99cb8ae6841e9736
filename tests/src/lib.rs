//! Shared helpers for the integration tests in `tests/tests/`.

use std::path::PathBuf;

use fluss_row_codec::Cell;
use iggy_connector_fluss_sink::batch::{Header, MessageBatch, Source};
use iggy_connector_fluss_sink::rows::TransformOutput;
use iggy_connector_fluss_sink::schema::{Column, DataType, TablePath, TableSchema};

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
