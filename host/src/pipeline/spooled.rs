//! The pipeline's side of the spool ([`crate::spool`]): which batches go
//! there, the drainer that replays them, and what `close` leaves on disk.
//!
//! A batch's first attempt runs without a deadline of its own in a task of
//! its own; `consume` waits for it until `delivery_timeout`. When that
//! passes first, the batch is made durable (`on_failure`; `always` did so
//! before the attempt) and queued, and `consume` returns `0`. The attempt
//! goes on: the drainer awaits it before anything else, so rows the client
//! still sends after the deadline are settled once, never replayed. While
//! the queue holds anything, newer batches are made durable and queued
//! behind it, oldest first, so that the order of every table and key is
//! kept; a batch for tables no queued batch writes is written at once
//! (`tables`), so that one table's trouble does not stall the others. The
//! drainer replays queued batches through the normal write path,
//! without a deadline, and deletes each once Fluss took (or dead-lettered)
//! all of it. What is left at `close` stays on disk for the next `open`.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::{Held, HeldRows, PipelineError};
use crate::deadline::Deadline;
use crate::metrics::InstanceMetrics;
use crate::schema::TablePath;
use crate::spool::journal::{Journal, RecordFile};
use crate::spool::record::SpooledBatch;
use crate::spool::{SpoolError, SpoolMode};
use crate::writer::WriteReport;

mod drainer;
mod front;
mod tables;

pub(super) use tables::Tables;

/// How often the spool's gauges are updated while the drainer waits.
const GAUGE_INTERVAL: Duration = Duration::from_secs(1);

/// The longest a new batch waits for a catching-up drainer to empty the
/// queue before it is queued (never more than half its deadline).
const CATCH_UP_WAIT: Duration = Duration::from_secs(1);

/// A first attempt at a batch, running in a task of its own.
type Attempt = JoinHandle<Result<WriteReport, PipelineError>>;

/// One batch in the queue.
struct Entry {
    /// Its record on disk (`None`: it could not be made durable).
    file: Option<RecordFile>,
    /// Its first attempt, still running.
    attempt: Option<Attempt>,
    /// The batch in memory, while its first attempt runs; else read back.
    held: Option<Held>,
    /// When its oldest message was produced (its Iggy timestamp), or when
    /// it was queued when that is not known (a record left by an earlier
    /// process, a timestamp of 0 or in the future).
    oldest: SystemTime,
    /// The tables its rows go to (`None`: not known, taken to be all).
    tables: Option<Tables>,
}

impl Entry {
    fn offsets(&self) -> String {
        match (&self.file, &self.held) {
            (Some(f), _) => f.offsets(),
            (None, Some(h)) => {
                let b = &h.batch;
                format!(
                    "offsets {}..={} of partition {}",
                    b.get(0).offset,
                    b.get(b.len() - 1).offset,
                    b.source.partition
                )
            }
            (None, None) => "a batch".into(),
        }
    }
}

/// Spooling that started and has not drained yet.
struct Episode {
    /// When the first write it took over was sent (or the instance opened,
    /// for batches left by an earlier process).
    started: Instant,
    /// What `started` is, for the drain line.
    since: &'static str,
    replayed: u64,
}

/// The queue of spooled batches of one instance, and its journal.
pub(super) struct Spooler {
    mode: SpoolMode,
    journal: Arc<Journal>,
    table: TablePath,
    metrics: Arc<InstanceMetrics>,
    queue: tokio::sync::Mutex<VecDeque<Entry>>,
    /// A batch was queued or one left the queue.
    changed: Notify,
    episode: std::sync::Mutex<Option<Episode>>,
    drainer: std::sync::Mutex<Option<JoinHandle<()>>>,
    /// The drainer's last write was taken: it is catching up, and the
    /// queue is about to be empty.
    catching_up: AtomicBool,
}

