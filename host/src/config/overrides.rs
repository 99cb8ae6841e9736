//! The runtime's environment overrides
//! (`IGGY_CONNECTORS_SINK_<KEY>_PLUGIN_CONFIG_<FIELD>`) reach top-level
//! options only: top-level `transform_<option>` and `spool_<option>` keys
//! are folded into their tables here, over what the tables hold.

/// Moves top-level `<table>_<option>` keys into the `<table>` table, over
/// what it holds (see [`fold_transform_keys`] for why).
pub(super) fn fold_prefixed_keys(value: &mut serde_json::Value, table: &str) {
    let Some(top) = value.as_object_mut() else {
        return;
    };
    let prefix = format!("{table}_");
    let keys: Vec<String> = top.keys().filter(|k| k.starts_with(&prefix)).cloned().collect();
    for key in keys {
        let moved = top.remove(&key).expect("listed above");
        let inner = top
            .entry(table)
            .or_insert_with(|| serde_json::Value::Object(Default::default()));
        if let Some(inner) = inner.as_object_mut() {
            inner.insert(key[prefix.len()..].to_string(), moved);
        }
    }
}

/// Moves top-level `transform_<option>` keys into the `transform` table
/// (`transform_config_<key>` into `transform.config`), over what it holds:
/// the runtime's environment overrides
/// (`IGGY_CONNECTORS_SINK_<KEY>_PLUGIN_CONFIG_<FIELD>`) reach top-level keys
/// only, so this is how they reach the transform's options.
pub(super) fn fold_transform_keys(value: &mut serde_json::Value) {
    let Some(top) = value.as_object_mut() else {
        return;
    };
    let keys: Vec<String> = top
        .keys()
        .filter(|k| k.starts_with("transform_"))
        .cloned()
        .collect();
    for key in keys {
        let field = key["transform_".len()..].to_string();
        let moved = top.remove(&key).expect("listed above");
        let transform = top
            .entry("transform")
            .or_insert_with(|| serde_json::Value::Object(Default::default()));
        let Some(transform) = transform.as_object_mut() else {
            return;
        };
        match field.strip_prefix("config_") {
            Some(config_key) => {
                let config = transform
                    .entry("config")
                    .or_insert_with(|| serde_json::Value::Object(Default::default()));
                if let Some(config) = config.as_object_mut() {
                    config.insert(config_key.to_string(), moved);
                }
            }
            None => {
                transform.insert(field, moved);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use crate::config::tests::{MINIMAL, parse};
    use crate::schema::TablePath;
    use crate::spool::SpoolMode;

    #[test]
    fn top_level_transform_keys_override_the_transform_table() {
        let c = parse(
            r#"{"bootstrap_servers":"x:1","database":"d","table":"t",
                "transform":{"path":"/a.wasm","call_timeout":"1s","config":{"kind":"append","keep":"yes"}},
                "transform_path":"/b.wasm","transform_call_timeout":"250ms","transform_config_kind":"upsert",
                "transform_max_memory":1048576}"#,
        )
        .unwrap();
        let t = c.transform.unwrap();
        assert_eq!(t.path, PathBuf::from("/b.wasm"));
        assert_eq!(t.call_timeout, Some(Duration::from_millis(250)));
        assert_eq!(t.max_memory, Some(1 << 20));
        assert_eq!(t.config.get("kind").map(String::as_str), Some("upsert"));
        assert_eq!(t.config.get("keep").map(String::as_str), Some("yes"));
        // Without a transform table the keys make one.
        let c = parse(r#"{"bootstrap_servers":"x:1","database":"d","table":"t","transform_path":"/c.wasm"}"#)
            .unwrap();
        assert_eq!(c.transform.unwrap().path, PathBuf::from("/c.wasm"));
        // An unknown transform option is still named.
        let e = parse(r#"{"bootstrap_servers":"x:1","database":"d","table":"t","transform_path":"/c.wasm","transform_colour":"red"}"#)
            .unwrap_err();
        assert!(e.to_string().contains("colour"), "{e}");
    }

    #[test]
    fn the_spool_is_on_failure_by_default_and_takes_top_level_keys() {
        let c = parse(MINIMAL).unwrap();
        assert_eq!(c.spool.mode, SpoolMode::OnFailure);
        assert_eq!(c.spool.max_bytes(), 1 << 30);
        let c = parse(
            r#"{"bootstrap_servers":"x:1","database":"d","table":"t",
                "spool":{"mode":"always","max_size":"64 MiB"},"spool_path":"/var/spool/x"}"#,
        )
        .unwrap();
        assert_eq!(c.spool.mode, SpoolMode::Always);
        assert_eq!(c.spool.max_bytes(), 64 << 20);
        assert_eq!(
            c.spool.dir(&TablePath::new("d", "t")),
            Some(PathBuf::from("/var/spool/x"))
        );
        let e = parse(r#"{"bootstrap_servers":"x:1","database":"d","table":"t","spool_mode":"sometimes"}"#)
            .unwrap_err();
        assert!(e.to_string().contains("sometimes"), "{e}");
    }
}
