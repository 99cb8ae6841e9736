//! The WebAssembly transform engine: loads a component that implements the
//! `transform` world (`wit/transform.wit`), and runs it over batches with
//! limits on CPU time, memory, stack and output, isolating the messages
//! that make it fail.
//!
//! - One Wasmtime `Engine` per process (per distinct stack cap, which is an
//!   engine setting), with a background thread ticking its epoch.
//! - Each component is compiled once; the compiled artifact is cached on
//!   disk (see [`cache`]), and its `InstancePre` is reused for every instance.
//! - Instances are pooled and reused across batches; one that trapped is
//!   dropped, one whose memory passed the high-water mark is recycled.
//! - On a failed call (trap, deadline, memory cap, malformed output) the
//!   batch is retried once on a fresh instance, then bisected so that only
//!   the messages that make the transform fail are dead-lettered, each with
//!   the failure's description; the rest of the batch goes on.

mod bindings;
pub mod cache;
mod clocks;
mod guest;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use wasmtime::component::{HasSelf, Linker, types::ComponentItem};
use wasmtime::{Config, Engine, Store, Trap};

use crate::batch::MessageBatch;
use crate::rows::{MessageOutcome, RowBatch, TransformOutput};
use crate::schema::TableSchema;
use bindings::iggy::fluss_sink::types as wit;
pub use bindings::{WIT_PACKAGE, WIT_VERSION};
use guest::GuestState;

/// How often the epoch ticks; CPU deadlines are rounded up to it.
const EPOCH_TICK: Duration = Duration::from_millis(5);

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
        Self {
            call_timeout: Duration::from_secs(2),
            max_memory: 256 << 20,
            recycle_memory: 128 << 20,
            max_stack: 512 << 10,
            max_rows_per_batch: 1_000_000,
            max_output_bytes: 128 << 20,
            max_faults_per_batch: 32,
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

/// Why a transform could not be loaded or run.
#[derive(Debug, thiserror::Error)]
pub enum TransformError {
    /// The file is missing or unreadable.
    #[error("cannot read transform {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a component.
    #[error("transform {path} is not a WebAssembly component: {reason}")]
    NotAComponent {
        /// The file.
        path: PathBuf,
        /// What it is instead.
        reason: String,
    },
    /// The component did not compile.
    #[error("transform {path} does not compile: {reason}")]
    Compile {
        /// The file.
        path: PathBuf,
        /// The compiler's message.
        reason: String,
    },
    /// The component targets another version of this project's WIT package.
    #[error(
        "transform {path} was built against {found}, but this sink implements {WIT_PACKAGE}@{WIT_VERSION}; rebuild it against this sink's wit/ folder"
    )]
    IncompatibleVersion {
        /// The file.
        path: PathBuf,
        /// The interface it imports.
        found: String,
    },
    /// The component is not a `transform` world (missing export, other imports).
    #[error(
        "transform {path} does not implement the `transform` world of {WIT_PACKAGE}@{WIT_VERSION}: {reason}"
    )]
    WrongWorld {
        /// The file.
        path: PathBuf,
        /// What is missing or foreign.
        reason: String,
    },
    /// Instantiation failed (start function trapped, memory cap at start, ...).
    #[error("cannot instantiate transform {path}: {reason}")]
    Instantiate {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The guest's `init` returned an error or failed.
    #[error("transform {path} refused to start: {reason}")]
    Init {
        /// The file.
        path: PathBuf,
        /// The guest's message.
        reason: String,
    },
    /// A setting that cannot work.
    #[error("invalid transform setting: {0}")]
    Setting(String),
    /// The compiled-component cache folder cannot be trusted or created.
    #[error(transparent)]
    Cache(#[from] cache::CacheError),
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
    pub source: cache::Source,
    /// Time to compile or deserialize.
    pub compile_time: Duration,
}

struct Instance {
    store: Store<GuestState>,
    bindings: bindings::Transform,
}

/// A loaded transform, ready to process batches from many threads at once.
pub struct Transform {
    path: PathBuf,
    name: Arc<str>,
    engine: Engine,
    pre: bindings::TransformPre<GuestState>,
    limits: Limits,
    config: Vec<(String, String)>,
    tables: Vec<TableSchema>,
    wit_tables: Vec<OwnedTable>,
    pool: Mutex<Vec<Instance>>,
    stats: TransformStats,
    load_info: LoadInfo,
}

struct OwnedTable {
    path: String,
    columns: Vec<(String, String, bool)>,
    primary_key: Vec<String>,
}

/// The process-wide engines, one per stack cap.
fn shared_engine(max_stack: usize) -> Result<Engine, TransformError> {
    static ENGINES: OnceLock<Mutex<Vec<(usize, Engine)>>> = OnceLock::new();
    let mut engines = ENGINES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some((_, engine)) = engines.iter().find(|(stack, _)| *stack == max_stack) {
        return Ok(engine.clone());
    }
    let mut config = Config::new();
    config
        .wasm_component_model(true)
        .concurrency_support(false)
        .epoch_interruption(true)
        .max_wasm_stack(max_stack);
    let engine =
        Engine::new(&config).map_err(|e| TransformError::Setting(format!("max_stack {max_stack}: {e}")))?;
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("fluss-sink-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
                match weak.upgrade() {
                    Some(engine) => engine.increment_epoch(),
                    None => break,
                }
            }
        })
        .map_err(|e| TransformError::Setting(format!("cannot start the epoch thread: {e}")))?;
    engines.push((max_stack, engine.clone()));
    Ok(engine)
}

