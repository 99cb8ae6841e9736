//! The main job end to end (run it with `scripts/demo.sh`): the plugin
//! loaded with dlopen as the connectors runtime loads it, a WebAssembly
//! transform routing orders to one Fluss table per tenant and dropping
//! clicks, bad messages in the dead-letter table, and everything read back
//! from Fluss and shown.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use comfy_table::Table;
use iggy_connector_fluss_sink::schema::TablePath;
use integration_tests::fluss_cluster::{block, bootstrap, read_log};
use integration_tests::plugin::{Plugin, TestMessage, logged};
use integration_tests::{component, test_cache_dir};
use serde_json::json;

const TENANTS: [&str; 3] = ["acme", "globex", "initech"];
const BATCHES: u64 = 10;
const PER_BATCH: u64 = 1000;

/// Message `i`: mostly orders, every fifth a click, a few broken ones.
fn message(i: u64) -> TestMessage {
    let tenant = TENANTS[(i % 3) as usize];
    let payload = match i {
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
    };
    TestMessage::text(i, &payload)
}

fn main() {
    let run = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    let database = "demo";
    let sink_table = format!("orders_{run}");
    let prefix = format!("orders_{run}_");
    let dead_letters = TablePath::new(database, format!("dead_letters_{run}"));
    let config = json!({
        "bootstrap_servers": bootstrap(),
        "database": database,
        "table": sink_table,
        "columns": [
            {"name": "tenant", "type": "STRING"},
            {"name": "order_id", "type": "BIGINT", "nullable": false},
            {"name": "amount", "type": "DECIMAL(12, 2)"},
            {"name": "placed_at", "type": "TIMESTAMP(3)"},
            {"name": "iggy_offset", "type": "BIGINT"}
        ],
        "include_metadata": true,
        "auto_create_table": true,
        "allowed_tables": [format!("{database}.{prefix}*")],
        "dead_letter_table": dead_letters.to_string(),
        "transform": {
            "path": component("tenant-router"),
            "cache_dir": test_cache_dir(),
            "config": {"prefix": prefix, "filter_field": "type", "filter_value": "order"}
        }
    });

    let plugin = Plugin::load();
    println!(
        "plugin {} loaded from {}",
        plugin.version(),
        integration_tests::plugin::library_path().display()
    );
    let started = Instant::now();
    assert_eq!(
        plugin.open(1, &config.to_string()),
        0,
        "open failed: {:?}",
        logged("open")
    );
    println!(
        "instance 1 open in {:?}: {}",
        started.elapsed(),
        serde_json::to_string_pretty(&config).unwrap()
    );

    let started = Instant::now();
    for b in 0..BATCHES {
        let messages: Vec<TestMessage> = (b * PER_BATCH..(b + 1) * PER_BATCH).map(message).collect();
        let code = plugin.consume(1, "shop", "orders", 0, &messages);
        assert_eq!(code, 0, "consume failed: {:?}", logged("consume"));
    }
    let elapsed = started.elapsed();
    let total = BATCHES * PER_BATCH;
    println!(
        "\n{total} messages through iggy_sink_consume in {elapsed:.2?} ({:.0} msg/s, each batch acknowledged by Fluss)",
        total as f64 / elapsed.as_secs_f64()
    );
    assert_eq!(plugin.close(1), 0);
    for (_, line) in logged("closed") {
        println!("plugin log: {line}");
    }

    println!("\nRead back from Fluss:");
    let mut read_total = 0;
    for tenant in TENANTS {
        let table = TablePath::new(database, format!("{prefix}{tenant}"));
        let expected = (0..total)
            .filter(|i| {
                TENANTS[(i % 3) as usize] == tenant && i % 5 != 4 && i % 2500 != 1234 && i % 2500 != 2345
            })
            .count();
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
    let letters = block(read_log(&dead_letters, 8, Duration::from_secs(30)));
    let mut shown = Table::new();
    shown.set_header(["offset", "error_kind", "error"]);
    for l in &letters {
        shown.add_row([l[3].clone(), l[7].clone(), l[8].clone()]);
    }
    println!("\n{dead_letters}: {} dead letters\n{shown}", letters.len());
    let filtered = (0..total)
        .filter(|i| i % 5 == 4 && i % 2500 != 1234 && i % 2500 != 2345)
        .count();
    println!(
        "\nin {total} = written {read_total} + filtered {filtered} + dead-lettered {}: {}",
        letters.len(),
        if read_total + filtered + letters.len() == total as usize {
            "every message accounted for"
        } else {
            "MISMATCH"
        }
    );
}
