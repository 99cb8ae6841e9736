//! One sink instance's work: messages in, rows out to Fluss. A batch is cut
//! into `batch_size` chunks; each chunk becomes rows (WebAssembly transform,
//! JSON mapping, or Arrow IPC passthrough) and is written, and `consume`
//! returns once Fluss acknowledged, or the dead-letter table took, every
//! message's rows. Chunks are made side by side on the blocking pool (as
//! many at once as there are cores, at most 4), and each is sent as soon as
//! it is made, in order, while the next ones are made: one scheduler for
//! every producer (`chunks`; a transform's driven from a task of their own,
//! see `making`; the keyed lean path's are made, then sent).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use crate::batch::{MessageBatch, PayloadSchema};
use crate::config::SinkConfig;
use crate::deadline::Deadline;
use crate::metrics::InstanceMetrics;
use crate::rows::TransformOutput;
use crate::rows::keyed::KeyedOutput;
use crate::schema::{TablePath, TableSchema};
use crate::writer::{
    ArrowIpcPayloads, ChunkFinisher, ColumnChunks, FlussWriter, MadeRows, TransformedChunks, WriteReport,
};

mod chunk_size;
mod chunks;
mod error;
mod evolve;
mod follow;
mod making;
mod open;
mod reload;
mod spooled;
mod stage;

use chunks::ChunkStream;
pub(crate) use error::PipelineError;
use evolve::first_new_field;
pub use stage::RowStage;

/// Counts of messages since the instance opened.
#[derive(Debug, Default)]
pub(crate) struct PipelineStats {
    /// Messages handed to `consume`.
    pub received: AtomicU64,
    /// Messages whose rows Fluss acknowledged.
    pub written: AtomicU64,
    /// Messages that became no rows.
    pub filtered: AtomicU64,
    /// Messages dead-lettered.
    pub dead_lettered: AtomicU64,
}

/// An open sink instance: the table, the stage that makes rows, the writer.
pub(crate) struct Pipeline {
    table: TablePath,
    /// The stage in force, with the sink table's schema it was made for
    /// (made again when the table's columns change, see `follow`).
    stage: RwLock<(Arc<RowStage>, TableSchema)>,
    /// The transform's versions, when there is a transform.
    versions: Option<reload::Versions>,
    metrics: Arc<InstanceMetrics>,
    writer: FlussWriter,
    /// `batch_size`: how the batch is cut into chunks.
    chunking: chunk_size::ChunkSize,
    stats: PipelineStats,
    /// The durable spool, unless `spool.mode = "off"`.
    spooler: Option<spooled::Spooler>,
    /// The connector's config, to make the stage again with.
    config: SinkConfig,
    /// The task that looks at the tables' schemas (see `follow`).
    follower: Mutex<Option<tokio::task::AbortHandle>>,
    /// When the tables were last looked at for a JSON field without a
    /// column (see `follow`).
    looked_for_field: Mutex<Option<Instant>>,
}

/// A batch with what writing it needs: its messages and, when a transform
/// made its rows, those rows (so that every attempt, a replay included,
/// writes the same rows whatever version of the transform is in force by
/// then). The JSON mapping and the Arrow IPC decoding make rows again.
#[derive(Clone)]
struct Held {
    schema: PayloadSchema,
    batch: Arc<MessageBatch>,
    rows: Option<(HeldRows, crate::rows::DeadLetterKind)>,
    /// How many columns the sink's table had for the stage that made
    /// `rows` (see [`crate::spool::record::SpooledBatch::rows_made_for`]).
    rows_made_for: Option<u32>,
}

/// A transform's rows of a held batch.
#[derive(Clone)]
enum HeldRows {
    /// Read back from the spool.
    Made(Arc<TransformOutput>),
    /// Made chunk by chunk since the batch came.
    Making(Arc<making::RowsInMaking>),
}

impl Held {
    fn from_record(record: crate::spool::record::SpooledBatch) -> Self {
        Self {
            schema: record.schema,
            batch: Arc::new(record.batch),
            rows: record
                .rows
                .map(|(output, kind)| (HeldRows::Made(Arc::new(output)), kind)),
            rows_made_for: record.rows_made_for,
        }
    }
}

