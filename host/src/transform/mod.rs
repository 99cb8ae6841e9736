//! The WebAssembly transform engine: loads a component that implements the
//! `transform` world (`wit/transform.wit`), and runs it over batches with
//! limits on CPU time, memory, stack and output, isolating the messages
//! that make it fail.
//!
//! - [`engine`](self): one Wasmtime `Engine` per process (per distinct stack
//!   cap, which is an engine setting), with a background thread ticking its
//!   epoch; the checks that a component is of the `transform` world; the
//!   linker (WASI that grants nothing, clocks that never block).
//! - Each component is compiled once; the compiled artifact is cached on
//!   disk (see [`cache`]), and its `InstancePre` is reused for every instance.
//! - `pool`: instances are pooled and reused across batches; one that
//!   trapped is dropped, one whose memory passed the high-water mark is
//!   recycled.
//! - `isolation`: on a failed call (trap, deadline, memory cap, malformed
//!   output) the batch is retried once on a fresh instance, then bisected so
//!   that only the messages that make the transform fail are dead-lettered,
//!   each with the failure's description; the rest of the batch goes on.
//! - `pace`: how long the guest takes a message, so that auto-sized chunks
//!   stay well inside `call_timeout`.

mod bindings;
pub(crate) mod cache;
mod clocks;
mod engine;
mod error;
mod guest;
mod isolation;
mod pace;
mod pool;
mod reload;

use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wasmtime::Engine;

use crate::batch::MessageBatch;
use crate::rows::columns::ColumnOutput;
use crate::rows::guest_columns::{GuestColumns, LeanRoutes, LeanTable};
use crate::rows::{RowVisitor, TransformOutput};
use crate::schema::TableSchema;
pub(crate) use bindings::{WIT_PACKAGE, WIT_VERSION};
pub use error::TransformError;
use guest::GuestState;
use isolation::Fault;
use pool::Instance;
pub(crate) use reload::{ReloadOutcome, Reloadable};

/// Limits on one transform's instances. Every one has a default and can be set.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// CPU time one call (`init` or one batch) may take.
    pub call_timeout: Duration,
    /// Linear memory one instance may hold, in bytes.
    pub max_memory: usize,
    /// After a call that left the instance above this many bytes of memory,
    /// the instance is dropped and a fresh one serves the next batch.
    pub recycle_memory: usize,
    /// WebAssembly stack, in bytes.
    pub max_stack: usize,
    /// Rows one batch may return.
    pub max_rows_per_batch: usize,
    /// Bytes of encoded rows one batch may return.
    pub max_output_bytes: usize,
    /// Failed calls allowed while isolating bad messages in one batch;
    /// past it the messages not yet isolated are dead-lettered together.
    pub max_faults_per_batch: u32,
}

impl Default for Limits {
    fn default() -> Self {
        use crate::config::defaults;
        Self {
            call_timeout: defaults::CALL_TIMEOUT,
            max_memory: defaults::MAX_MEMORY,
            recycle_memory: defaults::recycle_memory(defaults::MAX_MEMORY),
            max_stack: defaults::MAX_STACK,
            max_rows_per_batch: defaults::MAX_ROWS_PER_BATCH,
            max_output_bytes: defaults::MAX_OUTPUT_BYTES,
            max_faults_per_batch: defaults::MAX_FAULTS_PER_BATCH,
        }
    }
}

/// What to load and how.
#[derive(Debug, Clone, PartialEq)]
pub struct TransformSpec {
    /// The component file.
    pub path: PathBuf,
    /// Key/value config handed to the guest's `init`.
    pub config: Vec<(String, String)>,
    /// Limits on its instances.
    pub limits: Limits,
    /// Folder for compiled artifacts; `None` compiles every time.
    pub cache_dir: Option<PathBuf>,
}

impl TransformSpec {
    /// A spec for `path` with no config, default limits and the default
    /// cache folder (none, with a warning, when neither `XDG_CACHE_HOME` nor
    /// `HOME` is set).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        let cache_dir = cache::default_dir();
        if cache_dir.is_none() {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                tracing::warn!(
                    "no folder for compiled components (neither XDG_CACHE_HOME nor HOME is set): \
                     transforms are compiled at every open; set transform.cache_dir to cache them"
                )
            });
        }
        Self {
            path: path.into(),
            config: Vec::new(),
            limits: Limits::default(),
            cache_dir,
        }
    }
}

