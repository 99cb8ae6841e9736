//! A Fluss cluster of a test's own (`scripts/fluss-local.sh` on ports apart
//! from the shared one), for tests that stop, freeze or kill servers and
//! must not disturb the tests sharing the default cluster. Stopped when
//! dropped; its logs are kept under `target/fluss-failed-logs/<name>` when
//! the test failed.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::fault_proxy::FaultProxy;
use crate::{free_port, repo_root};

/// How many consecutive ports a cluster takes from its coordinator's: the
/// script derives every server's port from it (tablet servers at +1.., the
/// proxied listeners at +10..).
const PORT_BLOCK: u16 = 16;

/// The first of [`PORT_BLOCK`] consecutive ports on 127.0.0.1 that were all
/// free a moment ago.
fn free_port_block() -> u16 {
    for _ in 0..200 {
        let base = 20_000 + fastrand::u16(..2_500) * PORT_BLOCK;
        let free = (base..base + PORT_BLOCK).all(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok());
        if free {
            return base;
        }
    }
    panic!("no {PORT_BLOCK} consecutive free ports on 127.0.0.1 in 200 tries");
}

/// Runs `scripts/fluss-local.sh` with `env`; whether it succeeded.
pub fn run_fluss_script(env: &[(&str, String)], args: &[&str]) -> bool {
    std::process::Command::new(repo_root().join("scripts/fluss-local.sh"))
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .args(args)
        .status()
        .expect("run scripts/fluss-local.sh")
        .success()
}

/// Runs ZooKeeper's shell on the ZooKeeper of the cluster `env` names
/// (`scripts/fluss-local.sh zk`; no `env`: the shared cluster's), with
/// `commands` one a line; what it printed.
pub fn zookeeper_shell(env: &[(&str, String)], commands: &str) -> String {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut shell = Command::new(repo_root().join("scripts/fluss-local.sh"))
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .arg("zk")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run scripts/fluss-local.sh zk");
    let mut stdin = shell.stdin.take().expect("the shell's stdin");
    stdin
        .write_all(commands.as_bytes())
        .expect("commands to the shell");
    drop(stdin);
    let out = shell.wait_with_output().expect("the shell's output");
    assert!(out.status.success(), "scripts/fluss-local.sh zk failed: {out:?}");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `scripts/fluss-local.sh` with `env`, failing the test if it fails.
pub fn fluss_script(env: &[(&str, String)], args: &[&str]) {
    assert!(
        run_fluss_script(env, args),
        "scripts/fluss-local.sh {args:?} failed"
    );
}

/// A running cluster of the test's own.
pub struct LocalCluster {
    name: String,
    port: u16,
    env: Vec<(&'static str, String)>,
}

impl LocalCluster {
    /// Starts cluster `name` with `tablets` tablet servers on ports that
    /// were free, its files in `target/fluss-<name>`.
    pub fn start(name: &str, tablets: u32) -> Self {
        Self::start_with(name, free_port_block(), free_port(), tablets, vec![])
    }

    /// Starts cluster `name` (one tablet server) with a [`FaultProxy`] on
    /// `proxy_port` between clients and the tablet server: the tablet server
    /// advertises the proxy to clients, while the coordinator answers them
    /// directly and the servers talk to each other directly.
    pub fn start_behind_proxy(name: &str) -> (Self, FaultProxy) {
        let port = free_port_block();
        // The script gives tablet server 0's client listener port + 11.
        let upstream = SocketAddr::from(([127, 0, 0, 1], port + 11));
        let proxy = FaultProxy::start(free_port(), upstream);
        let env = vec![("FLUSS_CLIENT_PROXY_PORT", proxy.port().to_string())];
        (Self::start_with(name, port, free_port(), 1, env), proxy)
    }

    fn start_with(
        name: &str,
        port: u16,
        zk_port: u16,
        tablets: u32,
        extra: Vec<(&'static str, String)>,
    ) -> Self {
        let dir: PathBuf = repo_root().join(format!("target/fluss-{name}"));
        let mut env = vec![
            ("FLUSS_DIR", dir.display().to_string()),
            ("FLUSS_PORT", port.to_string()),
            ("FLUSS_ZK_PORT", zk_port.to_string()),
            ("FLUSS_TABLETS", tablets.to_string()),
        ];
        env.extend(extra);
        let cluster = Self {
            name: name.to_string(),
            port,
            env,
        };
        cluster.script(&["start"]);
        cluster
    }

    /// Its bootstrap address.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Runs `scripts/fluss-local.sh args` on this cluster, failing the test if it fails.
    pub fn script(&self, args: &[&str]) {
        fluss_script(&self.env, args);
    }

    /// Drops table `path` in this cluster, failing the test if it cannot.
    pub fn drop_table(&self, path: &iggy_connector_fluss_sink::TablePath) {
        crate::fluss_cluster::block(async {
            let conn = crate::fluss_cluster::connection_to(&self.bootstrap()).await;
            conn.get_admin()
                .unwrap()
                .drop_table(&crate::fluss_cluster::fluss_path(path), false)
                .await
                .expect("drop the table");
        });
    }

    /// How often each value of the first (BIGINT) column appears in log
    /// table `path`, read past `expected` rows until the table is quiet.
    pub fn id_counts(
        &self,
        path: &iggy_connector_fluss_sink::TablePath,
        expected: usize,
        timeout: std::time::Duration,
    ) -> std::collections::BTreeMap<i64, usize> {
        crate::fluss_cluster::id_counts(&self.bootstrap(), path, expected, timeout)
    }

    /// The script's environment for this cluster (to run it from another thread).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        self.env.clone()
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let logs = repo_root().join(format!("target/fluss-{}/logs", self.name));
            let keep = repo_root().join(format!("target/fluss-failed-logs/{}", self.name));
            let _ = std::fs::create_dir_all(&keep);
            for entry in std::fs::read_dir(logs).into_iter().flatten().flatten() {
                let _ = std::fs::copy(entry.path(), keep.join(entry.file_name()));
            }
            eprintln!("the {} cluster's logs are kept in {}", self.name, keep.display());
        }
        run_fluss_script(&self.env, &["stop"]);
    }
}
