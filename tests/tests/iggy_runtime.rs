//! The plugin inside the real Apache Iggy server and connectors runtime
//! (`../shared/iggy/iggy-server` and `iggy-connectors`, see its README):
//! messages produced through the server's HTTP API land in Fluss through
//! the runtime's dlopen of this plugin, read back with an independent
//! client. Needs the binaries (with `libhwloc15` and `libudev1`, which
//! `scripts/test.sh` installs) and the shared local Fluss cluster; fails,
//! never skips, when they are absent and `CI=true`; elsewhere a test without
//! the binaries prints one `NOT RUN` line saying how to provide them.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use iggy_connector_fluss_sink::TablePath;
use integration_tests::fluss_cluster::{block, bootstrap, connection, fluss_path, read_log, unique_table};
use integration_tests::iggy::{Connector, Outgoing, Server, binaries_present, start_runtime, wait_for_table};
use integration_tests::{component, test_cache_dir};

/// Tables that change, through the real runtime.
#[path = "iggy_runtime/schema.rs"]
mod schema;

/// The runtime's buffers, byte for byte, against the plugin's decoder.
#[path = "iggy_runtime/captured.rs"]
mod captured;

/// The server's ports are fixed: one test at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

#[test]
fn json_lands_in_a_log_table_with_metadata_through_the_real_runtime() {
    if !binaries_present("json_lands_in_a_log_table_with_metadata_through_the_real_runtime") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let work = tempfile::tempdir().unwrap();
    let server = Server::start(work.path(), 1);
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
    let _runtime = start_runtime(&server, work.path(), "runtime", &Connector::new(config), &[]);
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
    if !binaries_present("environment_overrides_reach_the_table_and_the_transform") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let work = tempfile::tempdir().unwrap();
    let server = Server::start(work.path(), 1);
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
    let _runtime = start_runtime(&server, work.path(), "runtime", &Connector::new(config), &env);
    wait_for_table(&overridden);
    let rows = block(read_log(&overridden, COUNT as usize, Duration::from_secs(90)));
    let offsets: Vec<String> = rows.into_iter().map(|r| r[0].clone()).collect();
    assert_eq!(offsets, (0..COUNT).map(|i| i.to_string()).collect::<Vec<_>>());
    let exists = block(async {
        let conn = connection().await;
        let admin = conn.get_admin().unwrap();
        admin.table_exists(&fluss_path(&named)).await.unwrap()
    });
    assert!(
        !exists,
        "the table the file names was never created: the override won"
    );
}

/// The text of string column `column` of the row keyed `id` in `table`, if any.
fn lookup(table: &TablePath, id: i64, column: usize) -> Option<String> {
    block(integration_tests::fluss_cluster::lookup_string(table, id, column))
}

#[test]
fn a_transform_upserts_and_deletes_from_an_op_header_in_a_primary_key_table() {
    if !binaries_present("a_transform_upserts_and_deletes_from_an_op_header_in_a_primary_key_table") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let work = tempfile::tempdir().unwrap();
    let server = Server::start(work.path(), 1);
    let table = unique_table("runtime_cdc");
    // Ids 0..300 created, then the even ones renamed, then every third deleted.
    let mut messages = Vec::new();
    for id in 0..300 {
        messages.push(Outgoing::with_header(
            format!(r#"{{"id":{id},"name":"n{id}"}}"#),
            "op",
            "c",
        ));
    }
    for id in (0..300).step_by(2) {
        messages.push(Outgoing::with_header(
            format!(r#"{{"id":{id},"name":"r{id}"}}"#),
            "op",
            "u",
        ));
    }
    for id in (0..300).step_by(3) {
        messages.push(Outgoing::with_header(format!(r#"{{"id":{id}}}"#), "op", "d"));
    }
    server.produce_messages(Some(0), &messages);
    let config = format!(
        r#"bootstrap_servers = "{bootstrap}"
database = "{database}"
table = "{name}"
table_type = "primary_key"
primary_key_columns = ["id"]
columns = [ {{ name = "id", type = "BIGINT" }}, {{ name = "name", type = "STRING" }} ]
[plugin_config.transform]
path = "{component}"
cache_dir = "{cache}""#,
        bootstrap = bootstrap(),
        database = table.database,
        name = table.table,
        component = component("cdc-upsert").display(),
        cache = test_cache_dir().display(),
    );
    let _runtime = start_runtime(&server, work.path(), "runtime", &Connector::new(config), &[]);
    wait_for_table(&table);
    // One partition, in order: once the last update (id 298) and the last
    // delete (id 297, created before it) show, everything before them has.
    let started = Instant::now();
    while lookup(&table, 298, 1).as_deref() != Some("r298") || lookup(&table, 297, 1).is_some() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the stream did not land in 60 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    for id in 0..300i64 {
        let wanted = match id {
            _ if id % 3 == 0 => None,
            _ if id % 2 == 0 => Some(format!("r{id}")),
            _ => Some(format!("n{id}")),
        };
        assert_eq!(lookup(&table, id, 1), wanted, "id {id}");
    }
}

#[test]
fn a_tenant_router_spreads_one_topic_over_a_table_per_tenant() {
    if !binaries_present("a_tenant_router_spreads_one_topic_over_a_table_per_tenant") {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let work = tempfile::tempdir().unwrap();
    let server = Server::start(work.path(), 1);
    let table = unique_table("runtime_tenants");
    let tenants = ["acme", "globex", "initech"];
    let messages: Vec<Outgoing> = (0..900)
        .map(|i| Outgoing {
            payload: format!(r#"{{"tenant":"{}","v":{i}}}"#, tenants[i % 3]),
            headers: vec![],
        })
        .collect();
    server.produce_messages(Some(0), &messages);
    let prefix = format!("{}_", table.table);
    let config = format!(
        r#"bootstrap_servers = "{bootstrap}"
database = "{database}"
table = "{name}"
columns = [ {{ name = "tenant", type = "STRING" }}, {{ name = "v", type = "INT" }} ]
auto_create_table = true
allowed_tables = ["{database}.{prefix}*"]
[plugin_config.transform]
path = "{component}"
cache_dir = "{cache}"
config = {{ prefix = "{prefix}" }}"#,
        bootstrap = bootstrap(),
        database = table.database,
        name = table.table,
        component = component("tenant-router").display(),
        cache = test_cache_dir().display(),
    );
    let _runtime = start_runtime(&server, work.path(), "runtime", &Connector::new(config), &[]);
    for (t, tenant) in tenants.iter().enumerate() {
        let routed = TablePath::new(table.database.clone(), format!("{prefix}{tenant}"));
        wait_for_table(&routed);
        let rows = block(read_log(&routed, 300, Duration::from_secs(60)));
        let values: Vec<String> = rows.iter().map(|r| r[1].clone()).collect();
        let wanted: Vec<String> = (0..900).filter(|i| i % 3 == t).map(|i| i.to_string()).collect();
        assert_eq!(
            values, wanted,
            "table {routed} holds its tenant's messages, in order, once"
        );
        assert!(rows.iter().all(|r| r[0] == *tenant));
    }
}
