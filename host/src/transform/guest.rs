//! The state each transform instance's store holds: an empty WASI context,
//! the memory limiter, and the routing of guest logs and stdio to `tracing`.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::iggy::fluss_sink::host::{self, Level};

/// Longest guest log line kept; the rest is cut.
const MAX_LOG_LINE: usize = 4096;

/// Per-instance store data.
pub(super) struct GuestState {
    wasi: WasiCtx,
    table: ResourceTable,
    /// The memory limiter, also the high-water mark.
    pub limiter: MemoryLimiter,
    name: Arc<str>,
    /// The last error-level line the guest logged during the current call
    /// (a Rust guest's panic message arrives this way before it traps).
    pub last_error: Option<String>,
}

impl GuestState {
    /// State for an instance of transform `name` with `max_memory` bytes.
    pub(super) fn new(name: Arc<str>, max_memory: usize) -> Self {
        // Grants nothing: no preopened folders, no sockets, no environment,
        // no arguments; stdin is empty and stdout/stderr go to the log.
        let wasi = WasiCtxBuilder::new()
            .stdout(GuestOutput {
                name: name.clone(),
                stream: "stdout",
            })
            .stderr(GuestOutput {
                name: name.clone(),
                stream: "stderr",
            })
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        Self {
            wasi,
            table: ResourceTable::new(),
            limiter: MemoryLimiter {
                max: max_memory,
                total: 0,
                peak: 0,
            },
            name,
            last_error: None,
        }
    }
}

impl GuestState {
    /// The view the non-blocking monotonic clock works on.
    pub(super) fn clocks(&mut self) -> super::clocks::NonBlockingClock<'_> {
        super::clocks::NonBlockingClock {
            table: &mut self.table,
        }
    }
}

impl WasiView for GuestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

fn cut(message: &str) -> &str {
    if message.len() <= MAX_LOG_LINE {
        return message;
    }
    let mut end = MAX_LOG_LINE;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    &message[..end]
}

impl host::Host for GuestState {
    fn log(&mut self, level: Level, message: String) {
        let message = cut(&message);
        let transform = &*self.name;
        match level {
            Level::Trace => tracing::trace!(target: "fluss_sink::guest", transform, "{message}"),
            Level::Debug => tracing::debug!(target: "fluss_sink::guest", transform, "{message}"),
            Level::Info => tracing::info!(target: "fluss_sink::guest", transform, "{message}"),
            Level::Warn => tracing::warn!(target: "fluss_sink::guest", transform, "{message}"),
            Level::Error => {
                tracing::error!(target: "fluss_sink::guest", transform, "{message}");
                self.last_error = Some(message.to_string());
            }
        }
    }
}

impl super::bindings::iggy::fluss_sink::types::Host for GuestState {}

/// Caps the linear memory of all of an instance's memories together, and
/// remembers the most it reached.
pub(super) struct MemoryLimiter {
    max: usize,
    total: usize,
    /// The most memory the instance has held, in bytes.
    pub peak: usize,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let total = self.total - current.min(self.total) + desired;
        if total > self.max {
            wasmtime::bail!(
                "memory limit exceeded: the transform asked for {total} bytes, the cap (transform.max_memory) is {} bytes",
                self.max
            );
        }
        self.total = total;
        self.peak = self.peak.max(total);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

/// A guest's stdout or stderr, written to the log one write at a time.
#[derive(Clone)]
struct GuestOutput {
    name: Arc<str>,
    stream: &'static str,
}

impl GuestOutput {
    fn emit(&self, bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            tracing::info!(target: "fluss_sink::guest", transform = &*self.name, stream = self.stream, "{}", cut(line));
        }
    }
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[async_trait::async_trait]
impl OutputStream for GuestOutput {
    fn write(&mut self, bytes: bytes::Bytes) -> Result<(), StreamError> {
        self.emit(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        Ok(64 * 1024)
    }
}

#[async_trait::async_trait]
impl Pollable for GuestOutput {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for GuestOutput {
    fn poll_write(self: Pin<&mut Self>, _cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        self.emit(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
