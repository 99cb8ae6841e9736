//! A small harness around the real Apache Iggy server and connectors
//! runtime (`../shared/iggy/iggy-server` and `iggy-connectors`, or the
//! folder `FLUSS_SINK_IGGY_DIR` names): start a server on loopback, make a
//! stream and topic, produce JSON through its HTTP API, and run the runtime
//! with one connector file for this plugin. Processes are killed on drop
//! and their last log lines printed when a test fails.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use iggy_connector_fluss_sink::TablePath;
use serde_json::{Value, json};

use crate::fluss_cluster::{bootstrap, fluss_path};
use crate::repo_root;

/// iggy-server's HTTP API. Its ports (HTTP 3000, TCP 8090, QUIC 8080,
/// WebSocket 8092) are fixed: the server takes no port flags and refuses
/// to start with an `IGGY_*` variable it does not know, so the tests that
/// start it run one server at a time (`ONE_AT_A_TIME` in each binary; the
/// binaries run one after the other).
const HTTP: &str = "http://127.0.0.1:3000";

/// The folder holding `iggy-server` and `iggy-connectors`, or why there is none.
pub fn binaries() -> Result<PathBuf, String> {
    let dir = std::env::var_os("FLUSS_SINK_IGGY_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("../shared/iggy"));
    if dir.join("iggy-server").exists() && dir.join("iggy-connectors").exists() {
        Ok(dir)
    } else {
        Err(format!(
            "no iggy-server and iggy-connectors in {} (set FLUSS_SINK_IGGY_DIR to a folder with both; \
             apache/iggy builds them: see ../shared/iggy/README.md)",
            dir.display()
        ))
    }
}

/// Whether the Iggy binaries are here to run a test with. With `CI=true`
/// their absence fails the test; elsewhere it prints one line saying the
/// test did not run and how to provide them, and the test returns.
pub fn binaries_present(test: &str) -> bool {
    match binaries() {
        Ok(_) => true,
        Err(reason) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("{test} needs the Iggy binaries (CI=true): {reason}")
        }
        Err(reason) => {
            eprintln!("NOT RUN {test}: {reason}");
            false
        }
    }
}

fn iggy_dir() -> PathBuf {
    binaries().unwrap_or_else(|reason| panic!("this test needs the Iggy binaries: {reason}"))
}

