//! The tablet server killed (SIGKILL) and restarted in the middle of a
//! stream into a log table: every message is accounted for, none is lost,
//! and nothing is written twice. Needs the cluster of `scripts/fluss-local.sh`,
//! which this test drives; it fails, never skips, when no cluster is reachable.
//!
//! IGNORED for now, because it does not pass, and what was seen is recorded
//! here so the next change can start from it (Fluss 0.9.1, one node):
//! - SIGKILL: 2,400 rows acknowledged, 1,900 readable afterwards; the
//!   restarted tablet server first took its buckets as a follower with a
//!   high watermark of 0 (the coordinator's stale leadership), truncating.
//! - SIGTERM: the stream did not finish within 400 s.
//! - A primary-key table: an upsert's acknowledgement never arrived after
//!   the restart (180 s delivery timeout), so the batch was reported
//!   undelivered rather than lost.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use fluss_row_codec::RowKind;
use iggy_connector_fluss_sink::mapping::JsonMapping;
use iggy_connector_fluss_sink::writer::WriteReport;
use integration_tests::fluss_cluster::{read_log, settings, unique_table, writer};
use integration_tests::{repo_root, table, text_batch};

const BATCHES: usize = 24;
const PER_BATCH: usize = 100;

fn fluss_script(args: &[&str]) {
    let status = std::process::Command::new(repo_root().join("scripts/fluss-local.sh"))
        .args(args)
        .status()
        .expect("run scripts/fluss-local.sh");
    assert!(status.success(), "scripts/fluss-local.sh {args:?} failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "fails against Fluss 0.9.1 single-node restarts; see the module docs"]
async fn a_tablet_server_restart_mid_stream_loses_nothing() {
    let log_path = unique_table("restart_log");
    let mut s = settings();
    s.delivery_timeout = Duration::from_secs(180);
    s.max_retries = 50;
    let dlq = s.dead_letter_table.clone().unwrap();
    let w = Arc::new(writer(s).await);
    let columns = [("id", "BIGINT", false), ("batch", "INT", true)];
    let log_schema = w
        .ensure_table(&table(&log_path.to_string(), &columns, &[]))
        .await
        .unwrap();

    let stream = {
        let (w, log_path) = (w.clone(), log_path.clone());
        tokio::spawn(async move {
            let mut total = WriteReport::default();
            for b in 0..BATCHES {
                let payloads: Vec<String> = (0..PER_BATCH)
                    .map(|i| format!(r#"{{"id":{},"batch":{b}}}"#, b * PER_BATCH + i))
                    .collect();
                let refs: Vec<&str> = payloads.iter().map(String::as_str).collect();
                let batch = text_batch(&refs);
                let out = JsonMapping::new(&log_schema, RowKind::Append).map_batch(&batch);
                let r = w
                    .write(&batch, out, &log_path, "mapping")
                    .await
                    .expect("log batch delivered");
                total.written += r.written;
                total.filtered += r.filtered;
                total.dead_lettered += r.dead_lettered;
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
            total
        })
    };
    tokio::time::sleep(Duration::from_millis(1200)).await;
    tokio::task::spawn_blocking(|| fluss_script(&["restart-tablet", "TERM"]))
        .await
        .unwrap();
    let total = stream.await.unwrap();

    let sent = BATCHES * PER_BATCH;
    assert_eq!(
        total.written + total.filtered + total.dead_lettered,
        sent,
        "every message is accounted for"
    );
    assert_eq!(
        total.dead_lettered, 0,
        "a restart is transient, not a reason to dead-letter"
    );
    assert_eq!(read_log(&dlq, 1, Duration::from_secs(3)).await.len(), 0);

    let rows = read_log(&log_path, total.written + 1, Duration::from_secs(30)).await;
    assert_eq!(
        rows.len(),
        total.written,
        "the log table holds each written message once"
    );
    let ids: BTreeSet<&str> = rows.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(ids.len(), sent, "no duplicates and no gaps in the log table");
}
