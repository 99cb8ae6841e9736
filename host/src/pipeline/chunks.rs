//! The lean path's chunks of a batch: the first made on the writer's own
//! thread, the next ones on the blocking pool meanwhile, as many at once as
//! there are cores (at most 4), all handed to the writer in message order:
//! chunk i is sent while chunks i+1… are still being made, and no bucket
//! sees its rows out of order.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::task::JoinHandle;

use super::stage::RowStage;
use crate::batch::{MessageBatch, PayloadSchema};
use crate::rows::MessageOutcome;
use crate::rows::columns::ColumnOutput;
use crate::writer::MadeChunks;

/// The chunks of one batch, made ahead, in order.
pub(super) struct ColumnChunks {
    stage: Arc<RowStage>,
    batch: Arc<MessageBatch>,
    schema: PayloadSchema,
    size: usize,
    at_once: usize,
    /// The first message of the next chunk to start.
    next: usize,
    /// Chunks being made, oldest first, with their message counts.
    running: VecDeque<(usize, JoinHandle<ColumnOutput>)>,
    span: tracing::Span,
}

impl ColumnChunks {
    /// `batch` (payloads of the runtime's `schema`) in chunks of `size`
    /// messages, made by `stage` (the lean path's).
    pub(super) fn new(
        stage: Arc<RowStage>,
        batch: Arc<MessageBatch>,
        schema: PayloadSchema,
        size: usize,
    ) -> Self {
        let at_once = super::chunks_at_once();
        Self {
            stage,
            batch,
            schema,
            size: size.max(1),
            at_once,
            next: 0,
            running: VecDeque::new(),
            span: tracing::Span::current(),
        }
    }

    fn start_next(&mut self) {
        let range = self.next..(self.next + self.size).min(self.batch.len());
        self.next = range.end;
        let (stage, batch, schema, span) = (
            self.stage.clone(),
            self.batch.clone(),
            self.schema,
            self.span.clone(),
        );
        let len = range.len();
        let task = tokio::task::spawn_blocking(move || {
            span.in_scope(|| {
                let chunk = batch.slice(range);
                stage
                    .column_chunk(schema, &chunk)
                    .expect("the lean path's stage makes columns")
            })
        });
        self.running.push_back((len, task));
    }

    /// Starts the next chunks until `count` are running or none is left.
    fn start_until_running(&mut self, count: usize) {
        while self.running.len() < count && self.next < self.batch.len() {
            self.start_next();
        }
    }
}

impl Iterator for ColumnChunks {
    type Item = ColumnOutput;

    /// The next chunk's columns. Blocks this thread until they are made:
    /// call it where blocking is allowed (the writer's `block_in_place`).
    fn next(&mut self) -> Option<ColumnOutput> {
        if self.next == 0 {
            return self.first();
        }
        self.start_until_running(self.at_once);
        let (len, task) = self.running.pop_front()?;
        let made = tokio::runtime::Handle::current().block_on(task);
        Some(made.unwrap_or_else(|e| ColumnOutput {
            outcomes: vec![MessageOutcome::DeadLetter(format!("internal error: making rows: {e}")); len],
            ..ColumnOutput::default()
        }))
    }
}

impl ColumnChunks {
    /// The first chunk, made on this thread while the pool starts on the
    /// next ones: handing it to the pool and waking this thread again
    /// would cost more than making it (two thread wake-ups, ~80 µs a
    /// consume on this project's machine, against ~90 µs to make 500
    /// small messages).
    fn first(&mut self) -> Option<ColumnOutput> {
        if self.batch.is_empty() {
            return None;
        }
        let first = 0..self.size.min(self.batch.len());
        self.next = first.end;
        self.start_until_running(self.at_once - 1);
        let made = if first.len() == self.batch.len() {
            self.stage.column_chunk(self.schema, &self.batch)
        } else {
            self.stage.column_chunk(self.schema, &self.batch.slice(first))
        };
        Some(made.expect("the lean path's stage makes columns"))
    }
}

impl MadeChunks for ColumnChunks {
    fn next_is_made(&self) -> bool {
        match self.running.front() {
            Some((_, task)) => task.is_finished(),
            // The first chunk, made on the caller's thread; or the end.
            None => self.next == 0 || self.next >= self.batch.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use fluss_row_codec::RowKind;

    use super::*;
    use crate::batch::Source;
    use crate::rows::json::{ColumnMapping, JsonMapping};
    use crate::schema::{Column, DataType, TablePath, TableSchema};
    use crate::writer::arrow_schema_of;

    fn lean_stage() -> Arc<RowStage> {
        let schema = TableSchema {
            path: TablePath::new("db", "t"),
            columns: vec![Column::new("v", DataType::Int, true)],
            primary_key: vec![],
            partition_keys: vec![],
        };
        let arrow_schema = arrow_schema_of(&schema).unwrap();
        let mapping = JsonMapping::new(&schema, RowKind::Append);
        Arc::new(RowStage::JsonColumns(ColumnMapping::new(
            mapping,
            schema,
            arrow_schema,
            false,
        )))
    }

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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_chunk_is_made_once_its_task_has_ended_and_the_end_at_once() {
        let mut chunks = ColumnChunks::new(lean_stage(), batch(7), PayloadSchema::Json, 2);
        assert!(
            chunks.next_is_made(),
            "the first chunk is made on the caller's thread"
        );
        assert!(
            chunks.running.is_empty(),
            "no chunk started before the first is asked for"
        );
        tokio::task::block_in_place(|| {
            let mut sizes = vec![chunks.next().unwrap().outcomes.len()];
            assert_eq!(
                chunks.running.len(),
                chunks.at_once - 1,
                "the pool made the next chunks while this thread made the first"
            );
            loop {
                let started = Instant::now();
                while !chunks.next_is_made() {
                    assert!(started.elapsed() < Duration::from_secs(10), "never made");
                    std::thread::yield_now();
                }
                match chunks.next() {
                    Some(chunk) => sizes.push(chunk.outcomes.len()),
                    None => break,
                }
            }
            assert_eq!(sizes, [2, 2, 2, 1], "every chunk, in order");
        });
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_of_one_chunk_is_made_at_once() {
        let mut chunks = ColumnChunks::new(lean_stage(), batch(2), PayloadSchema::Json, 2);
        assert!(chunks.next_is_made());
        assert_eq!(chunks.next().map(|c| c.outcomes.len()), Some(2));
        assert!(chunks.next_is_made());
        assert!(chunks.next().is_none());
    }
}
