//! Every connection the plugin's Fluss client opens has `TCP_NODELAY`
//! (fluss-rs 1.0 never sets it; the plugin's workaround does, see
//! `host/src/writer/nodelay.rs`). Without it a produce request a little
//! larger than one TCP segment waits ~44 ms for the server's delayed ACK.
//!
//! Its own test binary: every socket of this process to the cluster must be
//! the plugin's, so no other test may open a client here. Needs the shared
//! local cluster (`scripts/fluss-local.sh start`); fails, never skips.

use std::mem::ManuallyDrop;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::FromRawFd;
use std::time::Instant;

use integration_tests::fluss_cluster::{bootstrap, unique_table};
use integration_tests::plugin::{Plugin, TestMessage, logged, next_id};
use serde_json::json;

/// This process's TCP sockets connected to one of `ports` on loopback, and
/// whether each has `TCP_NODELAY`, read with the standard library alone.
fn sockets_to(ports: &[u16]) -> Vec<(SocketAddr, bool)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let is_socket =
            std::fs::read_link(entry.path()).is_ok_and(|t| t.to_string_lossy().starts_with("socket:"));
        if !is_socket {
            continue;
        }
        // SAFETY: `fd` is an open socket of this process; ManuallyDrop never
        // closes it, and it is only read from for two calls.
        let stream = ManuallyDrop::new(unsafe { TcpStream::from_raw_fd(fd) });
        if let (Ok(peer), Ok(nodelay)) = (stream.peer_addr(), stream.nodelay())
            && peer.ip().is_loopback()
            && ports.contains(&peer.port())
        {
            found.push((peer, nodelay));
        }
    }
    found
}

#[test]
fn every_connection_to_the_cluster_has_tcp_nodelay() {
    let coordinator: SocketAddr = bootstrap().to_socket_addrs().unwrap().next().unwrap();
    let ports = [coordinator.port(), coordinator.port() + 1];

    // The check can fail: a plain connection has no TCP_NODELAY.
    let plain = TcpStream::connect(coordinator).expect("the cluster is reachable");
    assert_eq!(sockets_to(&ports), vec![(coordinator, false)]);

    let plugin = Plugin::load();
    let (path, dlq) = (unique_table("nodelay"), unique_table("nodelay_dlq"));
    let id = next_id();
    let config = json!({
        "bootstrap_servers": bootstrap(),
        "database": path.database,
        "table": path.table,
        "columns": [{"name": "id", "type": "BIGINT", "nullable": false}, {"name": "text", "type": "STRING"}],
        "dead_letter_table": dlq.to_string(),
    });
    assert_eq!(
        plugin.open(id, &config.to_string()),
        0,
        "{:?}",
        logged(&format!("instance={id}"))
    );
    // ~400-byte messages: past one TCP segment per request, where the stall was.
    let filler = "x".repeat(380);
    let messages: Vec<TestMessage> = (0..1000)
        .map(|i| TestMessage::text(i, &format!(r#"{{"id":{i},"text":"{filler}"}}"#)))
        .collect();
    let started = Instant::now();
    for round in 0..5u64 {
        let batch: Vec<TestMessage> = messages
            .iter()
            .map(|m| TestMessage {
                offset: m.offset + round * 1000,
                ..m.clone()
            })
            .collect();
        assert_eq!(plugin.consume(id, "app", "nodelay", 0, &batch), 0);
    }
    let took = started.elapsed();

    let sockets = sockets_to(&ports);
    let to_tablet = sockets.iter().filter(|(peer, _)| peer.port() == ports[1]).count();
    assert!(
        to_tablet >= 1,
        "the plugin wrote through a tablet server connection: {sockets:?}"
    );
    let without: Vec<_> = sockets.iter().filter(|(_, nodelay)| !nodelay).collect();
    assert!(
        without.is_empty(),
        "connections to the cluster without TCP_NODELAY: {without:?} of {sockets:?}"
    );
    eprintln!("5 consumes of 1,000 ~400-byte messages took {took:?}; sockets to the cluster: {sockets:?}");
    assert_eq!(plugin.close(id), 0);
    drop(plain);
}
