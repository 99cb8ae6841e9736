//! The plugin inside the real Apache Iggy server and connectors runtime
//! (`../shared/iggy/iggy-server` and `iggy-connectors`, see its README):
//! messages produced through the server's HTTP API land in Fluss through
//! the runtime's dlopen of this plugin, read back with an independent
//! client. Needs the binaries (with `libhwloc15` and `libudev1`, which
//! `scripts/test.sh` installs) and the shared local Fluss cluster; fails,
//! never skips, when they are absent.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine as _;
use fluss::metadata::TablePath as FlussPath;
use iggy_connector_fluss_sink::schema::TablePath;
use integration_tests::fluss_cluster::{block, bootstrap, connection, read_log, unique_table};
use integration_tests::{component, repo_root, test_cache_dir};
use serde_json::{Value, json};

const HTTP: &str = "http://127.0.0.1:3000";

/// The server's ports are fixed: one test at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn iggy_dir() -> PathBuf {
    let dir = repo_root().join("../shared/iggy");
    let present = dir.join("iggy-server").exists() && dir.join("iggy-connectors").exists();
    assert!(
        present,
        "this test needs iggy-server and iggy-connectors in {} (see its README)",
        dir.display()
    );
    dir
}

/// A child process killed (and its output kept when the test fails) on drop.
struct Running {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(40).collect();
            eprintln!("--- last lines of {} ({}):", self.name, self.log.display());
            for line in tail.into_iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

fn spawn(name: &'static str, mut command: Command, dir: &Path) -> Running {
    let log = dir.join(format!("{name}.log"));
    let out = std::fs::File::create(&log).unwrap();
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
    Running { name, child, log }
}

fn post(path: &str, token: Option<&str>, body: Value) -> Result<Value, String> {
    let mut request = ureq::post(format!("{HTTP}{path}"));
    if let Some(token) = token {
        request = request.header("Authorization", format!("Bearer {token}"));
    }
    let mut response = request.send_json(&body).map_err(|e| e.to_string())?;
    let text = response.body_mut().read_to_string().map_err(|e| e.to_string())?;
    Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A running iggy-server with one stream and topic of one partition.
struct Server {
    _process: Running,
    token: String,
    stream: &'static str,
    topic: &'static str,
}

impl Server {
    fn start(work: &Path) -> Self {
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
            json!({"name": topic, "partitions_count": 1, "compression_algorithm": "none",
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

    /// Produces JSON orders `0..count` with a `source` header, 500 a request.
    fn produce(&self, count: u64) {
        for chunk in 0..count.div_ceil(500) {
            let messages: Vec<Value> = (chunk * 500..((chunk + 1) * 500).min(count))
                .map(|i| {
                    let payload = format!(r#"{{"order_id":{i},"customer":"c{i}","amount":"{i}.25"}}"#);
                    json!({
                        "id": 0,
                        "payload": b64(payload.as_bytes()),
                        "user_headers": [{"key": {"kind": "string", "value": b64(b"source")},
                                          "value": {"kind": "string", "value": b64(b"e2e")}}]
                    })
                })
                .collect();
            post(
                &format!("/streams/{}/topics/{}/messages", self.stream, self.topic),
                Some(&self.token),
                json!({"partitioning": {"kind": "partition_id", "value": b64(&0u32.to_le_bytes())},
                       "messages": messages}),
            )
            .expect("produce");
        }
    }

    /// Starts iggy-connectors with one connector file for this plugin, whose
    /// `[plugin_config]` is `plugin_config` (TOML), and extra `env`.
    fn start_runtime(&self, work: &Path, plugin_config: &str, env: &[(String, String)]) -> Running {
        let connectors = work.join("connectors");
        std::fs::create_dir_all(&connectors).unwrap();
        let plugin = integration_tests::plugin::library_path();
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

[[streams]]
stream = "{stream}"
topics = ["{topic}"]
schema = "json"
batch_length = 1000
poll_interval = "5ms"
consumer_group = "fluss_e2e"

[plugin_config]
{plugin_config}
"#,
                plugin = plugin.with_extension("").display(),
                stream = self.stream,
                topic = self.topic,
            ),
        )
        .unwrap();
        let runtime_config = work.join("runtime.toml");
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
                state = work.join("state").display(),
                connectors = connectors.display(),
            ),
        )
        .unwrap();
        let mut runtime = Command::new(iggy_dir().join("iggy-connectors"));
        runtime
            .env("IGGY_CONNECTORS_CONFIG_PATH", &runtime_config)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .current_dir(work);
        spawn("iggy-connectors", runtime, work)
    }
}

/// Waits until the plugin (opened by the runtime) has created `table`.
fn wait_for_table(table: &TablePath) {
    block(async {
        let conn = connection().await;
        let admin = conn.get_admin().unwrap();
        let path = FlussPath::new(table.database.clone(), table.table.clone());
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

#[test]
fn json_lands_in_a_log_table_with_metadata_through_the_real_runtime() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let work = tempfile::tempdir().unwrap();
    let server = Server::start(work.path());
    const COUNT: u64 = 3000;
    server.produce(COUNT);
    let table = unique_table("runtime_json");
    let config = format!(
        r#"bootstrap_servers = "{bootstrap}"
database = "{database}"
table = "{name}"
include_metadata = true
dead_letter_table = "{database}.{name}_dlq"
columns = [
  {{ name = "order_id", type = "BIGINT", nullable = false }},
  {{ name = "customer", type = "STRING" }},
  {{ name = "amount", type = "DECIMAL(12, 2)" }},
  {{ name = "iggy_stream", type = "STRING" }},
  {{ name = "iggy_topic", type = "STRING" }},
  {{ name = "iggy_offset", type = "BIGINT" }},
]"#,
        bootstrap = bootstrap(),
        database = table.database,
        name = table.table,
    );
    let _runtime = server.start_runtime(work.path(), &config, &[]);
    wait_for_table(&table);
    let rows = block(read_log(&table, COUNT as usize, Duration::from_secs(90)));
    assert_eq!(rows.len(), COUNT as usize, "every message, once");
    for (i, row) in rows.iter().enumerate() {
        let i = i as u64;
        assert_eq!(
            row,
            &vec![
                i.to_string(),
                format!("c{i}"),
                format!("{i}.25"),
                server.stream.to_string(),
                server.topic.to_string(),
                i.to_string(),
            ],
            "row {i}: its payload and the runtime's metadata (offset = the message's own)"
        );
    }
}

/// The runtime's environment overrides set top-level plugin options only;
/// `transform_<option>` and `transform_config_<key>` carry them into the
/// transform. Here the connector file names table A and no transform; the
/// environment moves the sink to table B and adds a transform (the test
/// guest `evil` in mode `none`, which makes each message a row of its
/// offset), so every row in B proves both overrides took.
#[test]
fn environment_overrides_reach_the_table_and_the_transform() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let work = tempfile::tempdir().unwrap();
    let server = Server::start(work.path());
    const COUNT: u64 = 500;
    server.produce(COUNT);
    let (named, overridden) = (unique_table("runtime_env_a"), unique_table("runtime_env_b"));
    let config = format!(
        r#"bootstrap_servers = "{bootstrap}"
database = "{database}"
table = "{name}"
columns = [ {{ name = "offset", type = "BIGINT", nullable = false }} ]"#,
        bootstrap = bootstrap(),
        database = named.database,
        name = named.table,
    );
    let var = |field: &str| format!("IGGY_CONNECTORS_SINK_FLUSS_PLUGIN_CONFIG_{field}");
    let env = vec![
        (var("TABLE"), overridden.table.clone()),
        (var("TRANSFORM_PATH"), component("evil").display().to_string()),
        (var("TRANSFORM_CACHE_DIR"), test_cache_dir().display().to_string()),
        (var("TRANSFORM_CONFIG_MODE"), "none".into()),
    ];
    let _runtime = server.start_runtime(work.path(), &config, &env);
    wait_for_table(&overridden);
    let rows = block(read_log(&overridden, COUNT as usize, Duration::from_secs(90)));
    let offsets: Vec<String> = rows.into_iter().map(|r| r[0].clone()).collect();
    assert_eq!(offsets, (0..COUNT).map(|i| i.to_string()).collect::<Vec<_>>());
    let exists = block(async {
        let conn = connection().await;
        let admin = conn.get_admin().unwrap();
        admin
            .table_exists(&FlussPath::new(named.database.clone(), named.table.clone()))
            .await
            .unwrap()
    });
    assert!(
        !exists,
        "the table the file names was never created: the override won"
    );
}