/// A child process killed (and its output kept when the test fails) on drop.
pub struct Running {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Running {
    /// The process's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends SIGTERM and waits up to `grace` for the process to exit; true
    /// when it did.
    pub fn terminate(&mut self, grace: Duration) -> bool {
        // SAFETY: kill(2) on our own child's pid with a valid signal.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let started = Instant::now();
        while started.elapsed() < grace {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// Stops the process where it is (SIGSTOP), until [`Running::resume`].
    pub fn pause(&self) {
        // SAFETY: kill(2) on our own child's pid with a valid signal.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGSTOP) };
    }

    /// Lets a paused process go on (SIGCONT).
    pub fn resume(&self) {
        // SAFETY: kill(2) on our own child's pid with a valid signal.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGCONT) };
    }

    /// Kills the process at once (SIGKILL).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            let text = self.log();
            let tail: Vec<&str> = text.lines().rev().take(40).collect();
            eprintln!("--- last lines of {} ({}):", self.name, self.log.display());
            for line in tail.into_iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

fn spawn(name: &str, mut command: Command, dir: &Path) -> Running {
    let log = dir.join(format!("{name}.log"));
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .unwrap();
    command
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .stdin(Stdio::null());
    // The server refuses unknown IGGY_* variables: give it only its own.
    for (key, _) in std::env::vars() {
        if key.starts_with("IGGY_") {
            command.env_remove(key);
        }
    }
    let child = command.spawn().unwrap_or_else(|e| panic!("start {name}: {e}"));
    Running {
        name: name.to_string(),
        child,
        log,
    }
}

fn post(path: &str, token: Option<&str>, body: Value) -> Result<Value, String> {
    let mut request = crate::http().post(format!("{HTTP}{path}"));
    if let Some(token) = token {
        request = request.header("Authorization", format!("Bearer {token}"));
    }
    let mut response = request.send_json(&body).map_err(|e| e.to_string())?;
    let text = response.body_mut().read_to_string().map_err(|e| e.to_string())?;
    Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn get(path: &str, token: &str) -> Result<Value, String> {
    let mut response = crate::http()
        .get(format!("{HTTP}{path}"))
        .header("Authorization", format!("Bearer {token}"))
        .call()
        .map_err(|e| e.to_string())?;
    let text = response.body_mut().read_to_string().map_err(|e| e.to_string())?;
    serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))
}

/// `bytes` in standard base64, as the HTTP API takes payloads and headers.
pub fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// One message to produce: a JSON payload and string headers.
pub struct Outgoing {
    /// The payload.
    pub payload: String,
    /// String headers, key and value.
    pub headers: Vec<(String, String)>,
}

impl Outgoing {
    /// A payload with one string header.
    pub fn with_header(payload: String, key: &str, value: &str) -> Self {
        Self {
            payload,
            headers: vec![(key.to_string(), value.to_string())],
        }
    }
}

/// A running iggy-server with one stream and one topic.
pub struct Server {
    _process: Running,
    token: String,
    /// The stream's name.
    pub stream: &'static str,
    /// The topic's name.
    pub topic: &'static str,
}

impl Server {
    /// Starts a server whose data lives in `work`, with a topic of
    /// `partitions` partitions.
    pub fn start(work: &Path, partitions: u32) -> Self {
        let mut server = Command::new(iggy_dir().join("iggy-server"));
        server
            .arg("--with-default-root-credentials")
            .env("IGGY_ROOT_USERNAME", "iggy")
            .env("IGGY_ROOT_PASSWORD", "iggy")
            .env("IGGY_SYSTEM_PATH", work.join("iggy-data"))
            .current_dir(work);
        let process = spawn("iggy-server", server, work);
        let started = Instant::now();
        let token = loop {
            match post(
                "/users/login",
                None,
                json!({"username": "iggy", "password": "iggy"}),
            ) {
                Ok(v) => break v["access_token"]["token"].as_str().expect("a token").to_string(),
                Err(_) if started.elapsed() < Duration::from_secs(60) => {
                    std::thread::sleep(Duration::from_millis(250));
                }
                Err(e) => panic!("iggy-server did not answer its HTTP API within 60 s: {e}"),
            }
        };
        let (stream, topic) = ("e2e", "orders");
        post("/streams", Some(&token), json!({"name": stream})).expect("create the stream");
        post(
            &format!("/streams/{stream}/topics"),
            Some(&token),
            json!({"name": topic, "partitions_count": partitions, "compression_algorithm": "none",
                   "message_expiry": 0, "max_topic_size": 0}),
        )
        .expect("create the topic");
        Self {
            _process: process,
            token,
            stream,
            topic,
        }
    }

    /// Produces `messages` to partition `partition` (`None`: spread by the
    /// server, balanced), 500 a request.
    pub fn produce_messages(&self, partition: Option<u32>, messages: &[Outgoing]) {
        let partitioning = match partition {
            Some(p) => json!({"kind": "partition_id", "value": base64(&p.to_le_bytes())}),
            None => json!({"kind": "balanced", "value": ""}),
        };
        for chunk in messages.chunks(500) {
            let messages: Vec<Value> = chunk
                .iter()
                .map(|m| {
                    let headers: Vec<Value> = m
                        .headers
                        .iter()
                        .map(|(k, v)| {
                            json!({"key": {"kind": "string", "value": base64(k.as_bytes())},
                                   "value": {"kind": "string", "value": base64(v.as_bytes())}})
                        })
                        .collect();
                    let mut message = json!({"id": 0, "payload": base64(m.payload.as_bytes())});
                    if !headers.is_empty() {
                        message["user_headers"] = Value::Array(headers);
                    }
                    message
                })
                .collect();
            self.send(&partitioning, messages).expect("produce");
        }
    }

    /// Produces `messages`, each in the HTTP API's form (`id`, `payload` and
    /// `user_headers` in base64: see [`base64()`]), to partition `partition`
    /// in one request; the server's refusal, if any.
    pub fn produce_as_is(&self, partition: u32, messages: Vec<Value>) -> Result<(), String> {
        let partitioning = json!({"kind": "partition_id", "value": base64(&partition.to_le_bytes())});
        self.send(&partitioning, messages)
    }

    fn send(&self, partitioning: &Value, messages: Vec<Value>) -> Result<(), String> {
        post(
            &format!("/streams/{}/topics/{}/messages", self.stream, self.topic),
            Some(&self.token),
            json!({"partitioning": partitioning, "messages": messages}),
        )
        .map(|_| ())
    }

    /// Produces JSON orders `from..to` (`order_id`, `customer`, `amount`)
    /// with a `source` header to partition 0.
    pub fn produce_orders(&self, from: u64, to: u64) {
        let messages: Vec<Outgoing> = (from..to)
            .map(|i| {
                Outgoing::with_header(
                    format!(r#"{{"order_id":{i},"customer":"c{i}","amount":"{i}.25"}}"#),
                    "source",
                    "e2e",
                )
            })
            .collect();
        self.produce_messages(Some(0), &messages);
    }

    /// Produces JSON orders `0..count`; see [`Server::produce_orders`].
    pub fn produce(&self, count: u64) {
        self.produce_orders(0, count);
    }

    /// Waits until consumer group `group` of the topic has `members`
    /// members, as the server counts them; panics after 60 s.
    pub fn wait_for_group_members(&self, group: &str, members: u64) {
        let path = format!(
            "/streams/{}/topics/{}/consumer-groups/{group}",
            self.stream, self.topic
        );
        let started = Instant::now();
        loop {
            let seen = get(&path, &self.token);
            if matches!(&seen, Ok(details) if details["members_count"].as_u64() == Some(members)) {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "consumer group {group} never had {members} members: {seen:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// How the connector file sets the runtime's side of the sink.
pub struct Connector {
    /// `[plugin_config]`, as TOML.
    pub plugin_config: String,
    /// Messages per poll.
    pub batch_length: usize,
    /// The consumer group.
    pub consumer_group: String,
    /// Log the runtime's per-batch timings (`benchmark = true`).
    pub benchmark: bool,
    /// Another build of the plugin to load (a benchmark's before); by
    /// default the one beside the test binary.
    pub plugin: Option<PathBuf>,
}

impl Connector {
    /// A connector with `plugin_config`, polls of 1,000 messages, group `fluss_e2e`.
    pub fn new(plugin_config: String) -> Self {
        Self {
            plugin_config,
            batch_length: 1000,
            consumer_group: "fluss_e2e".into(),
            benchmark: false,
            plugin: None,
        }
    }
}

/// Starts iggy-connectors (named `name`: its files and log are
/// `work/<name>/…`) with one connector file for this plugin, and extra `env`.
pub fn start_runtime(
    server: &Server,
    work: &Path,
    name: &str,
    connector: &Connector,
    env: &[(String, String)],
) -> Running {
    let home = work.join(name);
    let connectors = home.join("connectors");
    std::fs::create_dir_all(&connectors).unwrap();
    let plugin = connector
        .plugin
        .clone()
        .unwrap_or_else(crate::plugin::library_path);
    assert!(
        plugin.exists(),
        "{} is missing: cargo build -p iggy_connector_fluss_sink",
        plugin.display()
    );
    std::fs::write(
        connectors.join("fluss.toml"),
        format!(
            r#"type = "sink"
key = "fluss"
enabled = true
version = 0
name = "Fluss sink"
path = "{plugin}"
benchmark = {benchmark}

[[streams]]
stream = "{stream}"
topics = ["{topic}"]
schema = "json"
batch_length = {batch_length}
poll_interval = "5ms"
consumer_group = "{group}"

[plugin_config]
{plugin_config}
"#,
            plugin = plugin.with_extension("").display(),
            benchmark = connector.benchmark,
            stream = server.stream,
            topic = server.topic,
            batch_length = connector.batch_length,
            group = connector.consumer_group,
            plugin_config = connector.plugin_config,
        ),
    )
    .unwrap();
    let runtime_config = home.join("runtime.toml");
    std::fs::write(
        &runtime_config,
        format!(
            r#"[http]
enabled = false
[iggy]
address = "127.0.0.1:8090"
username = "iggy"
password = "iggy"
[state]
path = "{state}"
[connectors]
config_type = "local"
config_dir = "{connectors}"
"#,
            state = home.join("state").display(),
            connectors = connectors.display(),
        ),
    )
    .unwrap();
    let mut runtime = Command::new(iggy_dir().join("iggy-connectors"));
    runtime
        .env("IGGY_CONNECTORS_CONFIG_PATH", &runtime_config)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .current_dir(&home);
    spawn(&format!("iggy-connectors-{name}"), runtime, work)
}

/// Waits until the plugin (opened by the runtime) has created `table`.
pub fn wait_for_table(table: &TablePath) {
    wait_for_table_at(&bootstrap(), table);
}

/// [`wait_for_table`] in the cluster at `bootstrap_servers`.
pub fn wait_for_table_at(bootstrap_servers: &str, table: &TablePath) {
    crate::fluss_cluster::block(async {
        let conn = crate::fluss_cluster::connection_to(bootstrap_servers).await;
        let admin = conn.get_admin().unwrap();
        let path = fluss_path(table);
        let started = Instant::now();
        while !admin.table_exists(&path).await.unwrap_or(false) {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the runtime did not open the sink within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    });
}
