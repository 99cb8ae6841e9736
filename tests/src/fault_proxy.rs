//! A TCP proxy that misbehaves on demand, for the network-fault tests.
//!
//! It listens on one port and forwards every connection to one upstream
//! address, byte for byte, until a test sets a [`Fault`] on one direction:
//! then it stalls (holds the bytes, answers nothing, keeps the socket open),
//! trickles them, delays them, drops them, or resets both sockets; or it
//! stalls only the connections open at that moment, for good, and passes
//! the ones opened later. A fault
//! set mid-request takes effect on the next chunk that direction reads, so a
//! stall can land in the middle of a large append. Every forwarded byte is
//! counted per direction, so a test can show where its fault landed.
//!
//! The local cluster puts it between clients and a tablet server with
//! `FLUSS_CLIENT_PROXY_PORT` (see `scripts/fluss-local.sh`): the tablet
//! server advertises the proxy's port to clients, while the servers and
//! ZooKeeper keep talking to each other directly.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread;
use std::time::Duration;

/// Which way bytes travel through the proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// From the client (the sink) to the server (Fluss): requests.
    ToServer,
    /// From the server to the client: responses.
    ToClient,
}

/// What the proxy does with the bytes of one direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Forward at once.
    Pass,
    /// Hold every byte and forward nothing, keeping the sockets open, as a
    /// hung server or a network that silently stops would.
    Stall,
    /// Forward this many more bytes, then stall.
    StallAfter(u64),
    /// Forward at most this many bytes every 100 ms.
    Trickle(usize),
    /// Forward each chunk this long after it arrived.
    Delay(Duration),
    /// Read and discard every byte.
    Drop,
    /// On the next byte, reset both sockets of that connection (RST), then
    /// pass again: a connection that dies between a request and its response.
    ResetOnce,
}

struct Shared {
    faults: Mutex<[Fault; 2]>,
    /// What remains of a `StallAfter` budget, per direction.
    budget: [AtomicU64; 2],
    forwarded: [AtomicU64; 2],
    /// Per direction: connections numbered below this stall in it, whatever
    /// the fault (see [`FaultProxy::stall_open`]); 0 stalls none.
    stalled_below: [AtomicU64; 2],
    connections: AtomicU64,
    resets: AtomicU64,
    stopping: AtomicBool,
    /// Every socket the proxy holds, to close them when it stops.
    open: Mutex<Vec<Weak<TcpStream>>>,
}

impl Shared {
    fn fault(&self, direction: Direction) -> Fault {
        self.faults.lock().unwrap()[index(direction)]
    }

    fn set(&self, direction: Direction, fault: Fault) {
        if let Fault::StallAfter(bytes) = fault {
            self.budget[index(direction)].store(bytes, Ordering::SeqCst);
        }
        self.faults.lock().unwrap()[index(direction)] = fault;
    }
}

fn index(direction: Direction) -> usize {
    match direction {
        Direction::ToServer => 0,
        Direction::ToClient => 1,
    }
}

/// A running proxy; stops (closing every connection) when dropped.
pub struct FaultProxy {
    port: u16,
    shared: Arc<Shared>,
}

impl FaultProxy {
    /// Listens on `127.0.0.1:port` and forwards to `upstream`.
    pub fn start(port: u16, upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .unwrap_or_else(|e| panic!("the fault proxy cannot listen on port {port}: {e}"));
        listener.set_nonblocking(true).expect("a non-blocking listener");
        let shared = Arc::new(Shared {
            faults: Mutex::new([Fault::Pass; 2]),
            budget: [AtomicU64::new(0), AtomicU64::new(0)],
            forwarded: [AtomicU64::new(0), AtomicU64::new(0)],
            stalled_below: [AtomicU64::new(0), AtomicU64::new(0)],
            connections: AtomicU64::new(0),
            resets: AtomicU64::new(0),
            stopping: AtomicBool::new(false),
            open: Mutex::new(Vec::new()),
        });
        let accepting = shared.clone();
        thread::Builder::new()
            .name(format!("fault-proxy-{port}"))
            .spawn(move || accept_loop(listener, upstream, accepting))
            .expect("spawn the proxy's accept thread");
        Self { port, shared }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Sets what happens to the bytes of `direction` from their next chunk on.
    pub fn set(&self, direction: Direction, fault: Fault) {
        self.shared.set(direction, fault);
    }

    /// Stalls `direction` on every connection open now, for good (a peer
    /// that hangs without closing the socket), while connections opened
    /// later pass: what only a client that gives up on a connection and
    /// opens another gets through.
    pub fn stall_open(&self, direction: Direction) {
        let open = self.shared.connections.load(Ordering::SeqCst);
        self.shared.stalled_below[index(direction)].store(open + 1, Ordering::SeqCst);
    }

    /// Both directions back to [`Fault::Pass`].
    pub fn heal(&self) {
        self.set(Direction::ToServer, Fault::Pass);
        self.set(Direction::ToClient, Fault::Pass);
    }

    /// Bytes forwarded so far in `direction`.
    pub fn forwarded(&self, direction: Direction) -> u64 {
        self.shared.forwarded[index(direction)].load(Ordering::SeqCst)
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// Connections reset by [`Fault::ResetOnce`] so far.
    pub fn resets(&self) -> u64 {
        self.shared.resets.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        for stream in self.shared.open.lock().unwrap().drain(..) {
            if let Some(stream) = stream.upgrade() {
                let _ = stream.shutdown(Shutdown::Both);
            }
        }
    }
}

fn accept_loop(listener: TcpListener, upstream: SocketAddr, shared: Arc<Shared>) {
    while !shared.stopping.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, _)) => {
                // Numbered from 1, in the order accepted.
                let number = shared.connections.fetch_add(1, Ordering::SeqCst) + 1;
                let Ok(server) = TcpStream::connect_timeout(&upstream, Duration::from_secs(5)) else {
                    continue; // the client sees its connection closed, as with a dead server
                };
                for stream in [&client, &server] {
                    stream.set_nonblocking(false).expect("a blocking socket");
                    let _ = stream.set_nodelay(true);
                }
                let (client, server) = (Arc::new(client), Arc::new(server));
                {
                    let mut open = shared.open.lock().unwrap();
                    open.retain(|s| s.strong_count() > 0);
                    open.push(Arc::downgrade(&client));
                    open.push(Arc::downgrade(&server));
                }
                let was_reset = Arc::new(AtomicBool::new(false));
                spawn_pump(&client, &server, Direction::ToServer, number, &shared, &was_reset);
                spawn_pump(&server, &client, Direction::ToClient, number, &shared, &was_reset);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => thread::sleep(Duration::from_millis(10)),
            Err(_) => thread::sleep(Duration::from_millis(10)),
        }
    }
}

