//! One sink instance's work: messages in, rows out to Fluss. A batch is cut
//! into `batch_size` chunks; each chunk becomes rows (WebAssembly transform,
//! JSON mapping, or Arrow IPC passthrough) and is written, and `consume`
//! returns once Fluss acknowledged, or the dead-letter table took, every
//! message's rows. Chunks are made side by side on the blocking pool (as
//! many at once as there are cores, at most 4), and each is sent as soon as
//! it is made, in order, while the next ones are made (the JSON mapping's
//! and a transform's, see `making`; the keyed lean path's are made, then
//! sent).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::batch::{MessageBatch, PayloadSchema};
use crate::config::{ConfigError, SinkConfig, TableType};
use crate::deadline::Deadline;
use crate::metrics::InstanceMetrics;
use crate::rows::TransformOutput;
use crate::rows::keyed::KeyedOutput;
use crate::schema::{TablePath, TableSchema};
use crate::spool::SpoolMode;
use crate::transform::{Reloadable, TransformError};
use crate::writer::{ChunkFinisher, FlussWriter, WriteError, WriteReport};

mod chunks;
mod making;
mod reload;
mod spooled;
mod stage;

pub use stage::RowStage;

/// Why an instance could not open or a batch could not be written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PipelineError {
    /// The config is refused.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The transform did not load, or failed a batch as a whole.
    #[error(transparent)]
    Transform(#[from] TransformError),
    /// Fluss could not be reached or did not take the rows.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// The sink table does not match what the config says it is.
    #[error("table {table}: {reason}")]
    TableMismatch {
        /// The sink table.
        table: TablePath,
        /// What does not match.
        reason: String,
    },
    /// The spool could not be opened, or a batch could not be made durable.
    #[error(transparent)]
    Spool(#[from] crate::spool::SpoolError),
    /// The metrics endpoint could not start.
    #[error(transparent)]
    Metrics(#[from] crate::metrics::server::ServeError),
    /// Making a batch's rows failed (shared by everyone waiting for them).
    #[error(transparent)]
    Rows(Arc<PipelineError>),
    /// A worker task ended without a word (the runtime is shutting down).
    #[error("internal error: {step}: the task ended without an answer")]
    Unanswered {
        /// What the task was doing.
        step: &'static str,
    },
    /// A worker task ended without an answer (it panicked).
    #[error("internal error: {step}: {source}")]
    Worker {
        /// What the task was doing.
        step: &'static str,
        /// How it ended.
        source: tokio::task::JoinError,
    },
}

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
    stage: Arc<RowStage>,
    /// The transform's versions, when there is a transform.
    versions: Option<reload::Versions>,
    metrics: Arc<InstanceMetrics>,
    writer: FlussWriter,
    batch_size: usize,
    stats: PipelineStats,
    /// The durable spool, unless `spool.mode = "off"`.
    spooler: Option<spooled::Spooler>,
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
        }
    }
}

