//! The thread a writer's fluss-rs client sends from.
//!
//! fluss-rs 1.0 sends every write of a connection from one task of its own
//! (the writer client's sender), spawned on the runtime that first asks
//! for the client. Each writer gives that task a runtime of its own, one
//! worker thread named `fluss-sender-<id>`, for two reasons:
//!
//! - **A panic is told apart.** The panic hook ([`super::client_panics`])
//!   sees which writer's sender panicked by the thread's name, so that only
//!   that writer gives its client up. Giving up a healthy client is not
//!   harmless: see the next point.
//! - **A sender that spins cannot stall the sink.** Closing a writer client
//!   (`WriterClient::close`) ends its sender's loop, which then sends what
//!   is left without polling the answers of the requests in flight; while a
//!   bucket holds batches behind its requests in flight, that loop never
//!   yields and never ends. On the sink's own runtime it held one of its
//!   workers for good, and with it the timers of every call (seen as a test
//!   that hung until killed). Here it holds only this thread.
//!
//! The writer therefore never closes its client that way: it stops this
//! runtime ([`SenderThread::stop`]) when it closes, so that its sender,
//! parked in its loop, is dropped there and sends nothing more. A sender
//! left running after its writer closed would go on sending what its
//! client held, to a server that comes back later: batches the spool has
//! kept on disk for the next open, which would then land twice.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::runtime::{EnterGuard, Handle, Runtime};

/// The prefix of a sender thread's name; the writer's id follows.
const NAME: &str = "fluss-sender-";

/// One writer's sender runtime.
#[derive(Debug)]
pub(in crate::writer) struct SenderThread {
    id: u64,
    handle: Handle,
    /// `None` once stopped.
    runtime: Mutex<Option<Runtime>>,
}

impl SenderThread {
    /// Starts a sender thread with an id no other in this process has.
    pub(in crate::writer) fn start() -> std::io::Result<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(format!("{NAME}{id}"))
            .enable_all()
            .build()?;
        Ok(Self {
            id,
            handle: runtime.handle().clone(),
            runtime: Mutex::new(Some(runtime)),
        })
    }

    /// This thread's id (what [`current_sender`] returns on it).
    pub(in crate::writer) fn id(&self) -> u64 {
        self.id
    }

    /// Makes this runtime the one tasks spawned now go to, until the guard
    /// is dropped: a writer client made under it sends from this thread.
    /// Once stopped, tasks spawned under it never run.
    pub(in crate::writer) fn enter(&self) -> EnterGuard<'_> {
        self.handle.enter()
    }
}

impl SenderThread {
    /// Stops the runtime without waiting: a sender that spins (see above)
    /// would never let a waiting shutdown end. Its tasks are dropped where
    /// they wait; tasks spawned after this are never run.
    pub(in crate::writer) fn stop(&self) {
        let runtime = self.runtime.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(runtime) = runtime {
            runtime.shutdown_background();
        }
    }
}

impl Drop for SenderThread {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The id of the writer whose sender thread this is, if it is one.
pub(in crate::writer) fn current_sender() -> Option<u64> {
    std::thread::current().name()?.strip_prefix(NAME)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_spawned_under_the_guard_run_on_the_sender_thread_and_know_its_id() {
        let sender = SenderThread::start().unwrap();
        let other = SenderThread::start().unwrap();
        assert_ne!(sender.id(), other.id());
        let task = {
            let _entered = sender.enter();
            tokio::spawn(async { current_sender() })
        };
        let main = tokio::runtime::Builder::new_current_thread().build().unwrap();
        assert_eq!(main.block_on(task).unwrap(), Some(sender.id()));
        assert_eq!(current_sender(), None, "the test's own thread is no sender");
    }

    #[test]
    fn a_stopped_sender_s_waiting_task_is_dropped_and_runs_no_more() {
        struct Dropped(std::sync::mpsc::Sender<()>);
        impl Drop for Dropped {
            fn drop(&mut self) {
                let _ = self.0.send(());
            }
        }
        let sender = SenderThread::start().unwrap();
        let (dropped, done) = std::sync::mpsc::channel();
        let ticks = std::sync::Arc::new(AtomicU64::new(0));
        {
            let ticks = ticks.clone();
            let _entered = sender.enter();
            // As fluss-rs's sender does between sends: waits, then sends.
            tokio::spawn(async move {
                let _guard = Dropped(dropped);
                loop {
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                    ticks.fetch_add(1, Ordering::SeqCst);
                }
            });
        }
        while ticks.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        sender.stop();
        assert!(
            done.recv_timeout(std::time::Duration::from_secs(10)).is_ok(),
            "the task outlived the stop"
        );
        let after = ticks.load(Ordering::SeqCst);
        let task = {
            let _entered = sender.enter();
            tokio::spawn(async {})
        };
        let main = tokio::runtime::Builder::new_current_thread().build().unwrap();
        assert!(main.block_on(task).is_err(), "a task spawned after the stop ran");
        assert_eq!(
            ticks.load(Ordering::SeqCst),
            after,
            "the task ran after it was dropped"
        );
    }

    #[test]
    fn a_sender_that_never_yields_does_not_hold_up_its_drop() {
        let sender = SenderThread::start().unwrap();
        let spinning = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        {
            let spinning = spinning.clone();
            let _entered = sender.enter();
            tokio::spawn(async move {
                spinning.store(true, Ordering::SeqCst);
                // As fluss-rs's closing sender does: a loop without an await.
                loop {
                    std::hint::spin_loop();
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            });
        }
        while !spinning.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        let (dropped, done) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            drop(sender);
            let _ = dropped.send(());
        });
        // A waiting shutdown would never end: 10 s is only the test's bound.
        assert!(
            done.recv_timeout(std::time::Duration::from_secs(10)).is_ok(),
            "the drop waited for the spinning task"
        );
    }
}
