//! Every option's default, written once: the config reads them when an
//! option is left out, [`crate::WriterSettings`] and [`crate::Limits`] are
//! built from them, and a test holds the README's options table to them.

use std::time::Duration;

/// `batch_size` left out (`auto`): the fewest messages a chunk of a larger
/// batch holds (see `pipeline::chunk_size`).
pub(crate) const BATCH_SIZE: usize = 500;
/// `flush_interval`: the longest rows wait in the client's buffer.
pub(crate) const FLUSH_INTERVAL: Duration = Duration::from_millis(100);
/// `op_header`: the header that sets a JSON message's row kind.
pub(crate) const OP_HEADER: &str = "op";
/// `dynamic_route_field`: the field that names a JSON message's table.
pub(crate) const ROUTE_FIELD: &str = "fluss_table";
/// `delivery_timeout`: the deadline of one `consume`.
pub(crate) const DELIVERY_TIMEOUT: Duration = Duration::from_secs(120);
/// `request_timeout`: how long a write may wait for Fluss's answer before
/// the client's connections to the tablet servers are closed and its
/// requests sent again on new ones. Above the 30 s fluss-rs gives a tablet
/// server to answer an append, so that only a request or an answer lost on
/// the way (a peer that hangs without closing the socket) gets there.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(40);
/// `open_timeout`: the deadline of `open`.
pub(crate) const OPEN_TIMEOUT: Duration = Duration::from_secs(60);
/// `close_timeout`: the longest `close` waits.
pub(crate) const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// `schema_refresh_interval`: how often the tables' schemas are looked at.
pub(crate) const SCHEMA_REFRESH_INTERVAL: Duration = Duration::from_secs(10);
/// `max_table_columns`: the most columns `evolve_schema` grows a table to.
pub(crate) const MAX_TABLE_COLUMNS: usize = 256;
/// `max_retries`: retries of a transiently failed write.
pub(crate) const MAX_RETRIES: u32 = 10;
/// `retry_backoff`: the first backoff between retries.
pub(crate) const RETRY_BACKOFF: Duration = Duration::from_millis(100);
/// `buffer_wait_timeout`: the longest a send waits for room in the client's buffer.
pub(crate) const BUFFER_WAIT_TIMEOUT: Duration = Duration::from_secs(30);
/// `spool.max_size`: the most the spool holds on disk, in bytes.
pub(crate) const SPOOL_MAX_SIZE: u64 = 1 << 30;
/// `transform.reload_check_interval`.
pub(crate) const RELOAD_CHECK_INTERVAL: Duration = Duration::from_secs(2);
/// `transform.call_timeout`: CPU time per call.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// `transform.max_memory`: linear memory per instance, in bytes.
pub(crate) const MAX_MEMORY: usize = 256 << 20;
/// WebAssembly stack per instance, in bytes (not an option).
pub(crate) const MAX_STACK: usize = 512 << 10;
/// `transform.max_rows_per_batch`.
pub(crate) const MAX_ROWS_PER_BATCH: usize = 1_000_000;
/// `transform.max_output_bytes`: encoded row bytes per call.
pub(crate) const MAX_OUTPUT_BYTES: usize = 128 << 20;
/// `transform.max_faults_per_batch`.
pub(crate) const MAX_FAULTS_PER_BATCH: u32 = 32;

/// The memory past which an instance is recycled: half its `max_memory`.
pub(crate) fn recycle_memory(max_memory: usize) -> usize {
    (max_memory / 2).max(1)
}

#[cfg(test)]
mod readme {
    //! The README's options table against the defaults above and the
    //! options the config really has.

    use std::collections::{BTreeMap, BTreeSet};

    use super::*;
    use crate::config::{SinkConfig, SpoolConfig, TransformConfig};

    const README: &str = include_str!("../../../README.md");

    fn duration(d: Duration) -> String {
        if d.subsec_millis() == 0 {
            format!("{}s", d.as_secs())
        } else {
            format!("{}ms", d.as_millis())
        }
    }

    fn size(bytes: u64) -> String {
        match bytes {
            b if b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
            b => format!("{} MiB", b >> 20),
        }
    }

