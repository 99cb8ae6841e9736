//! The main job end to end (run it with `scripts/demo.sh`): 10,000 messages
//! through the plugin, a WebAssembly transform routing orders to one Fluss
//! table per tenant and dropping clicks, bad messages in the dead-letter
//! table, and everything read back from Fluss and shown.
//!
//! With the Iggy binaries (`../shared/iggy`, or the folder
//! `FLUSS_SINK_IGGY_DIR` names) the messages go through the real thing: an
//! `iggy-server` on loopback, produced through its HTTP API, consumed by
//! `iggy-connectors` running this plugin. Without them, the plugin is
//! loaded with dlopen as the runtime loads it and driven through its C
//! functions. The demo says which.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use comfy_table::Table;
use iggy_connector_fluss_sink::TablePath;
use integration_tests::fluss_cluster::{block, bootstrap, read_log};
use integration_tests::iggy::{Connector, Outgoing, Server, binaries, start_runtime, wait_for_table};
use integration_tests::plugin::{Plugin, TestMessage, logged};
use integration_tests::{component, test_cache_dir};

const TENANTS: [&str; 3] = ["acme", "globex", "initech"];
const BATCHES: u64 = 10;
const PER_BATCH: u64 = 1000;

/// Message `i`: mostly orders, every fifth a click, a few broken ones.
fn message(i: u64) -> TestMessage {
    TestMessage::text(i, &payload(i))
}

