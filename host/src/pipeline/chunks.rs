//! The one scheduler of a batch's chunks: the batch is cut into chunks of
//! `batch_size` messages, each made by one task on the blocking pool, at
//! most as many at once as there are cores (at most 4), and taken in
//! message order as each is made, while the next ones are being made: a
//! chunk starts whenever a running one ends, in whatever order they end.
//! Every producer of rows goes through it: the JSON mapping's Arrow
//! columns and keyed rows, and a transform's rows (see `making`).

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::{JoinError, JoinHandle};

use crate::batch::MessageBatch;
use crate::rows::MessageOutcome;
use crate::rows::columns::ColumnOutput;
use crate::writer::MadeChunks;

/// How a batch's chunk is made: CPU work, on the blocking pool.
type Make<T> = dyn Fn(&MessageBatch) -> T + Send + Sync;

/// A chunk whose task ended without making it (it panicked).
#[derive(Debug)]
pub(super) struct ChunkLost {
    /// The chunk's messages, by index in the batch.
    pub messages: Range<usize>,
    /// How its task ended.
    pub source: JoinError,
}

/// How many chunks a [`ChunkStream`] of `messages` in chunks of `size` has.
pub(super) fn chunk_count(messages: usize, size: usize) -> usize {
    messages.div_ceil(size.max(1))
}

/// The chunks of one batch, made ahead on the blocking pool, taken in order.
/// A chunk starts as soon as one of the running ones ends (whichever it is)
/// while its taker waits, so that no core idles behind a slow chunk.
pub(super) struct ChunkStream<T> {
    batch: Arc<MessageBatch>,
    make: Arc<Make<T>>,
    size: usize,
    /// One permit a running chunk, held by its task until it ends.
    running: Arc<Semaphore>,
    /// The first message of the next chunk to start.
    next: usize,
    /// Whether the first chunk is made by the task that takes it.
    first_here: bool,
    /// Chunks started and not taken yet, oldest first.
    started: VecDeque<(Range<usize>, JoinHandle<T>)>,
    span: tracing::Span,
}

impl<T: Send + 'static> ChunkStream<T> {
    /// `batch` in chunks of `size` messages, each made by `make`. Nothing
    /// starts before the first chunk is asked for.
    pub(super) fn new(
        batch: Arc<MessageBatch>,
        size: usize,
        make: impl Fn(&MessageBatch) -> T + Send + Sync + 'static,
    ) -> Self {
        Self {
            batch,
            make: Arc::new(make),
            size: size.max(1),
            running: Arc::new(Semaphore::new(super::chunks_at_once())),
            next: 0,
            first_here: false,
            started: VecDeque::new(),
            span: tracing::Span::current(),
        }
    }

    /// The first chunk made by the task that asks for it, while the pool
    /// starts on the next ones: for chunks so quick to make that handing the
    /// first to the pool and waking the caller again costs more than making
    /// it (two thread wake-ups against a few hundred small messages mapped).
    pub(super) fn first_here(mut self) -> Self {
        self.first_here = true;
        self
    }

    /// At most `count` chunks made at once (instead of one a core).
    #[cfg(test)]
    fn at_most(mut self, count: usize) -> Self {
        self.running = Arc::new(Semaphore::new(count));
        self
    }

    /// The next chunk once it is made; `None` at the end. While it waits,
    /// the next chunks start as running ones end.
    pub(super) async fn next(&mut self) -> Option<Result<T, ChunkLost>> {
        if self.first_here && self.next == 0 {
            return self.first();
        }
        loop {
            self.start_while_cores_are_free(usize::MAX);
            let more = self.next < self.batch.len();
            let (_, front) = self.started.front_mut()?;
            if more {
                tokio::select! {
                    biased;
                    made = front => return Some(self.taken(made)),
                    permit = self.running.clone().acquire_owned() => {
                        self.start(permit.expect("the semaphore is never closed"));
                    }
                }
            } else {
                let made = front.await;
                return Some(self.taken(made));
            }
        }
    }

    /// Whether the next chunk (or the end) can be taken without waiting.
    pub(super) fn next_is_made(&self) -> bool {
        match self.started.front() {
            Some((_, task)) => task.is_finished(),
            None => (self.first_here && self.next == 0) || self.next >= self.batch.len(),
        }
    }

    /// The oldest chunk started, now `made`, taken off the queue.
    fn taken(&mut self, made: Result<T, JoinError>) -> Result<T, ChunkLost> {
        let (messages, _) = self.started.pop_front().expect("the chunk just awaited");
        made.map_err(|source| ChunkLost { messages, source })
    }

    fn first(&mut self) -> Option<Result<T, ChunkLost>> {
        if self.batch.is_empty() {
            return None;
        }
        let first = 0..self.size.min(self.batch.len());
        self.next = first.end;
        // This task makes the first chunk on a core of its own.
        self.start_while_cores_are_free(self.running.available_permits().saturating_sub(1));
        let made = if first.len() == self.batch.len() {
            (self.make)(&self.batch)
        } else {
            (self.make)(&self.batch.slice(first))
        };
        Some(Ok(made))
    }

    /// Starts the next chunks, at most `count`, while a core is free.
    fn start_while_cores_are_free(&mut self, count: usize) {
        for _ in 0..count {
            if self.next >= self.batch.len() {
                return;
            }
            match self.running.clone().try_acquire_owned() {
                Ok(permit) => self.start(permit),
                Err(_) => return,
            }
        }
    }

    /// Starts the next chunk on the blocking pool, holding `permit` until
    /// it is made.
    fn start(&mut self, permit: OwnedSemaphorePermit) {
        let messages = self.next..(self.next + self.size).min(self.batch.len());
        self.next = messages.end;
        let (batch, make, span) = (self.batch.clone(), self.make.clone(), self.span.clone());
        let range = messages.clone();
        let task = tokio::task::spawn_blocking(move || {
            let _running = permit;
            span.in_scope(|| {
                if range.len() == batch.len() {
                    make(&batch)
                } else {
                    make(&batch.slice(range))
                }
            })
        });
        self.started.push_back((messages, task));
    }
}

