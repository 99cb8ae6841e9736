//! A batch's rows in the making: the batch's chunks (one transform call
//! each) made by the one scheduler ([`super::chunks::ChunkStream`]) from a
//! task of their own, so that they are made whoever waits for them. The
//! writer takes each chunk as soon as it is made, while the next ones are
//! still being made; the spool takes the whole once every chunk is; a
//! replay takes the same chunks again. Given the writer's finisher, each
//! task also makes its chunk's rows into the columns the table takes,
//! beside the transform call, so that the writer only sends them.

use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use tokio::sync::oneshot;

use super::PipelineError;
use super::chunks::{ChunkStream, chunk_count};
use super::stage::RowStage;
use crate::batch::{MessageBatch, PayloadSchema};
use crate::metrics::InstanceMetrics;
use crate::rows::TransformOutput;
use crate::writer::{ChunkFinisher, MadeChunks, TransformedChunk};

/// One chunk's rows once made, or why they could not be.
type ChunkRows = Result<Arc<TransformedChunk>, Arc<PipelineError>>;

/// The rows of one batch, chunk by chunk, made or being made.
pub(super) struct RowsInMaking {
    chunks: Vec<Shared<BoxFuture<'static, ChunkRows>>>,
}

impl RowsInMaking {
    /// Starts making the rows of `batch` (payloads of the runtime's
    /// `schema`) with `stage`, in chunks of `size` messages, each finished
    /// by `finisher` when there is one; each call is timed in `metrics`,
    /// and the faults of the whole batch counted there once every chunk is
    /// made. Must be called within the runtime.
    pub(super) fn start(
        stage: Arc<RowStage>,
        batch: &Arc<MessageBatch>,
        schema: PayloadSchema,
        size: usize,
        finisher: Option<ChunkFinisher>,
        metrics: Arc<InstanceMetrics>,
    ) -> Self {
        let faults_before = stage.faults();
        let mut senders = Vec::new();
        let mut chunks = Vec::new();
        for _ in 0..chunk_count(batch.len(), size) {
            let (sender, receiver) = oneshot::channel::<ChunkRows>();
            senders.push(sender);
            let rows = receiver.map(|r| r.unwrap_or_else(|_| Err(Arc::new(gone()))));
            chunks.push(rows.boxed().shared());
        }
        let making = {
            let (stage, metrics) = (stage.clone(), metrics.clone());
            move |chunk: &MessageBatch| {
                let started = Instant::now();
                let rows = stage.finished_rows(schema, chunk, finisher.as_ref());
                if let RowStage::Wasm(_) = *stage {
                    metrics.transform_call(started.elapsed());
                }
                rows
            }
        };
        let mut stream = ChunkStream::new(batch.clone(), size, making);
        tokio::spawn(async move {
            for sender in senders {
                let rows = match stream.next().await {
                    Some(Ok(Ok(rows))) => Ok(Arc::new(rows)),
                    Some(Ok(Err(e))) => Err(Arc::new(PipelineError::from(e))),
                    Some(Err(lost)) => Err(Arc::new(PipelineError::Worker {
                        step: "making rows",
                        source: lost.source,
                    })),
                    None => break,
                };
                let _ = sender.send(rows);
            }
            metrics.transform_faults(stage.faults().saturating_sub(faults_before));
        });
        Self { chunks }
    }

    /// Each chunk's rows in order, as each is made. Ends at the first chunk
    /// that could not be made, leaving why in `failure`.
    pub(super) fn in_order<'a>(&'a self, failure: &'a mut Option<Arc<PipelineError>>) -> InOrder<'a> {
        InOrder {
            chunks: &self.chunks,
            next: 0,
            failure,
        }
    }

    /// Whether every chunk has been tried and one could not be made.
    pub(super) fn failed(&self) -> bool {
        self.chunks.iter().any(|c| matches!(c.peek(), Some(Err(_))))
    }

    /// The names of the tables the rows go to (`sink` for the sink's own),
    /// when every chunk is made by now; `None` while one is not, or when
    /// one could not be made.
    pub(super) fn table_names_if_made(&self, sink: &str) -> Option<std::collections::BTreeSet<String>> {
        let mut names = std::collections::BTreeSet::new();
        for chunk in &self.chunks {
            match chunk.peek() {
                Some(Ok(made)) => names.extend(made.rows.table_names(sink)),
                _ => return None,
            }
        }
        Some(names)
    }

    /// Every chunk's rows joined, once all are made.
    pub(super) async fn whole(&self) -> Result<TransformOutput, Arc<PipelineError>> {
        let mut output = TransformOutput::default();
        for chunk in &self.chunks {
            output.append_copy(&chunk.clone().await?.rows);
        }
        Ok(output)
    }
}

/// A batch's chunks of rows taken in order as each is made (see
/// [`RowsInMaking::in_order`]).
pub(super) struct InOrder<'a> {
    chunks: &'a [Shared<BoxFuture<'static, ChunkRows>>],
    /// The next chunk to take.
    next: usize,
    failure: &'a mut Option<Arc<PipelineError>>,
}

