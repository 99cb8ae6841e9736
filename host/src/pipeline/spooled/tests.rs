//! The spool's queue: how old a batch is, and when a new batch queues behind the others.

use super::*;
use crate::batch::{MessageBatch, PayloadSchema, Source};

/// A spooler on `dir` for table `db.t`.
pub(in crate::pipeline::spooled) fn spooler(dir: &std::path::Path) -> Spooler {
    let metrics = Arc::new(InstanceMetrics::new(1));
    Spooler::open(
        SpoolMode::OnFailure,
        dir,
        1 << 30,
        TablePath::new("db", "t"),
        metrics,
    )
    .unwrap()
}

/// `count` JSON messages of `partition` from offset `first` on.
pub(in crate::pipeline::spooled) fn held(partition: u32, first: u64, count: u64) -> Held {
    let source = Source {
        stream: "app".into(),
        topic: "events".into(),
        partition,
    };
    let mut batch = MessageBatch::new(source);
    for offset in first..first + count {
        let payload = format!(r#"{{"id":{offset}}}"#);
        batch
            .push(offset, offset as u128, 0, payload.as_bytes(), [])
            .unwrap();
    }
    Held {
        schema: PayloadSchema::Json,
        batch: Arc::new(batch),
        rows: None,
        rows_made_for: None,
    }
}

/// `took` is `millis` (paused time: the timer's millisecond ticks apart).
fn within_a_tick(took: Duration, millis: u64) {
    let want = Duration::from_millis(millis);
    assert!(
        took >= want && took <= want + Duration::from_millis(2),
        "{took:?} for {want:?}"
    );
}

/// A spooler whose queue holds one batch on disk.
async fn one_queued(dir: &std::path::Path) -> Spooler {
    let spooler = spooler(dir);
    let deadline = Deadline::after(Duration::from_secs(10));
    spooler.enqueue(held(1, 0, 10), None, deadline).await.unwrap();
    spooler
}

#[test]
fn a_batch_is_as_old_as_its_oldest_message_by_its_iggy_timestamp() {
    let now = SystemTime::now();
    let micros = |at: SystemTime| at.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_micros() as u64;
    let with_timestamps = |timestamps: &[u64]| {
        let mut held = held(1, 0, 0);
        let mut batch = MessageBatch::new(held.batch.source.clone());
        for (i, t) in timestamps.iter().enumerate() {
            batch.push(i as u64, 0, *t, b"{}", []).unwrap();
        }
        held.batch = Arc::new(batch);
        oldest_message(&held)
    };
    let (a_minute_ago, an_hour_ago) = (now - Duration::from_secs(60), now - Duration::from_secs(3600));
    let oldest = with_timestamps(&[micros(a_minute_ago), micros(an_hour_ago), 0]);
    assert_eq!(
        micros(oldest),
        micros(an_hour_ago),
        "the oldest, and 0 means unknown"
    );
    // Unknown or in the future: when it was queued.
    for timestamps in [&[0, 0][..], &[micros(now + Duration::from_secs(60))]] {
        let at = with_timestamps(timestamps);
        assert!(
            at >= now && at.elapsed().unwrap() < Duration::from_secs(5),
            "{timestamps:?}"
        );
    }
}

#[tokio::test]
async fn a_new_batch_queues_at_once_behind_a_drainer_that_is_not_catching_up() {
    let dir = tempfile::tempdir().unwrap();
    let spooler = one_queued(dir.path()).await;
    tokio::time::pause();
    let started = tokio::time::Instant::now();
    assert!(spooler.busy(None, Deadline::after(Duration::from_secs(10))).await);
    assert_eq!(started.elapsed(), Duration::ZERO);
}

#[tokio::test]
async fn a_new_batch_waits_for_a_catching_up_drainer_to_empty_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let spooler = Arc::new(one_queued(dir.path()).await);
    spooler.catching_up.store(true, Ordering::Relaxed);
    tokio::time::pause();
    let started = tokio::time::Instant::now();
    let drainer = spooler.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        drainer.queue.lock().await.pop_front();
        drainer.changed.notify_waiters();
    });
    assert!(!spooler.busy(None, Deadline::after(Duration::from_secs(10))).await);
    within_a_tick(started.elapsed(), 300);
}

#[tokio::test]
async fn a_new_batch_waits_for_a_catching_up_drainer_at_most_a_second_and_half_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let spooler = one_queued(dir.path()).await;
    spooler.catching_up.store(true, Ordering::Relaxed);
    tokio::time::pause();
    for (deadline, waited) in [(10_000, 1_000), (600, 300)] {
        let started = tokio::time::Instant::now();
        assert!(
            spooler
                .busy(None, Deadline::after(Duration::from_millis(deadline)))
                .await
        );
        within_a_tick(started.elapsed(), waited);
    }
}