/// The JSON mapping's Arrow columns, chunk by chunk: a chunk whose task was
/// lost dead-letters its messages.
impl MadeChunks for ChunkStream<ColumnOutput> {
    type Chunk = ColumnOutput;

    async fn next_chunk(&mut self) -> Option<ColumnOutput> {
        Some(self.next().await?.unwrap_or_else(|lost| ColumnOutput {
            outcomes: vec![
                MessageOutcome::DeadLetter(format!("internal error: making rows: {}", lost.source));
                lost.messages.len()
            ],
            ..ColumnOutput::default()
        }))
    }

    fn next_is_made(&self) -> bool {
        ChunkStream::next_is_made(self)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    use super::*;
    use crate::batch::Source;

    fn batch(count: usize) -> Arc<MessageBatch> {
        let mut batch = MessageBatch::new(Source::default());
        for i in 0..count {
            let payload = format!(r#"{{"v":{i}}}"#);
            batch
                .push(i as u64, i as u128, 0, payload.as_bytes(), [])
                .unwrap();
        }
        Arc::new(batch)
    }

    /// The offsets of a chunk's messages.
    fn offsets(chunk: &MessageBatch) -> Vec<u64> {
        (0..chunk.len()).map(|i| chunk.get(i).offset).collect()
    }

    async fn wait_until_made<T: Send + 'static>(chunks: &ChunkStream<T>) {
        let started = Instant::now();
        while !chunks.next_is_made() {
            assert!(started.elapsed() < Duration::from_secs(10), "never made");
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn chunks_come_in_message_order_however_long_each_takes() {
        // The first chunk takes longest: the later ones finish first.
        let (running, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (r, m) = (running.clone(), most.clone());
        let mut chunks = ChunkStream::new(batch(7), 2, move |chunk| {
            m.fetch_max(r.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
            // Every chunk takes a while, so that a third allowed at once
            // would overlap the two running.
            let ms = if chunk.get(0).offset == 0 { 50 } else { 20 };
            std::thread::sleep(Duration::from_millis(ms));
            r.fetch_sub(1, Ordering::SeqCst);
            offsets(chunk)
        })
        .at_most(2);
        assert!(!chunks.next_is_made(), "nothing made before it is asked for");
        let mut taken = Vec::new();
        while let Some(chunk) = chunks.next().await {
            taken.push(chunk.unwrap());
        }
        assert_eq!(taken, [vec![0, 1], vec![2, 3], vec![4, 5], vec![6]]);
        assert_eq!(
            most.load(Ordering::SeqCst),
            2,
            "never more running at once than allowed"
        );
        assert!(chunks.next_is_made(), "the end is there at once");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slow_chunk_keeps_no_core_idle() {
        // Two at once; the first chunk is held until every other one is made.
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let wait = std::sync::Mutex::new(wait);
        let made = Arc::new(AtomicUsize::new(0));
        let counted = made.clone();
        let mut chunks = ChunkStream::new(batch(5), 1, move |chunk| {
            if chunk.get(0).offset == 0 {
                wait.lock().unwrap().recv().unwrap();
            }
            counted.fetch_add(1, Ordering::SeqCst);
            chunk.get(0).offset
        })
        .at_most(2);
        let taker = tokio::spawn(async move {
            let mut taken = Vec::new();
            while let Some(chunk) = chunks.next().await {
                taken.push(chunk.unwrap());
            }
            taken
        });
        let started = Instant::now();
        while made.load(Ordering::SeqCst) < 4 {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "chunks 2-4 waited for chunk 0: {} made",
                made.load(Ordering::SeqCst)
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        release.send(()).unwrap();
        assert_eq!(taker.await.unwrap(), [0, 1, 2, 3, 4], "still taken in order");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_first_chunk_is_made_here_while_the_pool_makes_the_next() {
        let caller = std::thread::current().id();
        let mut chunks = ChunkStream::new(batch(7), 2, move |chunk| {
            (chunk.get(0).offset, std::thread::current().id() == caller)
        })
        .first_here()
        .at_most(2);
        assert!(chunks.next_is_made(), "the first chunk is made by its taker");
        assert!(
            chunks.started.is_empty(),
            "nothing started before it is asked for"
        );
        assert_eq!(chunks.next().await.unwrap().unwrap(), (0, true));
        assert_eq!(chunks.started.len(), 1, "the pool makes the next chunk meanwhile");
        let mut rest = Vec::new();
        loop {
            wait_until_made(&chunks).await;
            match chunks.next().await {
                Some(chunk) => rest.push(chunk.unwrap()),
                None => break,
            }
        }
        assert_eq!(
            rest,
            [(2, false), (4, false), (6, false)],
            "in order, on the pool"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_chunk_still_being_made_is_not_made() {
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let wait = std::sync::Mutex::new(wait);
        let mut chunks = ChunkStream::new(batch(4), 2, move |chunk| {
            if chunk.get(0).offset == 2 {
                wait.lock().unwrap().recv().unwrap();
            }
            chunk.len()
        });
        assert_eq!(chunks.next().await.unwrap().unwrap(), 2);
        assert!(!chunks.next_is_made(), "the second chunk waits to be released");
        release.send(()).unwrap();
        wait_until_made(&chunks).await;
        assert_eq!(chunks.next().await.unwrap().unwrap(), 2);
        assert!(chunks.next().await.is_none());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_chunk_whose_task_panicked_dead_letters_its_messages_only() {
        let mut chunks = ChunkStream::new(batch(5), 2, |chunk| {
            assert_ne!(chunk.get(0).offset, 2, "a bug in making the second chunk");
            ColumnOutput {
                outcomes: vec![MessageOutcome::Rows(1); chunk.len()],
                ..ColumnOutput::default()
            }
        });
        let mut outcomes = Vec::new();
        while let Some(chunk) = chunks.next_chunk().await {
            outcomes.extend(chunk.outcomes);
        }
        assert_eq!(outcomes.len(), 5, "one outcome per message");
        let lost: Vec<usize> = (0..5)
            .filter(|&i| matches!(&outcomes[i], MessageOutcome::DeadLetter(r) if r.contains("internal error: making rows")))
            .collect();
        assert_eq!(lost, [2, 3], "the second chunk's messages, and only them");
    }
}
