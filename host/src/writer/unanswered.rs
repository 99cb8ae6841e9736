//! Writes Fluss never answers. fluss-rs 1.0 puts no timeout on a request:
//! one sent on a connection whose peer hangs without closing it (a tablet
//! server stuck, a network that silently stops carrying one connection) is
//! awaited for ever, and with it the write, the spool's first attempt and
//! every batch queued behind it.
//!
//! The client's connections cannot be reached through its API, so, as
//! [`crate::writer::nodelay`] does, the writer finds the process's sockets
//! to the cluster's tablet servers in its descriptor table and shuts them
//! down once a write has waited `request_timeout` for its answer. The
//! client's reader then sees each connection end and fails the requests on
//! it with a network error; its sender retries them on new connections,
//! with the sequence numbers they had, so a batch that had reached Fluss is
//! acknowledged as a duplicate, not written twice.
//!
//! Every socket of the process to those servers is shut down, other
//! instances' too: they cannot be told apart, and their requests are sent
//! again the same way. It happens at most once per `request_timeout`.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::time::Instant;

use fluss::ServerType;

use crate::schema::TablePath;
use crate::writer::FlussWriter;
use crate::writer::nodelay::{peer_sockets, resolve};

impl FlussWriter {
    /// When the write to `table` sent at `sent` has waited `request_timeout`
    /// and no connection was replaced within the last `request_timeout`,
    /// shuts down the process's connections to the tablet servers, so that
    /// the client sends its unanswered requests again on new ones.
    pub(in crate::writer) async fn replace_unanswering_connections(&self, table: &TablePath, sent: Instant) {
        let timeout = self.settings.request_timeout;
        let waited = sent.elapsed();
        if waited < timeout {
            return;
        }
        {
            let mut last = self
                .connections_replaced
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if last.is_some_and(|at| at.elapsed() < timeout) {
                return;
            }
            *last = Some(Instant::now());
        }
        let names: Vec<String> = self
            .connection
            .get_metadata()
            .get_cluster()
            .get_server_nodes()
            .iter()
            .filter(|node| *node.server_type() == ServerType::TabletServer)
            .map(|node| format!("{}:{}", node.host(), node.port()))
            .collect();
        let (servers, _) = resolve(&names).await;
        let closed = shut_down(&servers);
        if let Some(metrics) = &self.metrics {
            metrics.connections_replaced(closed as u64);
        }
        tracing::warn!(
            %table,
            "Fluss has not answered a write to table {table} in {waited:.1?} (request_timeout {timeout:?}): \
             closed {closed} connection(s) to its tablet servers ({}), so that the client sends its \
             unanswered requests again on new ones",
            names.join(", ")
        );
    }
}

/// Shuts down (both ways) every TCP socket of this process connected to
/// one of `peers`; how many.
fn shut_down(peers: &HashSet<SocketAddr>) -> usize {
    let mut closed = 0;
    for socket in peer_sockets(peers) {
        // SAFETY: as in `nodelay::peer_sockets`: the descriptor was open a
        // moment ago and is only borrowed for one call, never closed. Were
        // it closed and its number reused meanwhile, the call fails (not a
        // socket) or shuts down a socket connected to a server of the
        // cluster, which the client replaces like this one.
        let borrowed = unsafe { BorrowedFd::borrow_raw(socket.fd) };
        match socket2::SockRef::from(&borrowed).shutdown(std::net::Shutdown::Both) {
            Ok(()) => closed += 1,
            Err(e) => tracing::debug!(peer = %socket.peer, "cannot shut down a connection: {e}"),
        }
    }
    closed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writer::nodelay::two_peers;
    use std::io::Read;

    #[test]
    fn shut_down_ends_the_connections_to_the_peers_only() {
        let [(server, mut to_server), (_other, to_other)] = two_peers();
        let (_accepted, _) = server.accept().unwrap();
        let peers = HashSet::from([server.local_addr().unwrap()]);

        assert_eq!(shut_down(&peers), 1);
        let mut buf = [0u8; 1];
        assert_eq!(
            to_server.read(&mut buf).unwrap(),
            0,
            "a reader of the shut-down connection sees it end"
        );
        to_other
            .set_read_timeout(Some(std::time::Duration::from_millis(50)))
            .unwrap();
        let untouched = (&to_other).read(&mut buf).unwrap_err();
        assert_eq!(
            untouched.kind(),
            std::io::ErrorKind::WouldBlock,
            "the connection to another peer stays open"
        );
    }
}