impl Pipeline {
    /// Writes `batch` and returns what became of its messages, once every
    /// row is acknowledged or dead-lettered, within `delivery_timeout`. The
    /// rows of the batch's `batch_size` chunks are made side by side on the
    /// blocking pool, each sent as soon as it is made; every append is sent
    /// before any acknowledgement is awaited. An error means some messages of the batch
    /// may not have reached Fluss: their offsets are logged at error level.
    pub(crate) async fn consume(
        self: &Arc<Self>,
        schema: PayloadSchema,
        batch: MessageBatch,
    ) -> Result<WriteReport, PipelineError> {
        let deadline = Deadline::after(self.writer.settings().delivery_timeout);
        let started = Instant::now();
        self.stats
            .received
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        self.metrics.consume_started(batch.len());
        if batch.is_empty() {
            self.metrics.consume_ended(0, started.elapsed(), true);
            return Ok(WriteReport::default());
        }
        let (count, source) = (batch.len(), batch.source.clone());
        let (first, last) = (batch.get(0).offset, batch.get(count - 1).offset);
        let written = match &self.spooler {
            None => self.write_batch(schema, batch, deadline).await,
            Some(spooler) => match self.prepare(schema, Arc::new(batch)).await {
                Ok(held) => self.consume_spooled(spooler, held, deadline).await,
                Err(e) => Err(e),
            },
        };
        self.metrics
            .consume_ended(count, started.elapsed(), written.is_ok());
        self.look_after_unknown_field();
        let report = match written {
            Ok(report) => report,
            Err(e) => {
                tracing::error!(
                    "messages at offsets {first}..={last} of {}/{} partition {} may not be in Fluss: {e}",
                    source.stream,
                    source.topic,
                    source.partition
                );
                return Err(e);
            }
        };
        self.count(&report);
        tracing::debug!(
            written = report.written,
            filtered = report.filtered,
            dead_lettered = report.dead_lettered,
            "batch of {count} messages from {}/{} done",
            source.stream,
            source.topic
        );
        Ok(report)
    }

    async fn write_batch(
        self: &Arc<Self>,
        schema: PayloadSchema,
        batch: MessageBatch,
        deadline: Deadline,
    ) -> Result<WriteReport, PipelineError> {
        let held = self.prepare(schema, Arc::new(batch)).await?;
        self.write_held(held, deadline).await
    }

    /// `batch` with the rows a transform makes of it (other stages make
    /// theirs as they write).
    async fn prepare(
        self: &Arc<Self>,
        schema: PayloadSchema,
        batch: Arc<MessageBatch>,
    ) -> Result<Held, PipelineError> {
        let (stage, columns) = self.stage_and_columns();
        let rows = match *stage {
            RowStage::Wasm(_) => {
                // Chunks made into the table's columns beside the transform.
                let finisher = self.writer.chunk_finisher(&self.table).await;
                let making = self.start_rows(&stage, schema, &batch, finisher);
                Some((HeldRows::Making(Arc::new(making)), stage.kind()))
            }
            // Routed rows are made before the first attempt, so that the
            // spool knows which tables the batch writes (`spooled::tables`).
            RowStage::Json(ref mapping) if !mapping.maps_to_one_table() && !self.evolves() => {
                let output = self.rows(&stage, schema, &batch).await?;
                Some((HeldRows::Made(Arc::new(output)), stage.kind()))
            }
            _ => None,
        };
        let rows_made_for = rows.as_ref().map(|_| columns as u32);
        Ok(Held {
            schema,
            batch,
            rows,
            rows_made_for,
        })
    }

    /// Writes `held` before `deadline`, once (see [`Pipeline::write_held`]).
    async fn write_held_once(
        self: &Arc<Self>,
        held: Held,
        deadline: Deadline,
    ) -> Result<WriteReport, PipelineError> {
        self.write_held_rows(held, self.evolves(), deadline).await
    }