/// Counters of one loaded transform.
#[derive(Debug, Default)]
pub struct TransformStats {
    /// Instances created (each ran `init`).
    pub instances_created: AtomicU64,
    /// `process` calls made to the guest, retries and bisection included.
    pub calls: AtomicU64,
    /// Calls that failed (trap, deadline, memory, malformed output).
    pub faults: AtomicU64,
    /// Instances dropped for passing the memory high-water mark.
    pub recycled: AtomicU64,
}

/// How the component was obtained and how long that took.
#[derive(Debug, Clone, Copy)]
pub struct LoadInfo {
    /// Compiled now or read from the cache.
    pub source: cache::LoadSource,
    /// Time to compile or deserialize.
    pub compile_time: Duration,
}

/// A loaded transform, ready to process batches from many threads at once.
pub struct Transform {
    path: PathBuf,
    name: Arc<str>,
    engine: Engine,
    pre: bindings::TransformPre<GuestState>,
    limits: Limits,
    config: Vec<(String, String)>,
    wit_tables: Vec<OwnedTable>,
    pool: Mutex<Vec<Instance>>,
    stats: TransformStats,
    pace: pace::Pace,
    load_info: LoadInfo,
    version: String,
}

struct OwnedTable {
    path: String,
    columns: Vec<(String, String, bool)>,
    primary_key: Vec<String>,
}

impl Transform {
    /// Loads the component in `spec`, checks it implements the `transform`
    /// world, and starts one instance (running `init` with `spec.config` and
    /// `tables`, the sink's own table first) so that a bad config fails now.
    pub fn load(spec: &TransformSpec, tables: &[TableSchema]) -> Result<Self, TransformError> {
        let path = spec.path.clone();
        let limits = spec.limits.clone();
        if limits.recycle_memory > limits.max_memory {
            return Err(TransformError::Setting(format!(
                "recycle_memory ({}) must not exceed max_memory ({})",
                limits.recycle_memory, limits.max_memory
            )));
        }
        if tables.is_empty() {
            return Err(TransformError::Setting(
                "a transform needs at least the sink's own table".into(),
            ));
        }
        let bytes = std::fs::read(&path).map_err(|source| TransformError::Read {
            path: path.clone(),
            source,
        })?;
        engine::check_header(&path, &bytes)?;
        let version = version_of(&bytes);
        if let Some(dir) = &spec.cache_dir {
            cache::ensure_private(dir)?;
        }
        let engine = engine::shared_engine(limits.max_stack)?;
        let started = Instant::now();
        let (component, source) = cache::load_or_compile(&engine, &bytes, spec.cache_dir.as_deref())
            .map_err(|source| TransformError::Compile {
                path: path.clone(),
                source,
            })?;
        let load_info = LoadInfo {
            source,
            compile_time: started.elapsed(),
        };
        engine::check_version(&path, &engine, &component)?;

        let linker = engine::linker(&engine)?;
        let instance_pre = linker
            .instantiate_pre(&component)
            .map_err(|e| TransformError::WrongWorld {
                path: path.clone(),
                reason: format!("{e:#}"),
            })?;
        engine::check_exports(&path, &engine, &component)?;
        let pre = bindings::TransformPre::new(instance_pre).map_err(|e| TransformError::WrongWorld {
            path: path.clone(),
            reason: format!("{e:#}"),
        })?;

        let name: Arc<str> = path
            .file_stem()
            .map_or("transform".into(), |s| s.to_string_lossy().into());
        let wit_tables = tables
            .iter()
            .map(|t| OwnedTable {
                path: t.path.to_string(),
                columns: t
                    .columns
                    .iter()
                    .map(|c| (c.name.clone(), c.data_type.to_string(), c.nullable))
                    .collect(),
                primary_key: t.primary_key.clone(),
            })
            .collect();
        let transform = Self {
            path,
            name,
            engine,
            pre,
            limits,
            config: spec.config.clone(),
            wit_tables,
            pool: Mutex::new(Vec::new()),
            stats: TransformStats::default(),
            pace: pace::Pace::default(),
            load_info,
            version,
        };
        let first = transform.new_instance()?;
        transform.give_back(first);
        Ok(transform)
    }

