//! When writes were acknowledged, for tests that measure how long a writer
//! goes without: fluss-rs alone's appends, timed as they are acknowledged,
//! and the plugin's acknowledgements and spool as its metrics show them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow::array::{Int64Array, StringArray};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use iggy_connector_fluss_sink::TablePath;

use crate::fluss_cluster::{connection_to, fluss_path};
use crate::metrics_text;

/// When writes were acknowledged.
pub type Acks = Arc<Mutex<Vec<Instant>>>;

/// The longest time between `from` and `to` without an acknowledged write
/// (from `from` to the first acknowledgement after it, between two, or
/// from the last to `to`).
pub fn longest_stall(acks: &[Instant], from: Instant, to: Instant) -> Duration {
    let mut last = from;
    let mut longest = Duration::ZERO;
    for &ack in acks.iter().filter(|a| **a > from && **a <= to) {
        longest = longest.max(ack - last);
        last = ack;
    }
    longest.max(to.saturating_duration_since(last))
}

/// `rows` rows of `(id BIGINT, name STRING)` from id `first` on.
fn direct_batch(schema: &SchemaRef, first: u64, rows: u64) -> RecordBatch {
    let ids = Int64Array::from_iter_values((first..first + rows).map(|i| i as i64));
    let names = StringArray::from_iter_values((0..rows).map(|i| format!("name-{i}")));
    RecordBatch::try_new(schema.clone(), vec![Arc::new(ids), Arc::new(names)]).unwrap()
}

/// fluss-rs alone at its best: appends a batch of `rows` rows to log table
/// `path` (`id BIGINT, name STRING`, ids from `first_id` on), awaits its
/// acknowledgement with a flush, and again `pace` later, until `stop`; each
/// acknowledgement's time in `acks`.
pub async fn direct_writes(
    bootstrap: String,
    path: TablePath,
    first_id: u64,
    rows: u64,
    pace: Duration,
    stop: Arc<AtomicBool>,
    acks: Acks,
) {
    let conn = connection_to(&bootstrap).await;
    let table = conn.get_table(&fluss_path(&path)).await.unwrap();
    let schema = fluss::record::to_arrow_schema(table.get_table_info().row_type()).unwrap();
    let writer = table.new_append().unwrap().create_writer().unwrap();
    let mut first = first_id;
    while !stop.load(Ordering::SeqCst) {
        let ack = writer
            .append_arrow_batch(direct_batch(&schema, first, rows))
            .unwrap();
        let acknowledged = async {
            let (ack, flushed) = tokio::join!(ack, writer.flush());
            ack.and(flushed)
        };
        // A flush that never ends is given up when the test stops writing.
        tokio::select! {
            done = acknowledged => done.expect("fluss-rs retries until acknowledged"),
            () = wait_for(&stop) => return,
        }
        acks.lock().unwrap().push(Instant::now());
        first += rows;
        tokio::time::sleep(pace).await;
    }
}

async fn wait_for(flag: &AtomicBool) {
    while !flag.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The sum of metric `name`'s samples of instance `id` at `address` now (0 when none).
pub fn instance_metric(address: &str, name: &str, id: u32) -> f64 {
    let label = format!("instance=\"{id}\"");
    metrics_text(address)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with('{') && l.contains(&label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// What the sink's metrics showed, read at a pace.
#[derive(Default)]
pub struct Scraped {
    /// When the count of acknowledged writes was seen to grow.
    pub acks: Vec<Instant>,
    /// When the spool was seen holding batches.
    pub spooling: Vec<Instant>,
}

/// Reads instance `id`'s metrics at `address` every `pace` until `stop`.
pub fn scrape(address: &str, id: u32, pace: Duration, stop: &AtomicBool) -> Scraped {
    let mut scraped = Scraped::default();
    let mut last = 0.0;
    while !stop.load(Ordering::SeqCst) {
        let now = Instant::now();
        let count = instance_metric(address, "fluss_sink_write_ack_duration_seconds_count", id);
        if count > last {
            scraped.acks.push(now);
            last = count;
        }
        if instance_metric(address, "fluss_sink_spool_batches", id) > 0.0 {
            scraped.spooling.push(now);
        }
        std::thread::sleep(pace);
    }
    scraped
}

/// How long the spool held batches each time it did, without a break
/// (samples `pace` apart), from its first sample to its last.
pub fn spooling_runs(samples: &[Instant], pace: Duration) -> Vec<Duration> {
    let mut runs: Vec<(Instant, Instant)> = Vec::new();
    for &at in samples {
        match runs.last_mut() {
            Some((_, last)) if at - *last <= pace * 3 => *last = at,
            _ => runs.push((at, at)),
        }
    }
    runs.into_iter().map(|(first, last)| last - first).collect()
}