    /// [`Pipeline::write_held_once`]; with `evolve`, JSON fields the table
    /// lacks add their columns first (see [`evolve`]).
    async fn write_held_rows(
        self: &Arc<Self>,
        held: Held,
        evolve: bool,
        deadline: Deadline,
    ) -> Result<WriteReport, PipelineError> {
        let Held {
            schema,
            batch,
            rows,
            rows_made_for,
        } = held;
        if evolve && !self.table_made() {
            // The table is made from this batch's fields first.
            return self.write_split(schema, &batch, 0, deadline).await;
        }
        match rows {
            Some((HeldRows::Made(output), kind)) => {
                let output = self.pad_rows_made_before_a_change(output, rows_made_for);
                return Ok(self
                    .writer
                    .write_within(&batch, MadeRows::new(output, kind), &self.table, deadline)
                    .await?);
            }
            // Each chunk is written as soon as it is made. (A replay of a
            // batch whose rows could not all be made makes them again.)
            Some((HeldRows::Making(making), kind)) if !making.failed() => {
                let mut failure = None;
                let chunks = making.in_order(&mut failure);
                let written = self
                    .writer
                    .write_within(
                        &batch,
                        TransformedChunks { chunks, stage: kind },
                        &self.table,
                        deadline,
                    )
                    .await;
                if let Some(e) = failure {
                    return Err(PipelineError::Rows(e));
                }
                return Ok(written?);
            }
            _ => {}
        }
        let stage = self.stage();
        if let RowStage::ArrowIpc = *stage {
            return Ok(self
                .writer
                .write_within(&batch, ArrowIpcPayloads, &self.table, deadline)
                .await?);
        }
        if let RowStage::JsonKeyed(_) = *stage {
            // The keyed lean path: rows made on every core, then sent in order.
            let output = self.keyed_rows(&stage, schema, &batch).await?;
            if let Some(at) = first_new_field(&output.outcomes).filter(|_| evolve) {
                return self.write_split(schema, &batch, at, deadline).await;
            }
            return Ok(self
                .writer
                .write_within(&batch, output, &self.table, deadline)
                .await?);
        }
        if let RowStage::JsonColumns(_) = *stage {
            // The lean path: chunks are made on every core and each is sent
            // once made, in order, while the next ones are being made.
            let size = self.chunk_size(&stage, &batch);
            let chunks = ChunkStream::new(batch.clone(), size, move |chunk| {
                stage
                    .column_chunk(schema, chunk)
                    .expect("the lean path's stage makes columns")
            })
            .first_here();
            if !evolve {
                return Ok(self
                    .writer
                    .write_within(&batch, ColumnChunks(chunks), &self.table, deadline)
                    .await?);
            }
            let mut chunks = evolve::UntilNewField::new(chunks);
            let written = self
                .writer
                .write_within(&batch, ColumnChunks(&mut chunks), &self.table, deadline)
                .await?;
            return match chunks.stopped_at() {
                Some(at) => (self.write_after_new_fields(schema, &batch, at, written, deadline)).await,
                None => Ok(written),
            };
        }
        let output = self.rows(&stage, schema, &batch).await?;
        if let Some(at) = first_new_field(&output.outcomes).filter(|_| evolve) {
            return self.write_split(schema, &batch, at, deadline).await;
        }
        Ok(self
            .writer
            .write_within(&batch, MadeRows::new(output, stage.kind()), &self.table, deadline)
            .await?)
    }

    /// The row stage in force: a batch keeps the one it took.
    fn stage(&self) -> Arc<RowStage> {
        self.stage.read().unwrap_or_else(|e| e.into_inner()).0.clone()
    }

    /// The row stage in force and how many columns its table has.
    fn stage_and_columns(&self) -> (Arc<RowStage>, usize) {
        let stage = self.stage.read().unwrap_or_else(|e| e.into_inner());
        (stage.0.clone(), stage.1.columns.len())
    }

    /// Gives a transform's rows for the sink's table made when it had
    /// `made_for` columns (read back from the spool) NULL in the columns
    /// added to its end since: a process that opened the table after the
    /// change would refuse them as short.
    fn pad_rows_made_before_a_change(
        &self,
        output: Arc<TransformOutput>,
        made_for: Option<u32>,
    ) -> Arc<TransformOutput> {
        let columns = self.stage_and_columns().1;
        let Some(made_for) = made_for.filter(|&w| (w as usize) < columns) else {
            return output;
        };
        let mut output = Arc::unwrap_or_clone(output);
        output.rows = output
            .rows
            .padded(output.outcomes.len(), made_for as u16, columns as u16);
        Arc::new(output)
    }

    /// Whether the sink's table exists (it has columns): not yet when
    /// `evolve_schema` makes it from the first batch. Read without copying
    /// the schema: it is asked once a batch.
    fn table_made(&self) -> bool {
        !(self.stage.read().unwrap_or_else(|e| e.into_inner()).1.columns).is_empty()
    }

    /// The sink table's schema the stage in force was made for.
    fn stage_schema(&self) -> TableSchema {
        self.stage.read().unwrap_or_else(|e| e.into_inner()).1.clone()
    }