impl Spooler {
    /// Opens (and locks) the spool folder of `table`; leftovers of an
    /// earlier process are queued first.
    pub(super) fn open(
        mode: SpoolMode,
        dir: &std::path::Path,
        max_bytes: u64,
        table: TablePath,
        metrics: Arc<InstanceMetrics>,
    ) -> Result<Self, SpoolError> {
        let opened = Journal::open(dir, max_bytes)?;
        let leftovers: VecDeque<Entry> = opened
            .leftovers
            .into_iter()
            .map(|file| Entry {
                file: Some(file),
                attempt: None,
                held: None,
                oldest: SystemTime::now(),
                tables: None,
            })
            .collect();
        let spooler = Self {
            mode,
            journal: Arc::new(opened.journal),
            table,
            metrics,
            queue: tokio::sync::Mutex::new(VecDeque::new()),
            changed: Notify::new(),
            episode: std::sync::Mutex::new(None),
            drainer: std::sync::Mutex::new(None),
            catching_up: AtomicBool::new(false),
        };
        if !leftovers.is_empty() {
            tracing::info!(
                "spool {}: replaying {} batch(es) ({} bytes) left by an earlier process before new batches",
                dir.display(),
                leftovers.len(),
                spooler.journal.bytes()
            );
            spooler.start_episode(
                Instant::now(),
                "the instance opened with batches left by an earlier process",
            );
        }
        *spooler.queue.try_lock().expect("nobody else holds a new queue") = leftovers;
        Ok(spooler)
    }

    /// The mode in force.
    pub(super) fn mode(&self) -> SpoolMode {
        self.mode
    }

    /// Whether the queue holds no batch.
    pub(super) async fn is_empty(&self) -> bool {
        self.queue.lock().await.is_empty()
    }