    /// Each option with a default of its own, as the README writes it.
    fn documented() -> Vec<(&'static str, String)> {
        vec![
            ("batch_size", "auto".into()),
            ("flush_interval", duration(FLUSH_INTERVAL)),
            ("op_header", OP_HEADER.into()),
            ("dynamic_route_field", ROUTE_FIELD.into()),
            ("delivery_timeout", duration(DELIVERY_TIMEOUT)),
            ("request_timeout", duration(REQUEST_TIMEOUT)),
            ("open_timeout", duration(OPEN_TIMEOUT)),
            ("close_timeout", duration(CLOSE_TIMEOUT)),
            ("schema_refresh_interval", duration(SCHEMA_REFRESH_INTERVAL)),
            ("max_table_columns", MAX_TABLE_COLUMNS.to_string()),
            ("max_retries", MAX_RETRIES.to_string()),
            ("retry_backoff", duration(RETRY_BACKOFF)),
            ("buffer_wait_timeout", duration(BUFFER_WAIT_TIMEOUT)),
            ("spool.max_size", size(SPOOL_MAX_SIZE)),
            ("transform.reload_check_interval", duration(RELOAD_CHECK_INTERVAL)),
            ("transform.call_timeout", duration(CALL_TIMEOUT)),
            ("transform.max_memory", size(MAX_MEMORY as u64)),
            ("transform.max_rows_per_batch", MAX_ROWS_PER_BATCH.to_string()),
            ("transform.max_output_bytes", size(MAX_OUTPUT_BYTES as u64)),
            ("transform.max_faults_per_batch", MAX_FAULTS_PER_BATCH.to_string()),
        ]
    }

    /// The options table's rows: each name in the first column, with the
    /// row's default column (backticks and thousands commas dropped).
    fn table() -> BTreeMap<String, String> {
        let start = README
            .find("### Options (`[plugin_config]`)")
            .expect("the README has an options section");
        let mut rows = BTreeMap::new();
        for line in README[start..].lines().skip(1) {
            if line.starts_with('#') {
                break;
            }
            let cells: Vec<&str> = line.split(" | ").collect();
            if !line.starts_with("| `") || cells.len() < 4 {
                continue;
            }
            let default = cells[2].replace(['`', ','], "");
            for name in cells[0].trim_start_matches("| ").split(", ") {
                rows.insert(name.trim_matches('`').to_string(), default.clone());
            }
        }
        rows
    }

    /// Every option the config reads, `spool.` and `transform.` ones by
    /// their table's name.
    fn options() -> BTreeSet<String> {
        let keys = |value: serde_json::Value, prefix: &str| -> Vec<String> {
            let object = value.as_object().expect("options serialize as an object").clone();
            object.keys().map(|k| format!("{prefix}{k}")).collect()
        };
        let config = SinkConfig::from_json(r#"{"bootstrap_servers": "x:1", "database": "d", "table": "t"}"#)
            .expect("a minimal config");
        let transform: TransformConfig = serde_json::from_str(r#"{"path": "t.wasm"}"#).unwrap();
        let mut all: BTreeSet<String> = keys(serde_json::to_value(&config).unwrap(), "")
            .into_iter()
            .filter(|k| k != "transform" && k != "spool")
            .collect();
        all.extend(keys(serde_json::to_value(transform).unwrap(), "transform."));
        all.extend(keys(
            serde_json::to_value(SpoolConfig::default()).unwrap(),
            "spool.",
        ));
        // Never serialized, so that it is never written out.
        all.insert("sasl_password".into());
        all
    }

    #[test]
    fn the_readme_gives_each_default_as_the_config_has_it() {
        let table = table();
        for (option, default) in documented() {
            let written = table
                .get(option)
                .unwrap_or_else(|| panic!("the README's options table has no row for `{option}`"));
            assert_eq!(written, &default, "the README's default of `{option}`");
        }
    }

    #[test]
    fn the_readme_lists_every_option_and_no_other() {
        let documented: BTreeSet<String> = table().into_keys().collect();
        let real = options();
        let missing: Vec<_> = real.difference(&documented).collect();
        let stale: Vec<_> = documented.difference(&real).collect();
        assert!(
            missing.is_empty(),
            "options the README does not list: {missing:?}"
        );
        assert!(
            stale.is_empty(),
            "README options the config does not have: {stale:?}"
        );
    }
}