    /// The rows of `batch` made by `stage` (the transform or the JSON mapping).
    async fn rows(
        self: &Arc<Self>,
        stage: &Arc<RowStage>,
        schema: PayloadSchema,
        batch: &Arc<MessageBatch>,
    ) -> Result<TransformOutput, PipelineError> {
        self.start_rows(stage, schema, batch, None)
            .whole()
            .await
            .map_err(PipelineError::Rows)
    }

    /// Starts making the rows of `batch` with `stage`'s transform (or JSON
    /// mapping), chunk by chunk, each finished by `finisher` if given.
    fn start_rows(
        &self,
        stage: &Arc<RowStage>,
        schema: PayloadSchema,
        batch: &Arc<MessageBatch>,
        finisher: Option<ChunkFinisher>,
    ) -> making::RowsInMaking {
        // One version of the transform for the whole batch (hot reload swaps
        // versions between batches only).
        let stage = match &self.versions {
            Some(versions) => Arc::new(RowStage::Wasm(versions.for_batch(batch))),
            None => stage.clone(),
        };
        let size = self.chunk_size(&stage, batch);
        making::RowsInMaking::start(stage, batch, schema, size, finisher, self.metrics.clone())
    }

    /// The keyed lean path's rows of `batch`, chunk by chunk on the
    /// blocking pool, joined in message order.
    async fn keyed_rows(
        &self,
        stage: &Arc<RowStage>,
        schema: PayloadSchema,
        batch: &Arc<MessageBatch>,
    ) -> Result<KeyedOutput, PipelineError> {
        let (stage, size) = (stage.clone(), self.chunk_size(stage, batch));
        let mut chunks = ChunkStream::new(batch.clone(), size, move |chunk| {
            stage
                .keyed_chunk(schema, chunk)
                .expect("the keyed lean path's stage")
        });
        let mut output = KeyedOutput::default();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|lost| PipelineError::Worker {
                step: "making rows",
                source: lost.source,
            })?;
            output.append(chunk);
        }
        Ok(output)
    }

    /// Messages per chunk of `batch` made by `stage` (see
    /// [`chunk_size::ChunkSize`]).
    fn chunk_size(&self, stage: &RowStage, batch: &MessageBatch) -> usize {
        let shape = chunk_size::BatchShape {
            messages: batch.len(),
            payload_bytes: batch.payload_bytes(),
        };
        self.chunking
            .for_batch(shape, chunks_at_once(), stage.messages_per_chunk())
    }

    fn count(&self, report: &WriteReport) {
        self.metrics.outcomes(report.written, report.filtered);
        self.stats
            .written
            .fetch_add(report.written as u64, Ordering::Relaxed);
        self.stats
            .filtered
            .fetch_add(report.filtered as u64, Ordering::Relaxed);
        self.stats
            .dead_lettered
            .fetch_add(report.dead_lettered as u64, Ordering::Relaxed);
    }

    /// Closes the instance within about `timeout`: the spool's drainer gets
    /// until then to empty the queue (what is left stays on disk for the
    /// next open, and the client sends none of it); without a spool, the
    /// client gets what remains (at least 200 ms) for unsent rows.
    pub(crate) async fn close(&self, timeout: Duration) {
        let deadline = Deadline::after(timeout);
        self.stop_follower();
        match &self.spooler {
            // What Fluss has not acknowledged is on disk, replayed by the
            // next open: the client must not send it as well.
            Some(spooler) => {
                spooler.close(timeout).await;
                self.writer.close_without_sending();
            }
            None => {
                self.writer
                    .close(deadline.remaining().max(Duration::from_millis(200)))
                    .await;
            }
        }
        let s = &self.stats;
        tracing::info!(
            received = s.received.load(Ordering::Relaxed),
            written = s.written.load(Ordering::Relaxed),
            filtered = s.filtered.load(Ordering::Relaxed),
            dead_lettered = s.dead_lettered.load(Ordering::Relaxed),
            "Fluss sink for {} closed",
            self.table
        );
    }
}

/// How many chunks of a batch are made at once: the cores this process may
/// use, at most 4. Read once, because `available_parallelism` reads the
/// cgroup's files at every call (45 µs a consume on this project's machine).
fn chunks_at_once() -> usize {
    static AT_ONCE: OnceLock<usize> = OnceLock::new();
    *AT_ONCE.get_or_init(|| std::thread::available_parallelism().map_or(2, |n| n.get().min(4)))
}
