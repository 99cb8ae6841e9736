//! **Workaround, to be removed once fluss-rs sets `TCP_NODELAY` itself.**
//!
//! fluss-rs 1.0 opens its connections with a plain `TcpStream::connect` and
//! never sets `TCP_NODELAY`. A request a little larger than one TCP segment
//! then waits out the peer's delayed ACK (Nagle's algorithm): about 44 ms a
//! round trip, which turned 1,000-row batches of ~400-byte messages from
//! hundreds of thousands of messages a second into about 20,000.
//!
//! The client's sockets cannot be reached through its API, so this module
//! finds them in the process's own descriptor table (`/proc/self/fd`): every
//! TCP socket whose peer is a server of the cluster gets `TCP_NODELAY`. A
//! [`Sweeper`] does that right after the writer connects, whenever it opens
//! a table, and every [`SWEEP_INTERVAL`] in the background, so that a
//! connection the client opens later (a new tablet server, a reconnect) is
//! covered within that interval. Sockets of anyone else are left alone.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fluss::client::FlussConnection;

/// How often the background sweep looks for new connections.
pub(crate) const SWEEP_INTERVAL: Duration = Duration::from_millis(250);

/// A TCP socket of this process and its peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PeerSocket {
    /// The descriptor.
    pub fd: RawFd,
    /// Where it is connected.
    pub peer: SocketAddr,
    /// Whether `TCP_NODELAY` is set.
    pub nodelay: bool,
}

/// The connected TCP sockets of this process whose peer is in `peers`.
pub(crate) fn peer_sockets(peers: &HashSet<SocketAddr>) -> Vec<PeerSocket> {
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let Some(fd) = entry.file_name().to_str().and_then(|n| n.parse::<RawFd>().ok()) else {
            continue;
        };
        // Only sockets: the link of a socket descriptor reads `socket:[inode]`.
        let is_socket = std::fs::read_link(entry.path())
            .is_ok_and(|target| target.as_os_str().as_encoded_bytes().starts_with(b"socket:"));
        if !is_socket {
            continue;
        }
        // SAFETY: `fd` was open a moment ago and is only borrowed for the
        // calls below, never closed. Another thread may close it meanwhile
        // and the number be reused: the calls then fail (not a socket) or
        // act on the new socket, which is changed only if it too is
        // connected to a server of the cluster.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        let socket = socket2::SockRef::from(&borrowed);
        let Some(peer) = socket.peer_addr().ok().and_then(|a| a.as_socket()) else {
            continue;
        };
        if !peers.contains(&peer) {
            continue;
        }
        let Ok(nodelay) = socket.tcp_nodelay() else {
            continue;
        };
        found.push(PeerSocket { fd, peer, nodelay });
    }
    found
}

/// Sets `TCP_NODELAY` on every socket of this process connected to one of
/// `peers`; returns how many it had to change.
pub(crate) fn sweep(peers: &HashSet<SocketAddr>) -> usize {
    let mut changed = 0;
    for socket in peer_sockets(peers).into_iter().filter(|s| !s.nodelay) {
        // SAFETY: as in `peer_sockets`: borrowed for one call, never closed.
        let borrowed = unsafe { BorrowedFd::borrow_raw(socket.fd) };
        match socket2::SockRef::from(&borrowed).set_tcp_nodelay(true) {
            Ok(()) => changed += 1,
            Err(e) => tracing::debug!(peer = %socket.peer, "cannot set TCP_NODELAY: {e}"),
        }
    }
    changed
}

/// The addresses `names` (`host:port`) resolve to, each lookup bounded by
/// [`LOOKUP_TIMEOUT`]; and whether every one resolved.
pub(crate) async fn resolve(names: &[String]) -> (HashSet<SocketAddr>, bool) {
    let mut resolved = HashSet::new();
    let mut complete = true;
    for name in names {
        // A sweep runs inside calls with deadlines: a name server that
        // does not answer must not hold them.
        match tokio::time::timeout(LOOKUP_TIMEOUT, tokio::net::lookup_host(name.as_str())).await {
            Ok(Ok(addrs)) => resolved.extend(addrs),
            Ok(Err(e)) => {
                complete = false;
                tracing::debug!("cannot resolve Fluss server {name}: {e}");
            }
            Err(_) => {
                complete = false;
                tracing::debug!("resolving Fluss server {name} took over {LOOKUP_TIMEOUT:?}");
            }
        }
    }
    (resolved, complete)
}

