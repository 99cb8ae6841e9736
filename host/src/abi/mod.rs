//! The connectors runtime's C ABI (`docs/runtime-contract.md`).
//! Only this module touches what the runtime hands over: it turns borrowed
//! pointers into slices, [`decode`]s the postcard buffers, and drives one
//! [`Pipeline`] per instance id on the plugin's own tokio runtime.
//!
//! Return codes: `0` ok; `-1` bad config, unknown or duplicate id, buffers
//! that do not decode; `1` the sink's own open or consume failed (including
//! a caught panic). Panics never cross the boundary.

#[cfg(feature = "test-support")]
pub mod decode;
#[cfg(not(feature = "test-support"))]
pub(crate) mod decode;
pub(crate) mod log;

use std::collections::HashMap;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use tracing::Instrument as _;

use crate::batch::Source;
use crate::config::SinkConfig;
use crate::pipeline::Pipeline;
pub(crate) use log::LogCallback;

/// Returned for success.
const OK: i32 = 0;
/// Returned for a bad config, an unknown or duplicate id, or undecodable buffers.
const REFUSED: i32 = -1;
/// Returned when the sink's own open or consume failed.
const FAILED: i32 = 1;

/// One open instance.
struct Instance {
    pipeline: Arc<Pipeline>,
    in_flight: AtomicUsize,
    closing: AtomicBool,
    close_timeout: Duration,
}

/// Counts a running consume for `close` to wait on; uncounts on drop.
struct InFlight<'a>(&'a Instance);

impl<'a> InFlight<'a> {
    fn enter(instance: &'a Instance) -> Self {
        instance.in_flight.fetch_add(1, Ordering::SeqCst);
        Self(instance)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

fn instances() -> MutexGuard<'static, HashMap<u32, Arc<Instance>>> {
    static INSTANCES: OnceLock<Mutex<HashMap<u32, Arc<Instance>>>> = OnceLock::new();
    INSTANCES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// The stack of the runtime's threads. A write's futures nest deeply (a
/// batch written around the columns added for it writes its parts through
/// the whole write path again), and a debug build's poll frames are large:
/// tokio's default of 2 MiB overflowed there.
const THREAD_STACK: usize = 8 << 20;

/// The plugin's own multi-thread runtime, shared by its instances.
/// `IGGY_FLUSS_SINK_THREADS` sets its worker count (default: cores, at most 4).
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        let workers = std::env::var("IGGY_FLUSS_SINK_THREADS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&n| n > 0)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get().min(4)));
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .thread_name("fluss-sink")
            .thread_stack_size(THREAD_STACK)
            .enable_all()
            .build()
            .expect("the plugin's tokio runtime starts")
    })
}

/// Runs `future` on the plugin's runtime and waits for it on this thread
/// (which may belong to the host's own runtime), for at most `limit`.
fn block_on<T: Send + 'static>(
    future: impl Future<Output = T> + Send + 'static,
    limit: Option<Duration>,
) -> Result<T, String> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    runtime().spawn(async move {
        let _ = tx.send(future.await);
    });
    match limit {
        None => rx.recv().map_err(|_| "the task panicked".to_string()),
        Some(limit) => rx.recv_timeout(limit).map_err(|e| match e {
            std::sync::mpsc::RecvTimeoutError::Timeout => format!("still running after {limit:?}"),
            std::sync::mpsc::RecvTimeoutError::Disconnected => "the task panicked".to_string(),
        }),
    }
}

/// Runs `body`, turning a panic into a logged error and [`FAILED`].
fn guarded(call: &str, id: u32, body: impl FnOnce() -> i32) -> i32 {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(code) => code,
        Err(panic) => {
            let text = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a non-text panic".into());
            let _ = catch_unwind(|| {
                log::instance_span(id)
                    .in_scope(|| tracing::error!("{call} panicked (caught at the plugin boundary): {text}"))
            });
            FAILED
        }
    }
}

