//! The plugin inside the real Apache Iggy server and connectors runtime
//! (`../shared/iggy/iggy-server` and `iggy-connectors`, see its README):
//! messages produced through the server's HTTP API land in Fluss through
//! the runtime's dlopen of this plugin, read back with an independent
//! client. Needs the binaries (with `libhwloc15` and `libudev1`, which
//! `scripts/test.sh` installs) and the shared local Fluss cluster; fails,
//! never skips, when they are absent.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use fluss::metadata::TablePath as FlussPath;
use integration_tests::fluss_cluster::{block, bootstrap, connection, read_log, unique_table};
use integration_tests::repo_root;
use serde_json::{Value, json};

const HTTP: &str = "http://127.0.0.1:3000";

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

fn spawn(name: &'static str, mut command: Command, dir: &std::path::Path) -> Running {
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

#[test]
fn json_lands_in_a_log_table_with_metadata_through_the_real_runtime() {
    let iggy = iggy_dir();
    let work = tempfile::tempdir().unwrap();
    let mut server = Command::new(iggy.join("iggy-server"));
    server
        .arg("--with-default-root-credentials")
        .env("IGGY_ROOT_USERNAME", "iggy")
        .env("IGGY_ROOT_PASSWORD", "iggy")
        .env("IGGY_SYSTEM_PATH", work.path().join("iggy-data"))
        .current_dir(work.path());
    let _server = spawn("iggy-server", server, work.path());

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

    const COUNT: u64 = 3000;
    for chunk in 0..COUNT / 500 {
        let messages: Vec<Value> = (chunk * 500..(chunk + 1) * 500)
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
            &format!("/streams/{stream}/topics/{topic}/messages"),
            Some(&token),
            json!({"partitioning": {"kind": "partition_id", "value": b64(&0u32.to_le_bytes())},
                   "messages": messages}),
        )
        .expect("produce");
    }

    let table = unique_table("runtime_json");
    let connectors = work.path().join("connectors");
    std::fs::create_dir_all(&connectors).unwrap();
    let plugin = integration_tests::plugin::library_path();
    assert!(
        plugin.exists(),
        "{} is missing: cargo build -p iggy_connector_fluss_sink",
        plugin.display()
    );
    let plugin_path = plugin.with_extension("");
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
bootstrap_servers = "{bootstrap}"
database = "{database}"
table = "{table_name}"
include_metadata = true
dead_letter_table = "{database}.{table_name}_dlq"
columns = [
  {{ name = "order_id", type = "BIGINT", nullable = false }},
  {{ name = "customer", type = "STRING" }},
  {{ name = "amount", type = "DECIMAL(12, 2)" }},
  {{ name = "iggy_stream", type = "STRING" }},
  {{ name = "iggy_topic", type = "STRING" }},
  {{ name = "iggy_offset", type = "BIGINT" }},
]
"#,
            plugin = plugin_path.display(),
            bootstrap = bootstrap(),
            database = table.database,
            table_name = table.table,
        ),
    )
    .unwrap();
    let runtime_config = work.path().join("runtime.toml");
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
            state = work.path().join("state").display(),
            connectors = connectors.display(),
        ),
    )
    .unwrap();
    let mut runtime = Command::new(iggy.join("iggy-connectors"));
    runtime
        .env("IGGY_CONNECTORS_CONFIG_PATH", &runtime_config)
        .current_dir(work.path());
    let _runtime = spawn("iggy-connectors", runtime, work.path());

    // The plugin creates the table when the runtime opens it.
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
                stream.to_string(),
                topic.to_string(),
                i.to_string(),
            ],
            "row {i}: its payload and the runtime's metadata (offset = the message's own)"
        );
    }
}
