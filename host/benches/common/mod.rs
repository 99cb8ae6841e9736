//! Inputs shared by the benchmarks.

use iggy_connector_fluss_sink::{Column, DataType, TablePath, TableSchema};
use iggy_connector_fluss_sink::{MessageBatch, Source};

/// The benchmark table: 6 columns.
pub(crate) fn table(path: TablePath) -> TableSchema {
    let col = |name: &str, ty: &str, nullable| Column::new(name, ty.parse::<DataType>().unwrap(), nullable);
    TableSchema {
        path,
        columns: vec![
            col("event_id", "BIGINT", false),
            col("user", "STRING", true),
            col("action", "STRING", true),
            col("amount", "DECIMAL(10, 2)", true),
            col("at", "TIMESTAMP(6)", true),
            col("session", "STRING", true),
        ],
        primary_key: vec![],
        partition_keys: vec![],
        added_columns: 0,
    }
}

/// `n` JSON objects with 6 fields (see [`table`]): with short values
/// (about 110 bytes) when `bytes` is under 150, else padded in their
/// `session` string to about `bytes` bytes (at least about 200).
pub(crate) fn json_batch_sized(n: usize, bytes: usize) -> MessageBatch {
    if (1..150).contains(&bytes) {
        return short_json_batch(n);
    }
    let mut batch = MessageBatch::new(Source {
        stream: "bench".into(),
        topic: "events".into(),
        partition: 1,
    });
    let actions = ["checkout_completed", "page_viewed_product", "cart_item_added"];
    for i in 0..n {
        let pad = "p".repeat(bytes.saturating_sub(205));
        let payload = format!(
            r#"{{"event_id":{},"user":"user-{:05}@example.com","action":"{}","amount":"{}.{:02}","at":"2026-11-30T12:{:02}:{:02}.{:06}","session":"6f1c2a7e-9b3d-4c5e-8f70-{:012x}{pad}"}}"#,
            1_000_000 + i,
            i % 100_000,
            actions[i % 3],
            i % 10_000,
            i % 100,
            (i / 60) % 60,
            i % 60,
            i % 1_000_000,
            i * 7919
        );
        batch
            .push(i as u64, i as u128, 1_700_000_000_000_000, payload.as_bytes(), [])
            .unwrap();
    }
    batch
}

/// `n` JSON objects of about 110 bytes with the 6 fields of [`json_batch_sized`].
fn short_json_batch(n: usize) -> MessageBatch {
    let mut batch = MessageBatch::new(Source {
        stream: "bench".into(),
        topic: "events".into(),
        partition: 1,
    });
    for i in 0..n {
        let payload = format!(
            r#"{{"event_id":{},"user":"u{:05}","action":"view","amount":"{}.{:02}","at":"2026-11-30T12:00:{:02}Z","session":"s{}"}}"#,
            1_000_000 + i,
            i % 100_000,
            i % 100,
            i % 100,
            i % 60,
            i % 1000
        );
        batch
            .push(i as u64, i as u128, 1_700_000_000_000_000, payload.as_bytes(), [])
            .unwrap();
    }
    batch
}