fn check_header(path: &Path, bytes: &[u8]) -> Result<(), TransformError> {
    let not = |reason: &str| TransformError::NotAComponent {
        path: path.to_path_buf(),
        reason: reason.into(),
    };
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(not("it does not start with the WebAssembly magic bytes"));
    }
    match bytes[4..8] {
        [0x0d, 0x00, 0x01, 0x00] => Ok(()),
        [0x01, 0x00, 0x00, 0x00] => Err(not(
            "it is a core WebAssembly module; turn it into a component (`wasm-tools component new`, or build for wasm32-wasip2)",
        )),
        _ => Err(not("unknown WebAssembly version or layer")),
    }
}

/// Imports of our own package must be of the version this host implements.
fn check_version(
    path: &Path,
    engine: &Engine,
    component: &wasmtime::component::Component,
) -> Result<(), TransformError> {
    for (name, _) in component.component_type().imports(engine) {
        if let Some(rest) = name.strip_prefix(&format!("{WIT_PACKAGE}/")) {
            let version = rest.split_once('@').map(|(_, v)| v);
            if version != Some(WIT_VERSION) {
                return Err(TransformError::IncompatibleVersion {
                    path: path.to_path_buf(),
                    found: name.to_string(),
                });
            }
        }
    }
    Ok(())
}

/// The world's two functions must be exported.
fn check_exports(
    path: &Path,
    engine: &Engine,
    component: &wasmtime::component::Component,
) -> Result<(), TransformError> {
    let ty = component.component_type();
    let exports: Vec<String> = ty
        .exports(engine)
        .filter(|(_, item)| matches!(item.ty, ComponentItem::ComponentFunc(_)))
        .map(|(name, _)| name.to_string())
        .collect();
    for needed in ["init", "process"] {
        if !exports.iter().any(|e| e == needed) {
            return Err(TransformError::WrongWorld {
                path: path.to_path_buf(),
                reason: format!(
                    "it exports no function `{needed}` (it exports: {})",
                    list_or_none(&exports)
                ),
            });
        }
    }
    Ok(())
}

fn list_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "nothing".into()
    } else {
        items.join(", ")
    }
}

/// Describes a failed call for a dead letter or a log line.
fn describe_failure(error: &wasmtime::Error, limits: &Limits, guest_said: Option<&str>) -> String {
    let mut text = match error.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => format!(
            "the transform ran past its CPU deadline of {:?} (transform.call_timeout)",
            limits.call_timeout
        ),
        Some(Trap::StackOverflow) => format!(
            "the transform overflowed its {} KiB stack (transform.max_stack)",
            limits.max_stack / 1024
        ),
        Some(trap) => format!("the transform trapped: {trap}"),
        None => format!("the transform failed: {}", error.root_cause()),
    };
    if let Some(said) = guest_said {
        text.push_str(&format!(" (it logged: {said})"));
    }
    text
}