/// Borrows `len` bytes at `ptr`; `None` for a null pointer with a length.
///
/// # Safety
/// `ptr` must point to `len` readable bytes that outlive the returned slice.
unsafe fn borrowed<'a>(ptr: *const u8, len: usize) -> Option<&'a [u8]> {
    if len == 0 {
        return Some(&[]);
    }
    if ptr.is_null() {
        return None;
    }
    // SAFETY: the runtime lends `len` bytes at `ptr` for the call (see the caller's contract).
    Some(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// Opens instance `id` with the connector's `[plugin_config]` as JSON.
///
/// # Safety
/// `config_ptr` must point to `config_len` readable bytes for the call.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn iggy_sink_open(
    id: u32,
    config_ptr: *const u8,
    config_len: usize,
    log: Option<LogCallback>,
) -> i32 {
    guarded("open", id, || {
        // Before the first span: a span made with no subscriber is never recorded.
        log::install();
        let span = log::instance_span(id);
        if instances().contains_key(&id) {
            span.in_scope(|| tracing::error!("open refused: instance {id} is already open"));
            return REFUSED;
        }
        log::register(id, log);
        let _entered = span.enter();
        // SAFETY: the runtime lends the config bytes for the call.
        let Some(bytes) = (unsafe { borrowed(config_ptr, config_len) }) else {
            tracing::error!("open refused: the config pointer is null");
            log::unregister(id);
            return REFUSED;
        };
        let config = match std::str::from_utf8(bytes)
            .map_err(|e| format!("the config is not UTF-8: {e}"))
            .and_then(|text| SinkConfig::from_json(text).map_err(|e| e.to_string()))
        {
            Ok(c) => c,
            Err(e) => {
                tracing::error!("open refused: {e}");
                log::unregister(id);
                return REFUSED;
            }
        };
        let close_timeout = config.close_timeout;
        let opened = block_on(
            Pipeline::open(config, id).instrument(tracing::Span::current()),
            None,
        );
        let pipeline = match opened.and_then(|r| r.map_err(|e| e.to_string())) {
            Ok(p) => p,
            Err(e) => {
                tracing::error!("open failed: {e}");
                log::unregister(id);
                return FAILED;
            }
        };
        let mut open = instances();
        if open.contains_key(&id) {
            drop(open);
            tracing::error!("open refused: instance {id} was opened meanwhile");
            let p = pipeline.clone();
            let _ = block_on(
                async move { p.close(close_timeout).await },
                Some(close_timeout * 2),
            );
            return REFUSED;
        }
        open.insert(
            id,
            Arc::new(Instance {
                pipeline,
                in_flight: AtomicUsize::new(0),
                closing: AtomicBool::new(false),
                close_timeout,
            }),
        );
        OK
    })
}

/// Writes one batch of messages for instance `id`.
///
/// # Safety
/// Each pointer must point to its length of readable bytes for the call.
#[unsafe(no_mangle)]
pub(crate) unsafe extern "C" fn iggy_sink_consume(
    id: u32,
    topic_meta_ptr: *const u8,
    topic_meta_len: usize,
    messages_meta_ptr: *const u8,
    messages_meta_len: usize,
    messages_ptr: *const u8,
    messages_len: usize,
) -> i32 {
    guarded("consume", id, || {
        let span = log::instance_span(id);
        let _entered = span.enter();
        let Some(instance) = instances().get(&id).cloned() else {
            tracing::error!("consume refused: no open instance {id}");
            return REFUSED;
        };
        let _in_flight = InFlight::enter(&instance);
        if instance.closing.load(Ordering::SeqCst) {
            tracing::error!("consume refused: instance {id} is closing");
            return REFUSED;
        }
        // SAFETY: the runtime lends the three buffers for the call.
        let buffers = unsafe {
            (
                borrowed(topic_meta_ptr, topic_meta_len),
                borrowed(messages_meta_ptr, messages_meta_len),
                borrowed(messages_ptr, messages_len),
            )
        };
        let (Some(topic_meta), Some(messages_meta), Some(messages)) = buffers else {
            tracing::error!("consume refused: a buffer pointer is null");
            return REFUSED;
        };
        let decoded = decode::topic_metadata(topic_meta).and_then(|(stream, topic)| {
            let meta = decode::messages_metadata(messages_meta)?;
            let source = Source {
                stream,
                topic,
                partition: meta.partition_id,
            };
            decode::raw_messages(messages, source)
        });
        let (schema, batch) = match decoded {
            Ok(d) => d,
            Err(e) => {
                tracing::error!("consume refused: {e}");
                return REFUSED;
            }
        };
        if batch.is_empty() {
            return OK;
        }
        let pipeline = instance.pipeline.clone();
        let work = async move { pipeline.consume(schema, batch).await }.instrument(span.clone());
        match block_on(work, None).and_then(|r| r.map_err(|e| e.to_string())) {
            Ok(_) => OK,
            Err(e) => {
                tracing::error!("consume failed: {e}");
                FAILED
            }
        }
    })
}

/// Closes instance `id`: waits up to `close_timeout` for running consumes,
/// then closes its Fluss connection. Never blocks for longer than twice that.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn iggy_sink_close(id: u32) -> i32 {
    guarded("close", id, || {
        let span = log::instance_span(id);
        let _entered = span.enter();
        let Some(instance) = instances().remove(&id) else {
            tracing::error!("close refused: no open instance {id}");
            return REFUSED;
        };
        instance.closing.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + instance.close_timeout;
        while instance.in_flight.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let running = instance.in_flight.load(Ordering::SeqCst);
        if running > 0 {
            tracing::warn!(
                "{running} consume call(s) still running after {:?}; closing anyway, their \
                 unacknowledged messages are logged as they fail",
                instance.close_timeout
            );
        }
        let pipeline = instance.pipeline.clone();
        let timeout = instance.close_timeout;
        if let Err(e) = block_on(
            async move { pipeline.close(timeout).await }.instrument(span.clone()),
            Some(timeout + Duration::from_secs(1)),
        ) {
            tracing::warn!("closing the Fluss connection: {e}");
        }
        log::unregister(id);
        OK
    })
}

/// The plugin's version, a static NUL-terminated string.
#[unsafe(no_mangle)]
pub(crate) extern "C" fn iggy_sink_version() -> *const std::ffi::c_char {
    static VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");
    VERSION.as_ptr().cast()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_a_failure_code_not_an_unwind() {
        let code = guarded("consume", 42, || panic!("boom"));
        assert_eq!(code, FAILED);
        assert_eq!(guarded("consume", 42, || OK), OK);
    }

    #[test]
    fn null_buffers_with_a_length_are_refused_and_empty_ones_are_empty() {
        // SAFETY: a null pointer is never read; a zero length reads nothing.
        unsafe {
            assert_eq!(borrowed(std::ptr::null(), 0), Some(&[][..]));
            assert_eq!(borrowed(std::ptr::null(), 5), None);
        }
    }

    #[test]
    fn the_version_is_nul_terminated() {
        // SAFETY: the pointer is to a static NUL-terminated string.
        let version = unsafe { std::ffi::CStr::from_ptr(iggy_sink_version()) };
        assert_eq!(version.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
    }
}