/// Keeps `TCP_NODELAY` on the connections of one Fluss client.
pub(crate) struct Sweeper {
    connection: Arc<FlussConnection>,
    bootstrap: Vec<String>,
    /// The resolved addresses of the cluster's servers, and the `host:port`
    /// names they were resolved from (resolved again only when those change).
    peers: Mutex<(Vec<String>, HashSet<SocketAddr>)>,
    /// When the last sweep ran (for [`Sweeper::sweep_soon`]).
    last: Mutex<Option<Instant>>,
}

/// The longest one name lookup of a cluster server may take.
const LOOKUP_TIMEOUT: Duration = Duration::from_millis(200);

/// The shortest time between two sweeps asked for by a slow acknowledgement.
const SOON: Duration = Duration::from_millis(10);

impl Sweeper {
    /// A sweeper for `connection`, bootstrapped from `bootstrap_servers`.
    pub(crate) fn new(connection: Arc<FlussConnection>, bootstrap_servers: &str) -> Self {
        Self {
            connection,
            bootstrap: bootstrap_servers
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
            peers: Mutex::new((Vec::new(), HashSet::new())),
            last: Mutex::new(None),
        }
    }

    /// The servers the client knows of (bootstrap servers included).
    async fn peers(&self) -> HashSet<SocketAddr> {
        let mut names: Vec<String> = self
            .connection
            .get_metadata()
            .get_cluster()
            .get_server_nodes()
            .iter()
            .map(|n| format!("{}:{}", n.host(), n.port()))
            .chain(self.bootstrap.iter().cloned())
            .collect();
        names.sort();
        names.dedup();
        {
            let known = self.peers.lock().unwrap_or_else(|e| e.into_inner());
            if known.0 == names {
                return known.1.clone();
            }
        }
        let (resolved, complete) = resolve(&names).await;
        // Remember the names only when every one resolved: a failed lookup
        // is tried again at the next sweep.
        if complete {
            *self.peers.lock().unwrap_or_else(|e| e.into_inner()) = (names, resolved.clone());
        }
        resolved
    }

    /// Sweeps unless a sweep ran in the last few milliseconds.
    pub(crate) async fn sweep_soon(&self) {
        let recent = self
            .last
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|t| t.elapsed() < SOON);
        if !recent {
            self.sweep_now().await;
        }
    }

    /// Sets `TCP_NODELAY` on the client's connections now.
    pub(crate) async fn sweep_now(&self) {
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        let peers = self.peers().await;
        let changed = sweep(&peers);
        if changed > 0 {
            tracing::debug!("set TCP_NODELAY on {changed} new Fluss connection(s)");
        }
    }

    /// Sweeps every [`SWEEP_INTERVAL`] until the returned handle is aborted.
    pub(crate) fn spawn(self: &Arc<Self>) -> tokio::task::AbortHandle {
        let this = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SWEEP_INTERVAL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                this.sweep_now().await;
            }
        })
        .abort_handle()
    }
}

/// Two listeners on loopback and a connection to each, for tests of what
/// is done to the sockets of some peers only.
#[cfg(test)]
pub(crate) fn two_peers() -> [(std::net::TcpListener, std::net::TcpStream); 2] {
    [(), ()].map(|()| {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        (listener, stream)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_sets_nodelay_on_sockets_to_the_peers_only() {
        let [(cluster, to_cluster), (_other, to_other)] = two_peers();
        assert!(!to_cluster.nodelay().unwrap());
        let peers = HashSet::from([cluster.local_addr().unwrap()]);

        assert_eq!(sweep(&peers), 1);
        assert!(to_cluster.nodelay().unwrap());
        assert!(
            !to_other.nodelay().unwrap(),
            "a socket to another peer was changed"
        );
        assert_eq!(sweep(&peers), 0, "a second sweep has nothing left to change");
        let found = peer_sockets(&peers);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].peer, cluster.local_addr().unwrap());
        assert!(found[0].nodelay);
    }
}
