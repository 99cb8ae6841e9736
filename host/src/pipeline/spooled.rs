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
//! kept. The drainer replays queued batches through the normal write path,
//! without a deadline, and deletes each once Fluss took (or dead-lettered)
//! all of it. What is left at `close` stays on disk for the next `open`.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::{Held, HeldRows, Pipeline, PipelineError};
use crate::deadline::Deadline;
use crate::metrics::InstanceMetrics;
use crate::retry::Retries;
use crate::rows::DeadLetterKind;
use crate::schema::TablePath;
use crate::spool::journal::{Journal, RecordFile};
use crate::spool::record::SpooledBatch;
use crate::spool::{SpoolError, SpoolMode};
use crate::writer::WriteReport;

/// How often the spool's gauges are updated while the drainer waits.
const GAUGE_INTERVAL: Duration = Duration::from_secs(1);

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
    /// When it was queued.
    queued_at: SystemTime,
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
    started: Instant,
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
                queued_at: SystemTime::now(),
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
        };
        if !leftovers.is_empty() {
            tracing::info!(
                "spool {}: replaying {} batch(es) ({} bytes) left by an earlier process before new batches",
                dir.display(),
                leftovers.len(),
                spooler.journal.bytes()
            );
            spooler.start_episode();
        }
        *spooler.queue.try_lock().expect("nobody else holds a new queue") = leftovers;
        Ok(spooler)
    }

    /// The mode in force.
    pub(super) fn mode(&self) -> SpoolMode {
        self.mode
    }

    /// Whether batches must queue behind others now.
    pub(super) async fn busy(&self) -> bool {
        !self.queue.lock().await.is_empty()
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

    /// Queues a batch behind the others: made durable (waiting for room
    /// until `deadline`), then queued. An error means it is not in the spool.
    pub(super) async fn enqueue(&self, held: Held, deadline: Deadline) -> Result<(), SpoolError> {
        let file = self.journal(&held, deadline).await?;
        self.push(Entry {
            file: Some(file),
            attempt: None,
            held: None,
            queued_at: SystemTime::now(),
        })
        .await;
        Ok(())
    }

    /// Queues a batch whose first attempt passed its deadline, with its
    /// record (`None` when it could not be made durable: it is still
    /// awaited in order, but lost if the process ends first).
    pub(super) async fn enqueue_running(
        &self,
        held: Held,
        attempt: Attempt,
        file: Option<RecordFile>,
        why: &str,
    ) {
        if self.start_episode() {
            tracing::warn!(
                "table {} starts spooling to {}: {why}; newer batches queue behind it until Fluss has taken it",
                self.table,
                self.journal.dir().display()
            );
        }
        self.push(Entry {
            file,
            attempt: Some(attempt),
            held: Some(held),
            queued_at: SystemTime::now(),
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

    /// Starts an episode of spooling; whether none was running.
    fn start_episode(&self) -> bool {
        let mut episode = self.episode.lock().unwrap_or_else(|e| e.into_inner());
        if episode.is_some() {
            return false;
        }
        *episode = Some(Episode {
            started: Instant::now(),
            replayed: 0,
        });
        true
    }

    /// Updates the spool's gauges.
    async fn observe(&self) {
        let queue = self.queue.lock().await;
        let oldest = queue
            .front()
            .and_then(|e| e.queued_at.elapsed().ok())
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

impl Pipeline {
    /// Starts the drainer of this pipeline's spool, if it has one.
    pub(super) fn start_drainer(self: &Arc<Self>) {
        let Some(spooler) = &self.spooler else {
            return;
        };
        let this = self.clone();
        let span = tracing::Span::current();
        let task = tokio::spawn(tracing::Instrument::instrument(this.drain(), span));
        *spooler.drainer.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
    }

    /// Writes `held`'s batch, the spool's way: a first attempt without a
    /// deadline in a task of its own, awaited until `deadline`; past it, the
    /// batch is queued (made durable first) and `Ok` says it is safe.
    pub(super) async fn consume_spooled(
        self: &Arc<Self>,
        spooler: &Spooler,
        held: Held,
        deadline: Deadline,
    ) -> Result<WriteReport, PipelineError> {
        if spooler.busy().await {
            spooler.enqueue(held, deadline).await?;
            return Ok(WriteReport::default());
        }
        let journaled = match spooler.mode() {
            SpoolMode::Always => match spooler.journal(&held, deadline).await {
                Ok(file) => Some(file),
                Err(e) => {
                    tracing::error!("{e}: the batch is written without the spool's protection");
                    return self.write_held(held, deadline).await;
                }
            },
            _ => None,
        };
        let this = self.clone();
        let first = held.clone();
        let span = tracing::Span::current();
        let mut attempt = tokio::spawn(tracing::Instrument::instrument(
            async move { this.write_held(first, Deadline::unbounded()).await },
            span,
        ));
        tokio::select! {
            done = &mut attempt => {
                let written = done.unwrap_or_else(|e| Err(PipelineError::Worker {
                    step: "writing a batch",
                    source: e,
                }));
                if let Some(file) = journaled {
                    spooler.release(&file);
                }
                return written;
            }
            () = tokio::time::sleep_until(deadline.instant()) => {}
        }
        let why = format!(
            "Fluss did not acknowledge a batch of {} messages within delivery_timeout ({:?})",
            held.batch.len(),
            self.writer.settings().delivery_timeout
        );
        let file = match journaled {
            Some(file) => Ok(file),
            // The deadline has passed: room now or never.
            None => spooler.journal(&held, Deadline::after(Duration::ZERO)).await,
        };
        match file {
            Ok(file) => {
                spooler.enqueue_running(held, attempt, Some(file), &why).await;
                Ok(WriteReport::default())
            }
            Err(e) => {
                spooler.enqueue_running(held, attempt, None, &why).await;
                Err(e.into())
            }
        }
    }

    /// Replays the queue, oldest first, for as long as the instance is open.
    async fn drain(self: Arc<Self>) {
        let spooler = self.spooler.as_ref().expect("a drainer has a spool");
        // Replays retry until Fluss answers (an unbounded deadline has no
        // `max_retries`); the writes inside count their own retries.
        let mut retries = Retries::new(
            self.writer.settings().retry_policy(),
            "the spool's oldest batch",
            Deadline::unbounded(),
        );
        loop {
            let changed = spooler.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let front = {
                let mut queue = spooler.queue.lock().await;
                queue
                    .front_mut()
                    .map(|e| (e.attempt.take(), e.held.clone(), e.file.clone(), e.offsets()))
            };
            let Some((attempt, held, file, offsets)) = front else {
                self.drained(spooler);
                spooler.observe().await;
                changed.await;
                continue;
            };
            let written = match attempt {
                Some(task) => {
                    let awaited = async {
                        task.await.unwrap_or_else(|e| {
                            Err(PipelineError::Worker {
                                step: "writing a batch",
                                source: e,
                            })
                        })
                    };
                    observing(spooler, awaited).await
                }
                None => {
                    let held = match (held, &file) {
                        (Some(held), _) => held,
                        (None, Some(file)) => match spooler.journal.read(file) {
                            Ok(record) => Held::from_record(record),
                            Err(e) => {
                                tracing::error!("{e}");
                                self.pop_front(spooler, None).await;
                                continue;
                            }
                        },
                        (None, None) => unreachable!("an entry holds its batch or its record"),
                    };
                    observing(spooler, self.write_held(held, Deadline::unbounded())).await
                }
            };
            match written {
                Ok(report) => {
                    self.count(&report);
                    let messages = (report.written + report.filtered + report.dead_lettered) as u64;
                    self.metrics.spool_replayed(messages);
                    if let Some(e) = spooler.episode.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
                        e.replayed += messages;
                    }
                    self.pop_front(spooler, file.as_ref()).await;
                    retries.reset();
                }
                Err(e) => {
                    if self.dead_letter_if_table_gone(spooler, file.as_ref(), &e).await {
                        continue;
                    }
                    let failure = format!("replaying the spooled {offsets} failed: {e}");
                    retries.wait_after(0, &failure).await;
                }
            }
        }
    }

    /// Removes the queue's front entry (and its record).
    async fn pop_front(&self, spooler: &Spooler, file: Option<&RecordFile>) {
        spooler.queue.lock().await.pop_front();
        if let Some(file) = file {
            spooler.release(file);
        }
        spooler.changed.notify_waiters();
        spooler.observe().await;
    }

    /// When the sink's table is gone for good, dead-letters the front
    /// entry's messages (read back from its record) with `error` and drops
    /// it; whether it did.
    async fn dead_letter_if_table_gone(
        &self,
        spooler: &Spooler,
        file: Option<&RecordFile>,
        error: &PipelineError,
    ) -> bool {
        if !self.writer.table_is_gone(&self.table).await {
            return false;
        }
        let Some(file) = file else {
            return false;
        };
        let Ok(record) = spooler.journal.read(file) else {
            self.pop_front(spooler, None).await;
            return true;
        };
        let reason = format!("table {} no longer exists: {error}", self.table);
        let deadline = Deadline::after(self.writer.settings().delivery_timeout);
        match self
            .writer
            .dead_letter_batch(&record.batch, DeadLetterKind::Table, &reason, deadline)
            .await
        {
            Ok(()) => {
                tracing::error!(
                    "table {} is gone: the spooled {} were dead-lettered",
                    self.table,
                    file.offsets()
                );
                self.pop_front(spooler, Some(file)).await;
                true
            }
            Err(_) => false,
        }
    }

    /// The queue is empty: ends the spooling episode, if one ran.
    fn drained(&self, spooler: &Spooler) {
        if let Some(e) = spooler.episode.lock().unwrap_or_else(|e| e.into_inner()).take() {
            tracing::info!(
                "the spool of table {} has drained: {} spooled message(s) written in {:?}",
                self.table,
                e.replayed,
                e.started.elapsed()
            );
        }
    }
}

/// Runs `work`, updating the spool's gauges every [`GAUGE_INTERVAL`] meanwhile.
async fn observing<T>(spooler: &Spooler, work: impl Future<Output = T>) -> T {
    tokio::pin!(work);
    let mut tick = tokio::time::interval(GAUGE_INTERVAL);
    loop {
        tokio::select! {
            done = &mut work => return done,
            _ = tick.tick() => spooler.observe().await,
        }
    }
}