impl Pipeline {
    /// Connects to Fluss, creates or reads the sink table, checks it against
    /// the config, loads the transform, and opens the spool (whose drainer
    /// replays what an earlier process left there before new batches).
    /// `instance` labels its metrics (the runtime's connector id).
    pub(crate) async fn open(config: SinkConfig, instance: u32) -> Result<Arc<Self>, PipelineError> {
        let table = config.table_path()?;
        let deadline = Deadline::after(config.open_timeout);
        let metrics = Arc::new(InstanceMetrics::new(instance));
        if let Some(address) = &config.metrics_address {
            crate::metrics::server::ensure(address).await?;
        }
        let writer = FlussWriter::connect_within(config.writer_settings(), deadline)
            .await?
            .observed_by(metrics.clone());
        let schema = match config.declared_schema()? {
            Some(declared) => writer.ensure_table_within(&declared, deadline).await?,
            None => writer.table_schema_within(&table, deadline).await?,
        };
        check_table(&config, &schema)?;
        let (stage, reloadable) = {
            let (config, schema) = (config.clone(), schema.clone());
            tokio::task::spawn_blocking(move || match config.transform_spec() {
                Some(spec) => {
                    let reloadable = Arc::new(Reloadable::load(spec, std::slice::from_ref(&schema))?);
                    Ok((RowStage::Wasm(reloadable.current()), Some(reloadable)))
                }
                None => RowStage::from_config(&config, &schema).map(|stage| (stage, None)),
            })
            .await
            .map_err(|source| PipelineError::Worker {
                step: "loading the transform",
                source,
            })?
            .map_err(PipelineError::Transform)?
        };
        let stage = match config.table_type {
            TableType::Log => stage.lean(
                &schema,
                writer.whole_batch_schema(&table, deadline).await?,
                config.include_metadata,
            ),
            TableType::PrimaryKey => stage.keyed(
                &schema,
                writer.takes_keyed_rows(&table, deadline).await?,
                config.include_metadata,
            ),
        };
        let versions = reloadable.map(|r| {
            let t = config.transform.as_ref().expect("a transform was loaded");
            reload::Versions::new(r, t.reload, t.reload_check_interval, metrics.clone())
        });
        let spooler = match config.spool.mode {
            SpoolMode::Off => None,
            mode => {
                let dir = config
                    .spool
                    .dir(&table)
                    .ok_or(crate::spool::SpoolError::NoFolder)?;
                Some(spooled::Spooler::open(
                    mode,
                    &dir,
                    config.spool.max_bytes(),
                    table.clone(),
                    metrics.clone(),
                )?)
            }
        };
        tracing::info!(table = %table, "Fluss sink open");
        let pipeline = Arc::new(Self {
            table,
            stage: Arc::new(stage),
            versions,
            metrics,
            writer,
            batch_size: config.batch_size,
            stats: PipelineStats::default(),
            spooler,
        });
        pipeline.start_drainer();
        Ok(pipeline)
    }

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
        let rows = match *self.stage {
            RowStage::Wasm(_) => {
                // Chunks made into the table's columns beside the transform.
                let finisher = self.writer.chunk_finisher(&self.table).await;
                let making = self.start_rows(schema, &batch, finisher);
                Some((HeldRows::Making(Arc::new(making)), self.stage.kind()))
            }
            _ => None,
        };
        Ok(Held { schema, batch, rows })
    }

    /// Writes `held` before `deadline`.
    async fn write_held(
        self: &Arc<Self>,
        held: Held,
        deadline: Deadline,
    ) -> Result<WriteReport, PipelineError> {
        let Held { schema, batch, rows } = held;
        match rows {
            Some((HeldRows::Made(output), kind)) => {
                let output = Arc::try_unwrap(output).unwrap_or_else(|shared| (*shared).clone());
                return Ok(self
                    .writer
                    .write_within(&batch, output, &self.table, kind, deadline)
                    .await?);
            }
            // Each chunk is written as soon as it is made. (A replay of a
            // batch whose rows could not all be made makes them again.)
            Some((HeldRows::Making(making), kind)) if !making.failed() => {
                let mut failure = None;
                let written = self
                    .writer
                    .write_transformed_within(
                        &batch,
                        making.blocking(&mut failure),
                        &self.table,
                        kind,
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
        if let RowStage::ArrowIpc = *self.stage {
            return Ok(self
                .writer
                .write_arrow_ipc_within(&batch, &self.table, deadline)
                .await?);
        }
        if let RowStage::JsonKeyed(_) = *self.stage {
            // The keyed lean path: rows made on every core, then sent in order.
            let output = self
                .made_in_chunks(&batch, self.stage.clone(), move |stage, chunk| {
                    Ok(stage
                        .keyed_chunk(schema, chunk)
                        .expect("the keyed lean path's stage"))
                })
                .await?;
            return Ok(self
                .writer
                .write_keyed_within(&batch, output, &self.table, deadline)
                .await?);
        }
        if let RowStage::JsonColumns(_) = *self.stage {
            // The lean path: chunks are made on every core and each is sent
            // once made, in order, while the next ones are being made.
            let chunks =
                chunks::ColumnChunks::new(self.stage.clone(), batch.clone(), schema, self.batch_size);
            return Ok(self
                .writer
                .write_columns_within(&batch, chunks, &self.table, deadline)
                .await?);
        }
        let output = self.rows(schema, &batch).await?;
        Ok(self
            .writer
            .write_within(&batch, output, &self.table, self.stage.kind(), deadline)
            .await?)
    }

    /// The rows of `batch` made by the transform or the JSON mapping.
    async fn rows(
        self: &Arc<Self>,
        schema: PayloadSchema,
        batch: &Arc<MessageBatch>,
    ) -> Result<TransformOutput, PipelineError> {
        self.start_rows(schema, batch, None)
            .whole()
            .await
            .map_err(PipelineError::Rows)
    }

    /// Starts making the rows of `batch` with the transform (or the JSON
    /// mapping), chunk by chunk, each finished by `finisher` if given.
    fn start_rows(
        &self,
        schema: PayloadSchema,
        batch: &Arc<MessageBatch>,
        finisher: Option<ChunkFinisher>,
    ) -> making::RowsInMaking {
        // One version of the transform for the whole batch (hot reload swaps
        // versions between batches only).
        let stage = match &self.versions {
            Some(versions) => Arc::new(RowStage::Wasm(versions.for_batch(batch))),
            None => self.stage.clone(),
        };
        making::RowsInMaking::start(
            stage,
            batch,
            schema,
            self.batch_size,
            finisher,
            self.metrics.clone(),
        )
    }

    /// What `make` makes of `batch`, chunk by chunk (`batch_size` messages,
    /// one transform call each) on the blocking pool, as many chunks at once
    /// as there are cores (each running chunk may hold a transform instance).
    async fn made_in_chunks<T: ChunkOutput>(
        self: &Arc<Self>,
        batch: &Arc<MessageBatch>,
        stage: Arc<RowStage>,
        make: impl Fn(&RowStage, &MessageBatch) -> Result<T, TransformError> + Send + Sync + 'static,
    ) -> Result<T, PipelineError> {
        let count = batch.len();
        let span = tracing::Span::current();
        let starts: Vec<usize> = (0..count).step_by(self.batch_size).collect();
        let at_once = std::thread::available_parallelism().map_or(2, |n| n.get().min(4));
        let make = Arc::new(make);
        let mut output = T::default();
        for wave in starts.chunks(at_once) {
            let tasks: Vec<_> = wave
                .iter()
                .map(|&start| {
                    let chunk = if count <= self.batch_size {
                        batch.clone()
                    } else {
                        Arc::new(batch.slice(start..(start + self.batch_size).min(count)))
                    };
                    let (stage, span, make) = (stage.clone(), span.clone(), make.clone());
                    tokio::task::spawn_blocking(move || span.in_scope(|| make(&stage, &chunk)))
                })
                .collect();
            for task in tasks {
                let part = task.await.map_err(|source| PipelineError::Worker {
                    step: "making rows",
                    source,
                })??;
                output.append(part);
            }
        }
        Ok(output)
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
    /// next open), the Fluss connection what remains (at least 200 ms) for
    /// unsent rows.
    pub(crate) async fn close(&self, timeout: Duration) {
        let deadline = Deadline::after(timeout);
        if let Some(spooler) = &self.spooler {
            spooler.close(timeout).await;
        }
        self.writer
            .close(deadline.remaining().max(Duration::from_millis(200)))
            .await;
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

/// Checks that the table Fluss has is the kind the config says.
/// What a chunk of a batch becomes, joined with the next chunks' in message
/// order.
trait ChunkOutput: Default + Send + 'static {
    fn append(&mut self, next: Self);
}

impl ChunkOutput for KeyedOutput {
    fn append(&mut self, next: Self) {
        KeyedOutput::append(self, next);
    }
}

fn check_table(config: &SinkConfig, schema: &TableSchema) -> Result<(), PipelineError> {
    let mismatch = |reason: String| {
        Err(PipelineError::TableMismatch {
            table: schema.path.clone(),
            reason,
        })
    };
    match (config.table_type, schema.has_primary_key()) {
        (TableType::Log, true) => {
            return mismatch(format!(
                "it has primary key {:?}; set table_type = \"primary_key\"",
                schema.primary_key
            ));
        }
        (TableType::PrimaryKey, false) => {
            return mismatch("it is a log table; set table_type = \"log\"".into());
        }
        _ => {}
    }
    if !config.primary_key_columns.is_empty() && config.primary_key_columns != schema.primary_key {
        return mismatch(format!(
            "its primary key is {:?}, the config says {:?}",
            schema.primary_key, config.primary_key_columns
        ));
    }
    if config.partial_update
        && let Some(reason) = crate::rows::partial_update_refusal(schema)
    {
        return mismatch(format!("partial_update is on, but {reason}"));
    }
    Ok(())
}
