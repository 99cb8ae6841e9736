//! The tablet server killed (SIGKILL) and restarted in the middle of a
//! stream: every message is accounted for, none is lost, and nothing is
//! written twice. Needs the cluster of `scripts/fluss-local.sh`, which this
//! test drives; it fails, never skips, when no cluster is reachable.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use fluss::metadata::TablePath as FlussPath;
use fluss::row::{DataGetters, GenericRow};
use fluss_row_codec::RowKind;
use iggy_connector_fluss_sink::mapping::JsonMapping;
use iggy_connector_fluss_sink::writer::WriteReport;
use integration_tests::fluss_cluster::{connection, read_log, settings, unique_table, writer};
use integration_tests::{repo_root, table, text_batch};

const BATCHES: usize = 24;
const PER_BATCH: usize = 100;

fn fluss_script(command: &str) {
    let status = std::process::Command::new(repo_root().join("scripts/fluss-local.sh"))
        .arg(command)
        .status()
        .expect("run scripts/fluss-local.sh");
    assert!(status.success(), "scripts/fluss-local.sh {command} failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tablet_server_restart_mid_stream_loses_nothing() {
    let log_path = unique_table("restart_log");
    let pk_path = unique_table("restart_pk");
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
    let pk_schema = w
        .ensure_table(&table(&pk_path.to_string(), &columns, &["id"]))
        .await
        .unwrap();

    let stream = {
        let (w, log_path, pk_path) = (w.clone(), log_path.clone(), pk_path.clone());
        tokio::spawn(async move {
            let (mut log_total, mut pk_total) = (WriteReport::default(), WriteReport::default());
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
                let out = JsonMapping::new(&pk_schema, RowKind::Upsert).map_batch(&batch);
                let p = w
                    .write(&batch, out, &pk_path, "mapping")
                    .await
                    .expect("pk batch delivered");
                for (total, r) in [(&mut log_total, r), (&mut pk_total, p)] {
                    total.written += r.written;
                    total.filtered += r.filtered;
                    total.dead_lettered += r.dead_lettered;
                }
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
            (log_total, pk_total)
        })
    };
    tokio::time::sleep(Duration::from_millis(1200)).await;
    tokio::task::spawn_blocking(|| fluss_script("restart-tablet"))
        .await
        .unwrap();
    let (log_total, pk_total) = stream.await.unwrap();

    let sent = BATCHES * PER_BATCH;
    for total in [log_total, pk_total] {
        assert_eq!(
            total.written + total.filtered + total.dead_lettered,
            sent,
            "every message is accounted for"
        );
    }
    let dead = log_total.dead_lettered + pk_total.dead_lettered;
    assert_eq!(
        read_log(&dlq, dead, Duration::from_secs(30)).await.len(),
        dead,
        "dead letters are in their table"
    );

    let rows = read_log(&log_path, log_total.written + 1, Duration::from_secs(30)).await;
    assert_eq!(
        rows.len(),
        log_total.written,
        "the log table holds each written message once"
    );
    let ids: BTreeSet<&str> = rows.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(ids.len(), rows.len(), "no duplicates in the log table");

    let conn = connection().await;
    let t = conn
        .get_table(&FlussPath::new(pk_path.database.clone(), pk_path.table.clone()))
        .await
        .unwrap();
    let mut lookuper = t.new_lookup().unwrap().create_lookuper().unwrap();
    let mut present = 0;
    for id in 0..sent as i64 {
        let mut key = GenericRow::new(1);
        key.set_field(0, id);
        let found = lookuper.lookup(&key).await.unwrap();
        if let Some(row) = found.get_single_row().unwrap() {
            assert_eq!(row.get_int(1).unwrap() as i64, id / PER_BATCH as i64);
            present += 1;
        }
    }
    assert_eq!(
        present, pk_total.written,
        "every written key is in the primary-key table"
    );
    assert_eq!(
        log_total.dead_lettered + pk_total.dead_lettered,
        0,
        "a restart is transient, not a reason to dead-letter"
    );
}