fn spawn_pump(
    from: &Arc<TcpStream>,
    to: &Arc<TcpStream>,
    direction: Direction,
    number: u64,
    shared: &Arc<Shared>,
    was_reset: &Arc<AtomicBool>,
) {
    let (from, to, shared, was_reset) = (from.clone(), to.clone(), shared.clone(), was_reset.clone());
    let link = Link { direction, number };
    thread::spawn(move || pump(&from, &to, link, &shared, &was_reset));
}

/// One direction of one connection.
#[derive(Clone, Copy)]
struct Link {
    direction: Direction,
    /// The connection's number, from 1 in the order accepted.
    number: u64,
}

/// Copies `from` to `to` under the direction's fault until either side
/// closes; passes the close on (FIN), unless the fault reset the connection.
fn pump(from: &TcpStream, to: &TcpStream, link: Link, shared: &Shared, was_reset: &AtomicBool) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match (&*from).read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        match deliver(&buf[..n], to, from, link, shared) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::ConnectionReset => {
                was_reset.store(true, Ordering::SeqCst);
                return;
            }
            Err(_) => break,
        }
    }
    if !was_reset.load(Ordering::SeqCst) {
        let _ = to.shutdown(Shutdown::Write);
    }
}

/// Delivers one chunk under the fault in force, re-reading the fault as it
/// goes so that a heal releases a stalled chunk.
fn deliver(
    mut chunk: &[u8],
    to: &TcpStream,
    from: &TcpStream,
    link: Link,
    shared: &Shared,
) -> std::io::Result<()> {
    let Link { direction, number } = link;
    let i = index(direction);
    while !chunk.is_empty() {
        if shared.stopping.load(Ordering::SeqCst) {
            return Err(ErrorKind::ConnectionAborted.into());
        }
        if number < shared.stalled_below[i].load(Ordering::SeqCst) {
            thread::sleep(Duration::from_millis(20));
            continue;
        }
        let take = match shared.fault(direction) {
            Fault::Pass => chunk.len(),
            Fault::Stall => {
                thread::sleep(Duration::from_millis(20));
                continue;
            }
            Fault::StallAfter(_) => {
                let left = shared.budget[i].load(Ordering::SeqCst);
                if left == 0 {
                    thread::sleep(Duration::from_millis(20));
                    continue;
                }
                let take = chunk.len().min(left as usize);
                shared.budget[i].fetch_sub(take as u64, Ordering::SeqCst);
                take
            }
            Fault::Trickle(per_tick) => {
                thread::sleep(Duration::from_millis(100));
                chunk.len().min(per_tick.max(1))
            }
            Fault::Delay(delay) => {
                thread::sleep(delay);
                chunk.len()
            }
            Fault::Drop => return Ok(()),
            Fault::ResetOnce => {
                shared.set(direction, Fault::Pass);
                shared.resets.fetch_add(1, Ordering::SeqCst);
                reset(to);
                reset(from);
                return Err(ErrorKind::ConnectionReset.into());
            }
        };
        (&*to).write_all(&chunk[..take])?;
        shared.forwarded[i].fetch_add(take as u64, Ordering::SeqCst);
        chunk = &chunk[take..];
    }
    Ok(())
}

/// Makes `stream` end with an RST rather than a FIN: SO_LINGER 0, then a
/// read shutdown (which sends nothing) wakes the pump blocked reading it, so
/// both pumps return and the last handle's close sends the RST.
fn reset(stream: &TcpStream) {
    let _ = socket2::SockRef::from(stream).set_linger(Some(Duration::ZERO));
    let _ = stream.shutdown(Shutdown::Read);
}