    /// Whether a batch writing `tables` must queue behind others now: the
    /// queue holds a batch that may write one of them. While the drainer is
    /// catching up (its last write was taken), this waits for the queue to
    /// empty until `deadline` (at most [`CATCH_UP_WAIT`]), so that writing
    /// goes back to the direct way as soon as the backlog is in Fluss
    /// instead of queuing every new batch behind the one being replayed.
    pub(super) async fn busy(&self, tables: Option<&Tables>, deadline: Deadline) -> bool {
        let wait = deadline.at_most(CATCH_UP_WAIT.min(deadline.remaining() / 2));
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let queue = self.queue.lock().await;
                if queue.is_empty() || tables::apart_from(&queue, tables) {
                    return false;
                }
            }
            if !self.catching_up.load(Ordering::Relaxed) || wait.run(changed).await.is_err() {
                return true;
            }
        }
    }

    /// Makes `held` durable: waits for room until `deadline`, then writes
    /// its record (on a blocking thread).
    pub(super) async fn journal(&self, held: &Held, deadline: Deadline) -> Result<RecordFile, SpoolError> {
        let rows = match &held.rows {
            None => None,
            Some((HeldRows::Made(output), kind)) => Some(((**output).clone(), *kind)),
            // Rows that could not all be made are made again at replay.
            Some((HeldRows::Making(making), kind)) => making.whole().await.ok().map(|o| (o, *kind)),
        };
        let record = SpooledBatch {
            spooled_at_micros: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as u64),
            schema: held.schema,
            batch: (*held.batch).clone(),
            rows_made_for: rows.as_ref().and(held.rows_made_for),
            rows,
        };
        let b = &held.batch;
        let (partition, first, last) = (b.source.partition, b.get(0).offset, b.get(b.len() - 1).offset);
        let journal = self.journal.clone();
        let encoded = tokio::task::spawn_blocking(move || record.encode())
            .await
            .map_err(|e| SpoolError::Folder {
                dir: journal.dir().to_path_buf(),
                source: std::io::Error::other(e.to_string()),
            })?;
        self.wait_for_room(encoded.len() as u64, deadline).await?;
        let journal = self.journal.clone();
        let written =
            tokio::task::spawn_blocking(move || journal.append(&encoded, partition, first, last)).await;
        let file = written.map_err(|e| SpoolError::Folder {
            dir: self.journal.dir().to_path_buf(),
            source: std::io::Error::other(e.to_string()),
        })??;
        self.observe().await;
        Ok(file)
    }

    async fn wait_for_room(&self, bytes: u64, deadline: Deadline) -> Result<(), SpoolError> {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.journal.has_room(bytes) {
                return Ok(());
            }
            if deadline.run(changed).await.is_err() {
                self.metrics.spool_full();
                let e = SpoolError::Full {
                    bytes: self.journal.bytes(),
                    max: self.journal.max_bytes(),
                };
                tracing::error!("spool {}: {e}", self.journal.dir().display());
                return Err(e);
            }
        }
    }

    /// Queues a batch writing `tables` behind the others: made durable
    /// (waiting for room until `deadline`), then queued. An error means it
    /// is not in the spool.
    pub(super) async fn enqueue(
        &self,
        held: Held,
        tables: Option<Tables>,
        deadline: Deadline,
    ) -> Result<(), SpoolError> {
        let file = self.journal(&held, deadline).await?;
        self.push(Entry {
            file: Some(file),
            attempt: None,
            oldest: oldest_message(&held),
            held: None,
            tables,
        })
        .await;
        Ok(())
    }

    /// Queues a batch writing `tables` whose first attempt passed its
    /// deadline, with its record (`None` when it could not be made durable:
    /// it is still awaited in order, but lost if the process ends first).
    pub(super) async fn enqueue_running(
        &self,
        held: Held,
        tables: Option<Tables>,
        attempt: Attempt,
        sent: Instant,
        file: Option<RecordFile>,
        why: &str,
    ) {
        if self.start_episode(sent, "the first write Fluss did not acknowledge in time was sent") {
            tracing::warn!(
                "table {} starts spooling to {}: {why}; newer batches for its tables queue behind it until Fluss has taken it",
                self.table,
                self.journal.dir().display()
            );
        }
        self.push(Entry {
            file,
            attempt: Some(attempt),
            oldest: oldest_message(&held),
            held: Some(held),
            tables,
        })
        .await;
    }

    /// Deletes the record of a batch written in time (`always`).
    pub(super) fn release(&self, file: &RecordFile) {
        self.journal.release(file);
    }

    async fn push(&self, entry: Entry) {
        self.queue.lock().await.push_back(entry);
        self.changed.notify_waiters();
        self.observe().await;
    }

    /// Starts an episode of spooling whose first write was sent at
    /// `started`; whether none was running.
    fn start_episode(&self, started: Instant, since: &'static str) -> bool {
        self.catching_up.store(false, Ordering::Relaxed);
        let mut episode = self.episode.lock().unwrap_or_else(|e| e.into_inner());
        if episode.is_some() {
            return false;
        }
        *episode = Some(Episode {
            started,
            since,
            replayed: 0,
        });
        true
    }

    /// Updates the spool's gauges.
    async fn observe(&self) {
        let queue = self.queue.lock().await;
        let oldest = queue
            .front()
            .and_then(|e| e.oldest.elapsed().ok())
            .unwrap_or_default();
        self.metrics
            .spool_state(self.journal.bytes(), queue.len(), oldest.as_secs_f64());
    }

    /// Stops the drainer once the queue is empty or `timeout` passed;
    /// what is left stays on disk for the next open. Gives the folder up.
    pub(super) async fn close(&self, timeout: Duration) {
        let deadline = Deadline::after(timeout);
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.queue.lock().await.is_empty() || deadline.run(changed).await.is_err() {
                break;
            }
        }
        if let Some(drainer) = self.drainer.lock().unwrap_or_else(|e| e.into_inner()).take() {
            drainer.abort();
        }
        let mut queue = self.queue.lock().await;
        let (mut kept, mut lost) = (0, Vec::new());
        for entry in queue.drain(..) {
            if let Some(attempt) = &entry.attempt {
                attempt.abort();
            }
            match entry.file {
                Some(_) => kept += 1,
                None => lost.push(entry.offsets()),
            }
        }
        if kept > 0 {
            tracing::info!(
                "spool {}: {kept} batch(es) ({} bytes) not yet in Fluss stay on disk; the next open replays them first",
                self.journal.dir().display(),
                self.journal.bytes()
            );
        }
        for offsets in lost {
            tracing::error!(
                "messages at {offsets} of table {} may not be in Fluss: the instance closed before Fluss took them, \
                 and they could not be spooled",
                self.table
            );
        }
        self.journal.unlock();
    }
}

/// When the oldest message of `held` was produced, by its Iggy timestamp
/// (microseconds since the epoch); now when that is 0 or in the future.
fn oldest_message(held: &Held) -> SystemTime {
    let now = SystemTime::now();
    let produced = held.batch.iter().map(|m| m.timestamp).filter(|t| *t > 0).min();
    produced
        .map(|micros| SystemTime::UNIX_EPOCH + Duration::from_micros(micros))
        .filter(|at| *at <= now)
        .unwrap_or(now)
}

#[cfg(test)]
pub(super) mod tests;
