//! The drainer: the task that replays the spool's queued batches, oldest
//! first, through the normal write path, and `consume`'s spooled way of
//! writing a batch (a first attempt awaited until its deadline, queued past
//! it).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::front::{Front, offsets_of};
use super::{GAUGE_INTERVAL, Spooler};
use crate::deadline::Deadline;
use crate::pipeline::{Held, Pipeline, PipelineError};
use crate::retry::Retries;
use crate::rows::DeadLetterKind;
use crate::spool::SpoolMode;
use crate::spool::journal::RecordFile;
use crate::writer::WriteReport;

impl Pipeline {
    /// Starts the drainer of this pipeline's spool, if it has one.
    pub(in crate::pipeline) fn start_drainer(self: &Arc<Self>) {
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
    pub(in crate::pipeline) async fn consume_spooled(
        self: &Arc<Self>,
        spooler: &Spooler,
        held: Held,
        deadline: Deadline,
    ) -> Result<WriteReport, PipelineError> {
        // Which tables the batch writes matters only while others are queued.
        let tables = match spooler.is_empty().await {
            true => None,
            false => self.tables_of(&held, true).await,
        };
        if spooler.busy(tables.as_ref(), deadline).await {
            spooler.enqueue(held, tables, deadline).await?;
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
        let sent = Instant::now();
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
        // Known already when others were queued; else as far as made by now.
        let tables = match tables {
            Some(tables) => Some(tables),
            None => self.tables_of(&held, false).await,
        };
        match file {
            Ok(file) => {
                spooler
                    .enqueue_running(held, tables, attempt, sent, Some(file), &why)
                    .await;
                Ok(WriteReport::default())
            }
            Err(e) => {
                spooler
                    .enqueue_running(held, tables, attempt, sent, None, &why)
                    .await;
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
            let started = Instant::now();
            // What was written, how many queue entries it was, their records.
            let (written, entries, files, offsets) = match spooler.front().await {
                Front::Empty => {
                    self.drained(spooler);
                    spooler.observe().await;
                    changed.await;
                    continue;
                }
                Front::Running(task, file, offsets) => {
                    let awaited = async {
                        task.await.unwrap_or_else(|e| {
                            Err(PipelineError::Worker {
                                step: "writing a batch",
                                source: e,
                            })
                        })
                    };
                    (
                        observing(spooler, awaited).await,
                        1,
                        Vec::from_iter(file),
                        offsets,
                    )
                }
                Front::Held(held, file, offsets) => {
                    let written = observing(spooler, self.write_held(held, Deadline::unbounded())).await;
                    (written, 1, Vec::from_iter(file), offsets)
                }
                Front::Records(mut files) => {
                    let (held, joined) = match spooler.read_joined(&files) {
                        Ok(read) => read,
                        Err(e) => {
                            tracing::error!("{e}");
                            self.pop_front(spooler, None).await;
                            continue;
                        }
                    };
                    files.truncate(joined);
                    let written = observing(spooler, self.write_held(held, Deadline::unbounded())).await;
                    let offsets = offsets_of(&files);
                    (written, joined, files, offsets)
                }
            };
            match written {
                Ok(report) => {
                    self.count(&report);
                    let messages = (report.written + report.filtered + report.dead_lettered) as u64;
                    tracing::debug!(
                        "the spooled {offsets} are in Fluss ({messages} messages, {:?})",
                        started.elapsed()
                    );
                    self.metrics.spool_replayed(messages);
                    if let Some(e) = spooler.episode.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
                        e.replayed += messages;
                    }
                    spooler.catching_up.store(true, Ordering::Relaxed);
                    self.pop_fronts(spooler, entries, &files).await;
                    retries.reset();
                }
                Err(e) => {
                    spooler.catching_up.store(false, Ordering::Relaxed);
                    if self.dead_letter_if_table_gone(spooler, &files, &e).await {
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
        self.pop_fronts(spooler, 1, Vec::from_iter(file.cloned()).as_slice())
            .await;
    }

    /// Removes the queue's `entries` front entries, and their records `files`.
    async fn pop_fronts(&self, spooler: &Spooler, entries: usize, files: &[RecordFile]) {
        {
            // `close` may have emptied the queue meanwhile.
            let mut queue = spooler.queue.lock().await;
            let entries = entries.min(queue.len());
            queue.drain(..entries);
        }
        for file in files {
            spooler.release(file);
        }
        spooler.changed.notify_waiters();
        spooler.observe().await;
    }

    /// When the sink's table is gone for good, dead-letters the messages of
    /// the front entries whose records are `files` (read back) with `error`
    /// and drops them; whether it did.
    async fn dead_letter_if_table_gone(
        &self,
        spooler: &Spooler,
        files: &[RecordFile],
        error: &PipelineError,
    ) -> bool {
        if files.is_empty() || !self.writer.table_is_gone(&self.table).await {
            return false;
        }
        let reason = format!("table {} no longer exists: {error}", self.table);
        for file in files {
            let Ok(record) = spooler.journal.read(file) else {
                self.pop_front(spooler, None).await;
                continue;
            };
            let deadline = Deadline::after(self.writer.settings().delivery_timeout);
            let lettered = self
                .writer
                .dead_letter_batch(&record.batch, DeadLetterKind::Table, &reason, deadline)
                .await;
            if lettered.is_err() {
                return false;
            }
            tracing::error!(
                "table {} is gone: the spooled {} were dead-lettered",
                self.table,
                file.offsets()
            );
            self.pop_front(spooler, Some(file)).await;
        }
        true
    }

    /// The queue is empty: ends the spooling episode, if one ran.
    fn drained(&self, spooler: &Spooler) {
        if let Some(e) = spooler.episode.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let took = e.started.elapsed();
            self.metrics.spool_recovered(took);
            tracing::info!(
                "the spool of table {} has drained: {} spooled message(s) written; recovered in {took:.1?} \
                 since {}",
                self.table,
                e.replayed,
                e.since
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
