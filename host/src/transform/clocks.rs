//! `wasi:clocks/monotonic-clock` without sleeping: a guest asking to wait
//! for a duration or an instant gets a pollable that is ready at once.
//!
//! Wasmtime's epoch deadline interrupts WebAssembly code, not a host call:
//! a guest blocked in `poll` on a clock (`time.sleep` in Python,
//! `std::thread::sleep` in Rust) would hold its thread past `call_timeout`.
//! Transforms are functions of their input and have nothing to wait for, so
//! every sleep returns at once; a guest that waits by reading the clock in
//! a loop spins instead, and the epoch deadline stops it like any other
//! loop. Reading the clock (`now`) is unchanged. Clocks are the guest's
//! only blocking calls: the WASI context grants no sockets, no files, and
//! an empty stdin; stdout and stderr are always ready.

use wasmtime::component::{HasData, Resource, ResourceTable};
use wasmtime_wasi::p2::bindings::clocks::monotonic_clock;
use wasmtime_wasi::p2::{DynPollable, Pollable, subscribe};

/// The [`HasData`] marker for [`NonBlockingClock`].
pub(super) struct NonBlockingClocks;

impl HasData for NonBlockingClocks {
    type Data<'a> = NonBlockingClock<'a>;
}

/// A store's view for the monotonic clock: its resource table.
pub(super) struct NonBlockingClock<'a> {
    /// Where pollables go.
    pub table: &'a mut ResourceTable,
}

/// A pollable that is always ready.
struct Ready;

#[async_trait::async_trait]
impl Pollable for Ready {
    async fn ready(&mut self) {}
}

fn ready(table: &mut ResourceTable) -> wasmtime::Result<Resource<DynPollable>> {
    let resource = table.push(Ready)?;
    subscribe(table, resource)
}

/// Nanoseconds since the process's first clock read.
fn now_nanos() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START.get_or_init(std::time::Instant::now).elapsed().as_nanos() as u64
}

impl monotonic_clock::Host for NonBlockingClock<'_> {
    fn now(&mut self) -> wasmtime::Result<monotonic_clock::Instant> {
        Ok(now_nanos())
    }

    fn resolution(&mut self) -> wasmtime::Result<monotonic_clock::Duration> {
        Ok(1)
    }

    fn subscribe_instant(
        &mut self,
        _when: monotonic_clock::Instant,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        ready(self.table)
    }

    fn subscribe_duration(
        &mut self,
        _for: monotonic_clock::Duration,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        ready(self.table)
    }
}