/// A failed guest call: its description.
struct Fault(String);

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
        check_header(&path, &bytes)?;
        if let Some(dir) = &spec.cache_dir {
            cache::ensure_private(dir)?;
        }
        let engine = shared_engine(limits.max_stack)?;
        let started = Instant::now();
        let (component, source) = cache::load_or_compile(&engine, &bytes, spec.cache_dir.as_deref())
            .map_err(|e| TransformError::Compile {
                path: path.clone(),
                reason: format!("{e:#}"),
            })?;
        let load_info = LoadInfo {
            source,
            compile_time: started.elapsed(),
        };
        check_version(&path, &engine, &component)?;

        let mut linker: Linker<GuestState> = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
            .map_err(|e| TransformError::Setting(format!("cannot link WASI: {e}")))?;
        // Replace the monotonic clock with one whose sleeps return at once
        // (see `clocks`): no guest may block its thread past `call_timeout`.
        linker.allow_shadowing(true);
        wasmtime_wasi::p2::bindings::clocks::monotonic_clock::add_to_linker::<_, clocks::NonBlockingClocks>(
            &mut linker,
            GuestState::clocks,
        )
        .map_err(|e| TransformError::Setting(format!("cannot link the clock: {e}")))?;
        linker.allow_shadowing(false);
        bindings::Transform::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)
            .map_err(|e| TransformError::Setting(format!("cannot link the host interface: {e}")))?;
        let instance_pre = linker
            .instantiate_pre(&component)
            .map_err(|e| TransformError::WrongWorld {
                path: path.clone(),
                reason: format!("{e:#}"),
            })?;
        check_exports(&path, &engine, &component)?;
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
            tables: tables.to_vec(),
            wit_tables,
            pool: Mutex::new(Vec::new()),
            stats: TransformStats::default(),
            load_info,
        };
        let first = transform.new_instance()?;
        transform.give_back(first);
        Ok(transform)
    }

    /// How the component was obtained.
    pub fn load_info(&self) -> LoadInfo {
        self.load_info
    }

    /// The transform's counters.
    pub fn stats(&self) -> &TransformStats {
        &self.stats
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    fn deadline_ticks(&self) -> u64 {
        let tick = EPOCH_TICK.as_nanos();
        (self.limits.call_timeout.as_nanos().div_ceil(tick) as u64).max(1) + 1
    }

    fn new_instance(&self) -> Result<Instance, TransformError> {
        let mut store = Store::new(
            &self.engine,
            GuestState::new(self.name.clone(), self.limits.max_memory),
        );
        store.limiter(|s| &mut s.limiter);
        store.epoch_deadline_trap();
        store.set_epoch_deadline(self.deadline_ticks());
        let bindings = self
            .pre
            .instantiate(&mut store)
            .map_err(|e| TransformError::Instantiate {
                path: self.path.clone(),
                reason: describe_failure(&e, &self.limits, None),
            })?;
        self.stats.instances_created.fetch_add(1, Ordering::Relaxed);

        let config: Vec<(&str, &str)> = self
            .config
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let columns: Vec<Vec<wit::Column<'_>>> = self
            .wit_tables
            .iter()
            .map(|t| {
                t.columns
                    .iter()
                    .map(|(name, data_type, nullable)| wit::Column {
                        name,
                        data_type,
                        nullable: *nullable,
                    })
                    .collect()
            })
            .collect();
        let keys: Vec<Vec<&str>> = self
            .wit_tables
            .iter()
            .map(|t| t.primary_key.iter().map(String::as_str).collect())
            .collect();
        let tables: Vec<wit::TableSchema<'_>> = self
            .wit_tables
            .iter()
            .zip(&columns)
            .zip(&keys)
            .map(|((t, columns), keys)| wit::TableSchema {
                path: &t.path,
                columns,
                primary_key: keys,
            })
            .collect();
        let init_failed = |reason| TransformError::Init {
            path: self.path.clone(),
            reason,
        };
        match bindings.call_init(&mut store, &config, &tables) {
            Ok(Ok(())) => Ok(Instance { store, bindings }),
            Ok(Err(message)) => Err(init_failed(message)),
            Err(e) => Err(init_failed(describe_failure(
                &e,
                &self.limits,
                store.data().last_error.as_deref(),
            ))),
        }
    }

    fn take_instance(&self) -> Result<Instance, TransformError> {
        let pooled = self.pool.lock().unwrap_or_else(|e| e.into_inner()).pop();
        match pooled {
            Some(instance) => Ok(instance),
            None => self.new_instance(),
        }
    }

    fn give_back(&self, instance: Instance) {
        if instance.store.data().limiter.peak > self.limits.recycle_memory {
            self.stats.recycled.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                transform = &*self.name,
                "recycling an instance past the memory high-water mark"
            );
            return;
        }
        self.pool.lock().unwrap_or_else(|e| e.into_inner()).push(instance);
    }

    /// Runs the transform over `batch`: one outcome per message, in order.
    /// Messages that make the transform fail are dead-lettered with the
    /// reason; rows that do not fit a known table's schema dead-letter their
    /// message. Errors only when no instance can be started at all.
    pub fn process(&self, batch: &MessageBatch) -> Result<TransformOutput, TransformError> {
        if batch.is_empty() {
            return Ok(TransformOutput::default());
        }
        let mut output = match self.attempt(batch)? {
            Ok(output) => output,
            Err(Fault(first)) => {
                tracing::warn!(
                    transform = &*self.name,
                    messages = batch.len(),
                    "{first}; retrying the batch on a fresh instance"
                );
                match self.attempt(batch)? {
                    Ok(output) => output,
                    Err(fault) => {
                        let mut budget = self.limits.max_faults_per_batch;
                        self.isolate(batch, fault, &mut budget)?
                    }
                }
            }
        };
        output.check_rows(|name| match name {
            None => self.tables.first(),
            // Compared with the names made at load, not formatted per row.
            Some(name) => self
                .wit_tables
                .iter()
                .position(|t| t.path == name)
                .map(|i| &self.tables[i]),
        });
        Ok(output)
    }

    /// Bisects a failing batch until each failing message stands alone.
    fn isolate(
        &self,
        batch: &MessageBatch,
        fault: Fault,
        budget: &mut u32,
    ) -> Result<TransformOutput, TransformError> {
        if batch.len() == 1 {
            return Ok(dead_letters(1, &fault.0));
        }
        let mid = batch.len() / 2;
        let mut output = TransformOutput::default();
        let mut last = fault;
        for range in [0..mid, mid..batch.len()] {
            let part = batch.slice(range);
            let part_output = if *budget == 0 {
                dead_letters(
                    part.len(),
                    &format!(
                        "not isolated: the transform failed {} times on this batch (transform.max_faults_per_batch); last failure: {}",
                        self.limits.max_faults_per_batch, last.0
                    ),
                )
            } else {
                match self.attempt(&part)? {
                    Ok(o) => o,
                    Err(f) => {
                        *budget -= 1;
                        let described = Fault(f.0.clone());
                        last = f;
                        self.isolate(&part, described, budget)?
                    }
                }
            };
            output.append(part_output);
        }
        Ok(output)
    }

    /// One call to the guest on `batch`.
    fn attempt(&self, batch: &MessageBatch) -> Result<Result<TransformOutput, Fault>, TransformError> {
        let mut instance = self.take_instance()?;
        self.stats.calls.fetch_add(1, Ordering::Relaxed);
        instance.store.set_epoch_deadline(self.deadline_ticks());
        instance.store.data_mut().last_error = None;

        let headers: Vec<wit::Header<'_>> = batch
            .headers
            .iter()
            .map(|h| wit::Header {
                key: &h.key,
                kind: header_kind(h.kind),
                value: &h.value,
            })
            .collect();
        let input = wit::Batch {
            stream: &batch.source.stream,
            topic: &batch.source.topic,
            partition: batch.source.partition,
            offsets: &batch.offsets,
            ids: &batch.ids,
            timestamps: &batch.timestamps,
            payloads: &batch.payloads,
            payload_ends: &batch.payload_ends,
            headers: &headers,
            header_ends: &batch.header_ends,
        };
        let result = instance.bindings.call_process(&mut instance.store, input);
        let raw = match result {
            Ok(raw) => raw,
            Err(e) => {
                self.stats.faults.fetch_add(1, Ordering::Relaxed);
                let text = describe_failure(&e, &self.limits, instance.store.data().last_error.as_deref());
                // A failed instance is never reused.
                return Ok(Err(Fault(text)));
            }
        };
        let checked = self.check_output(batch.len(), raw);
        if checked.is_err() {
            self.stats.faults.fetch_add(1, Ordering::Relaxed);
        }
        self.give_back(instance);
        Ok(checked)
    }

    fn check_output(&self, messages: usize, raw: wit::BatchOutput) -> Result<TransformOutput, Fault> {
        if raw.outcomes.len() != messages {
            return Err(Fault(format!(
                "the transform returned {} outcomes for {messages} messages; it must return exactly one per message",
                raw.outcomes.len()
            )));
        }
        if raw.rows.len() > self.limits.max_output_bytes {
            return Err(Fault(format!(
                "the transform returned {} bytes of rows, over the cap of {} (transform.max_output_bytes)",
                raw.rows.len(),
                self.limits.max_output_bytes
            )));
        }
        let mut counts = Vec::with_capacity(messages);
        let mut outcomes = Vec::with_capacity(messages);
        for outcome in raw.outcomes {
            match outcome {
                wit::Outcome::Rows(n) => {
                    counts.push(n);
                    outcomes.push(MessageOutcome::Rows(n));
                }
                wit::Outcome::DeadLetter(reason) => {
                    counts.push(0);
                    outcomes.push(MessageOutcome::DeadLetter(reason));
                }
            }
        }
        let total: u64 = counts.iter().map(|&c| c as u64).sum();
        if total > self.limits.max_rows_per_batch as u64 {
            return Err(Fault(format!(
                "the transform returned {total} rows, over the cap of {} (transform.max_rows_per_batch)",
                self.limits.max_rows_per_batch
            )));
        }
        let rows = RowBatch::from_encoded(raw.rows, raw.tables, &counts)
            .map_err(|e| Fault(format!("the transform returned malformed rows: {e}")))?;
        Ok(TransformOutput { outcomes, rows })
    }
}

fn dead_letters(count: usize, reason: &str) -> TransformOutput {
    TransformOutput {
        outcomes: vec![MessageOutcome::DeadLetter(reason.to_string()); count],
        rows: RowBatch::default(),
    }
}

fn header_kind(kind: crate::batch::HeaderKind) -> wit::HeaderKind {
    use crate::batch::HeaderKind as K;
    match kind {
        K::Raw => wit::HeaderKind::Raw,
        K::String => wit::HeaderKind::String,
        K::Bool => wit::HeaderKind::Bool,
        K::Int8 => wit::HeaderKind::Int8,
        K::Int16 => wit::HeaderKind::Int16,
        K::Int32 => wit::HeaderKind::Int32,
        K::Int64 => wit::HeaderKind::Int64,
        K::Int128 => wit::HeaderKind::Int128,
        K::Uint8 => wit::HeaderKind::Uint8,
        K::Uint16 => wit::HeaderKind::Uint16,
        K::Uint32 => wit::HeaderKind::Uint32,
        K::Uint64 => wit::HeaderKind::Uint64,
        K::Uint128 => wit::HeaderKind::Uint128,
        K::Float32 => wit::HeaderKind::Float32,
        K::Float64 => wit::HeaderKind::Float64,
    }
}