impl MadeChunks for InOrder<'_> {
    type Chunk = Arc<TransformedChunk>;

    async fn next_chunk(&mut self) -> Option<Arc<TransformedChunk>> {
        if self.failure.is_some() {
            return None;
        }
        let chunk = self.chunks.get(self.next)?.clone();
        self.next += 1;
        match chunk.await {
            Ok(rows) => Some(rows),
            Err(e) => {
                *self.failure = Some(e);
                None
            }
        }
    }

    fn next_is_made(&self) -> bool {
        match self.chunks.get(self.next) {
            Some(chunk) => self.failure.is_some() || chunk.clone().now_or_never().is_some(),
            None => true,
        }
    }
}

/// Why a chunk has no rows when its task ended without a word (the
/// runtime shut down).
fn gone() -> PipelineError {
    PipelineError::Unanswered { step: "making rows" }
}

#[cfg(test)]
mod tests {
    use fluss_row_codec::RowKind;

    use super::*;
    use crate::batch::Source;
    use crate::rows::MessageOutcome;
    use crate::rows::json::JsonMapping;
    use crate::schema::{Column, DataType, TablePath, TableSchema};

    fn stage() -> Arc<RowStage> {
        let schema = TableSchema {
            path: TablePath::new("db", "t"),
            columns: vec![Column::new("v", DataType::Int, true)],
            primary_key: vec![],
            partition_keys: vec![],
            added_columns: 0,
        };
        Arc::new(RowStage::Json(JsonMapping::new(&schema, RowKind::Append)))
    }

    /// Message i is `{"v":i}`, or not JSON when `i` is in `broken`.
    fn batch(count: usize, broken: &[usize]) -> Arc<MessageBatch> {
        let mut batch = MessageBatch::new(Source::default());
        for i in 0..count {
            let payload = if broken.contains(&i) {
                "not json".to_string()
            } else {
                format!(r#"{{"v":{i}}}"#)
            };
            batch
                .push(i as u64, i as u128, 0, payload.as_bytes(), [])
                .unwrap();
        }
        Arc::new(batch)
    }

    /// Each message's outcome: its one row's cell, or `None` for a dead letter.
    fn values(output: &TransformOutput) -> Vec<Option<String>> {
        let mut cells = output
            .rows
            .iter()
            .map(|(_, row)| format!("{:?}", row.cells().next()));
        output
            .outcomes
            .iter()
            .map(|o| match o {
                MessageOutcome::Rows(1) => cells.next(),
                _ => None,
            })
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn chunks_come_in_message_order_and_join_into_the_whole() {
        let batch = batch(11, &[4]);
        let metrics = Arc::new(InstanceMetrics::new(9_001));
        let making = RowsInMaking::start(stage(), &batch, PayloadSchema::Json, 3, None, metrics);
        let mut failure = None;
        let mut chunks: Vec<Arc<TransformedChunk>> = Vec::new();
        let mut in_order = making.in_order(&mut failure);
        while let Some(chunk) = in_order.next_chunk().await {
            chunks.push(chunk);
        }
        assert!(failure.is_none());
        assert_eq!(
            chunks.iter().map(|c| c.rows.outcomes.len()).collect::<Vec<_>>(),
            vec![3, 3, 3, 2],
            "one chunk per 3 messages, the last one short"
        );
        let mut joined = TransformOutput::default();
        for chunk in chunks {
            joined.append_copy(&chunk.rows);
        }
        let whole = making.whole().await.unwrap();
        assert_eq!(values(&joined), values(&whole));
        let expected: Vec<Option<String>> = (0..11)
            .map(|i| (i != 4).then(|| format!("{:?}", Some(fluss_row_codec::Cell::Int(i)))))
            .collect();
        assert_eq!(
            values(&whole),
            expected,
            "every message in its place, the broken one a dead letter"
        );
        assert!(!making.failed());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_next_chunk_is_made_once_its_task_has_ended_and_at_the_end() {
        let batch = batch(6, &[]);
        let metrics = Arc::new(InstanceMetrics::new(9_002));
        let making = RowsInMaking::start(stage(), &batch, PayloadSchema::Json, 3, None, metrics);
        let mut failure = None;
        let mut chunks = making.in_order(&mut failure);
        let started = Instant::now();
        while !chunks.next_is_made() {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(10),
                "never made"
            );
            tokio::task::yield_now().await;
        }
        assert_eq!(chunks.next_chunk().await.map(|c| c.rows.outcomes.len()), Some(3));
        assert_eq!(chunks.next_chunk().await.map(|c| c.rows.outcomes.len()), Some(3));
        assert!(chunks.next_is_made(), "the end is there at once");
        assert!(chunks.next_chunk().await.is_none());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_chunk_still_in_the_making_is_not_made() {
        let batch = batch(3, &[]);
        let (sender, receiver) = oneshot::channel::<ChunkRows>();
        let rows = receiver.map(|r| r.unwrap_or_else(|_| Err(Arc::new(gone()))));
        let making = RowsInMaking {
            chunks: vec![rows.boxed().shared()],
        };
        let mut failure = None;
        let chunks = making.in_order(&mut failure);
        assert!(!chunks.next_is_made(), "nothing sent yet");
        assert_eq!(
            making.table_names_if_made("db.t"),
            None,
            "its tables are not known yet"
        );
        let made = Arc::new(Arc::new(stage().rows(PayloadSchema::Json, &batch).unwrap()).into());
        sender.send(Ok(made)).unwrap();
        assert!(chunks.next_is_made(), "sent");
        assert_eq!(
            making.table_names_if_made("db.t"),
            Some(std::collections::BTreeSet::from(["db.t".to_string()])),
            "the rows are all the sink table's"
        );
    }
}