    /// How the component was obtained.
    pub fn load_info(&self) -> LoadInfo {
        self.load_info
    }

    /// The component's version: the first 12 hex digits of the SHA-256 of
    /// its file, as the log and the metrics name it.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The file it was loaded from.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The transform's counters.
    pub fn stats(&self) -> &TransformStats {
        &self.stats
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Messages one call is expected to go through in a quarter of
    /// `call_timeout`, from the pace of the calls so far; `None` before the
    /// first call. Auto-sized chunks are kept to it.
    pub fn messages_per_call(&self) -> Option<usize> {
        self.pace.messages_within(self.limits.call_timeout / 4)
    }

    /// Runs the transform over `batch`: one outcome per message, in order.
    /// Messages that make the transform fail are dead-lettered with the
    /// reason. The rows are not checked against their tables here (see
    /// [`TransformOutput::check_rows`]). Errors only when no instance can be
    /// started at all.
    pub fn process(&self, batch: &MessageBatch) -> Result<TransformOutput, TransformError> {
        self.process_visiting(batch, None).map(|(output, _)| output)
    }

    /// [`Transform::process`], with the rows for `table` (the sink's own
    /// log table), and for the tables `routes` has, put in their lean-path
    /// columns as they are read from the guest's buffer, each cell decoded
    /// once. The columns are `None` when
    /// they were not made that way (the batch's first call failed, or
    /// the builders could not be made): the caller makes them of the rows.
    pub(crate) fn process_into_columns<'t>(
        &self,
        batch: &'t MessageBatch,
        table: LeanTable<'t>,
        routes: Option<&'t dyn LeanRoutes>,
        include_metadata: bool,
    ) -> Result<(TransformOutput, Option<Result<ColumnOutput, String>>), TransformError> {
        let tables = [Some(table)];
        let mut columns = GuestColumns::new(batch, 0, batch.len(), &tables, include_metadata)
            .ok()
            .map(|c| match routes {
                Some(routes) => c.with_routes(routes),
                None => c,
            });
        let visitor = columns.as_mut().map(|c| c as &mut dyn RowVisitor);
        let (output, visited) = self.process_visiting(batch, visitor)?;
        let columns = columns.filter(|_| visited).map(|c| c.finish(&output.outcomes));
        Ok((output, columns))
    }

    /// [`Transform::process`], handing each row to `visitor` as it is read
    /// from the guest's buffer; `true` with the output when the visitor saw
    /// exactly its rows (the batch's first call succeeded), `false` when
    /// the visitor's rows are to be thrown away.
    fn process_visiting(
        &self,
        batch: &MessageBatch,
        visitor: Option<&mut dyn RowVisitor>,
    ) -> Result<(TransformOutput, bool), TransformError> {
        if batch.is_empty() {
            return Ok((TransformOutput::default(), visitor.is_some()));
        }
        let visiting = visitor.is_some();
        let output = match self.attempt(batch, visitor)? {
            Ok(output) => return Ok((output, visiting)),
            Err(Fault(first)) => {
                tracing::warn!(
                    transform = &*self.name,
                    messages = batch.len(),
                    "{first}; retrying the batch on a fresh instance"
                );
                match self.attempt(batch, None)? {
                    Ok(output) => output,
                    Err(fault) => {
                        let mut budget = self.limits.max_faults_per_batch;
                        self.isolate(batch, fault, &mut budget)?
                    }
                }
            }
        };
        // The rows are checked against their tables once, where they are
        // used: by the writer (against the tables as Fluss has them) or by
        // `fluss-sink dry-run`, both with `rows::check_row`.
        Ok((output, false))
    }
}

/// A component's version: the first 12 hex digits of the SHA-256 of its bytes.
pub fn version_of(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes)
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect()
}