fn payload(i: u64) -> String {
    let tenant = TENANTS[(i % 3) as usize];
    match i {
        _ if i % 2500 == 1234 => r#"{"tenant":"acme","type":"order","order_id":"not a number"}"#.to_string(),
        _ if i % 2500 == 2345 => "this is not JSON".to_string(),
        _ if i % 5 == 4 => format!(r#"{{"tenant":"{tenant}","type":"click","order_id":{i}}}"#),
        _ => format!(
            r#"{{"tenant":"{tenant}","type":"order","order_id":{i},"amount":"{}.{:02}","placed_at":"2026-11-30T12:{:02}:{:02}.000Z"}}"#,
            10 + i % 90,
            i % 100,
            (i / 60) % 60,
            i % 60
        ),
    }
}

/// The demo's tables and the sink's options.
struct Demo {
    database: &'static str,
    sink_table: String,
    prefix: String,
    dead_letters: TablePath,
}

impl Demo {
    fn new() -> Self {
        let run = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
        Self {
            database: "demo",
            sink_table: format!("orders_{run}"),
            prefix: format!("orders_{run}_"),
            dead_letters: TablePath::new("demo", format!("dead_letters_{run}")),
        }
    }

    /// The `[plugin_config]` of the sink, as TOML.
    fn plugin_config(&self) -> String {
        format!(
            r#"bootstrap_servers = "{bootstrap}"
database = "{database}"
table = "{table}"
columns = [
  {{ name = "tenant", type = "STRING" }},
  {{ name = "order_id", type = "BIGINT", nullable = false }},
  {{ name = "amount", type = "DECIMAL(12, 2)" }},
  {{ name = "placed_at", type = "TIMESTAMP(3)" }},
  {{ name = "iggy_offset", type = "BIGINT" }},
]
include_metadata = true
auto_create_table = true
allowed_tables = ["{database}.{prefix}*"]
dead_letter_table = "{dead_letters}"
transform = {{ path = "{component}", cache_dir = "{cache}", config = {{ prefix = "{prefix}", filter_field = "type", filter_value = "order" }} }}"#,
            bootstrap = bootstrap(),
            database = self.database,
            table = self.sink_table,
            prefix = self.prefix,
            dead_letters = self.dead_letters,
            component = component("tenant-router").display(),
            cache = test_cache_dir().display(),
        )
    }
}

/// Through the real server and runtime: produce, let the runtime consume.
/// Returns how many messages the plugin was handed (the runtime's JSON
/// decoder drops payloads that are not JSON before the plugin sees them).
fn through_the_runtime(demo: &Demo, total: u64) -> u64 {
    let work = tempfile::tempdir().unwrap();
    let server = Server::start(work.path(), 1);
    let messages: Vec<Outgoing> = (0..total)
        .map(|i| Outgoing {
            payload: payload(i),
            headers: vec![],
        })
        .collect();
    server.produce_messages(Some(0), &messages);
    println!(
        "iggy-server on 127.0.0.1 (HTTP 3000, TCP 8090): stream {}, topic {}, {total} messages produced",
        server.stream, server.topic
    );
    let started = Instant::now();
    let mut runtime = start_runtime(
        &server,
        work.path(),
        "runtime",
        &Connector::new(demo.plugin_config()),
        &[],
    );
    wait_for_table(&TablePath::new(demo.database, demo.sink_table.clone()));
    println!(
        "iggy-connectors running this plugin; the sink opened in {:.2?}",
        started.elapsed()
    );
    // The last tenant table holds the last order once the runtime is through.
    let last = TablePath::new(demo.database, format!("{}{}", demo.prefix, TENANTS[2]));
    wait_for_table(&last);
    let expected_last = expected_rows(TENANTS[2], total);
    block(read_log(&last, expected_last, Duration::from_secs(120)));
    println!(
        "the runtime consumed them in {:.2?} (open included)",
        started.elapsed()
    );
    runtime.terminate(Duration::from_secs(30));
    let log = runtime.log();
    let closed = log
        .lines()
        .find(|l| l.contains("closed instance="))
        .expect("the runtime closed the sink");
    let closed = &closed[closed.find("Fluss sink").unwrap_or(0)..];
    println!("plugin log (through the runtime): {closed}");
    let at = closed.find("received=").expect("a received count") + "received=".len();
    closed[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a received count")
}

/// Through the plugin's C functions, loaded with dlopen as the runtime does.
/// Returns how many messages the plugin was handed: all of them.
fn through_the_harness(demo: &Demo, total: u64) -> u64 {
    let plugin = Plugin::load();
    println!(
        "plugin {} loaded from {}",
        plugin.version(),
        integration_tests::plugin::library_path().display()
    );
    let config: toml::Value = toml::from_str(&demo.plugin_config()).expect("the demo's config is TOML");
    let config = serde_json::to_value(config).unwrap();
    let started = Instant::now();
    assert_eq!(
        plugin.open(1, &config.to_string()),
        0,
        "open failed: {:?}",
        logged("open")
    );
    println!("instance 1 open in {:?}", started.elapsed());
    let started = Instant::now();
    for b in 0..total / PER_BATCH {
        let messages: Vec<TestMessage> = (b * PER_BATCH..(b + 1) * PER_BATCH).map(message).collect();
        let code = plugin.consume(1, "shop", "orders", 0, &messages);
        assert_eq!(code, 0, "consume failed: {:?}", logged("consume"));
    }
    let elapsed = started.elapsed();
    println!(
        "{total} messages through iggy_sink_consume in {elapsed:.2?} ({:.0} msg/s, each batch acknowledged by Fluss)",
        total as f64 / elapsed.as_secs_f64()
    );
    assert_eq!(plugin.close(1), 0);
    for (_, line) in logged("closed") {
        println!("plugin log: {line}");
    }
    total
}

/// Rows `tenant`'s table should hold after `total` messages.
fn expected_rows(tenant: &str, total: u64) -> usize {
    (0..total)
        .filter(|i| TENANTS[(i % 3) as usize] == tenant && i % 5 != 4 && i % 2500 != 1234 && i % 2500 != 2345)
        .count()
}

fn main() {
    let demo = Demo::new();
    let total = BATCHES * PER_BATCH;
    let received = match binaries() {
        Ok(dir) => {
            println!("== through the real Iggy runtime ({})\n", dir.display());
            through_the_runtime(&demo, total)
        }
        Err(reason) => {
            println!("== through the dlopen harness, not the Iggy runtime: {reason}\n");
            through_the_harness(&demo, total)
        }
    };
    let Demo {
        database,
        prefix,
        dead_letters,
        ..
    } = &demo;
    println!("\nRead back from Fluss:");
    let mut read_total = 0;
    for tenant in TENANTS {
        let table = TablePath::new(*database, format!("{prefix}{tenant}"));
        let expected = expected_rows(tenant, total);
        let rows = block(read_log(&table, expected, Duration::from_secs(60)));
        read_total += rows.len();
        let mut shown = Table::new();
        shown.set_header(["tenant", "order_id", "amount", "placed_at", "iggy_offset"]);
        for row in rows.iter().take(3) {
            shown.add_row(row.clone());
        }
        println!(
            "\n{table}: {} rows (expected {expected}); the first three:\n{shown}",
            rows.len()
        );
    }
    // Eight broken messages; those that are not JSON at all never reach the
    // plugin through the runtime (its JSON decoder drops them).
    let dropped = (total - received) as usize;
    let letters = block(read_log(dead_letters, 8 - dropped, Duration::from_secs(30)));
    let mut shown = Table::new();
    shown.set_header(["offset", "error_kind", "error"]);
    for l in &letters {
        shown.add_row([l[3].clone(), l[7].clone(), l[8].clone()]);
    }
    println!("\n{dead_letters}: {} dead letters\n{shown}", letters.len());
    let filtered = (0..total)
        .filter(|i| i % 5 == 4 && i % 2500 != 1234 && i % 2500 != 2345)
        .count();
    if dropped > 0 {
        println!(
            "\nthe runtime's JSON decoder dropped {dropped} payloads that are not JSON before the plugin saw them"
        );
    }
    println!(
        "\nin {total} = dropped by the runtime {dropped} + written {read_total} + filtered {filtered} + dead-lettered {}: {}",
        letters.len(),
        if dropped + read_total + filtered + letters.len() == total as usize {
            "every message accounted for"
        } else {
            "MISMATCH"
        }
    );
}
