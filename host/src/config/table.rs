//! The table a config declares (`columns`, keys, partitioning, Fluss table
//! properties): what `open` and `fluss-sink check` create when it is absent.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{ConfigError, SinkConfig};
use crate::schema::{Column, DataType, TableSchema};

/// The time unit of Fluss's auto-partitioning: one partition per unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AutoPartitionUnit {
    /// `yyyy`
    Year,
    /// `yyyyQq`
    Quarter,
    /// `yyyyMM`
    Month,
    /// `yyyyMMdd`
    Day,
    /// `yyyyMMddHH`
    Hour,
}

impl AutoPartitionUnit {
    /// The value of Fluss's `table.auto-partition.time-unit`.
    pub fn fluss_name(self) -> &'static str {
        match self {
            Self::Year => "YEAR",
            Self::Quarter => "QUARTER",
            Self::Month => "MONTH",
            Self::Day => "DAY",
            Self::Hour => "HOUR",
        }
    }
}

/// Fluss's table property prefix for auto-partitioning.
const AUTO_PARTITION_PREFIX: &str = "table.auto-partition.";

impl SinkConfig {
    /// The table schema declared by `columns`, if any.
    pub fn declared_schema(&self) -> Result<Option<TableSchema>, ConfigError> {
        if self.columns.is_empty() {
            return Ok(None);
        }
        let mut columns = Vec::with_capacity(self.columns.len());
        for c in &self.columns {
            if columns.iter().any(|d: &Column| d.name == c.name) {
                return Err(ConfigError::Inconsistent(format!(
                    "column `{}` is declared twice",
                    c.name
                )));
            }
            let data_type: DataType = c
                .data_type
                .parse()
                .map_err(|e| ConfigError::Inconsistent(format!("column `{}`: {e}", c.name)))?;
            let nullable = c.nullable && !self.primary_key_columns.contains(&c.name);
            columns.push(Column::new(c.name.clone(), data_type, nullable));
        }
        for (what, keys) in [
            ("primary key", &self.primary_key_columns),
            ("partition key", &self.partition_keys),
        ] {
            for key in keys {
                if !columns.iter().any(|c| &c.name == key) {
                    return Err(ConfigError::Inconsistent(format!(
                        "{what} column `{key}` is not among the declared columns"
                    )));
                }
            }
        }
        Ok(Some(TableSchema {
            path: self.table_path()?,
            columns,
            primary_key: self.primary_key_columns.clone(),
            partition_keys: self.partition_keys.clone(),
            added_columns: 0,
        }))
    }

    /// The Fluss properties of the tables the sink creates: `table_properties`
    /// with the `auto_partition_*` options written in.
    pub fn table_properties(&self) -> BTreeMap<String, String> {
        let mut properties = self.table_properties.clone();
        if let Some(unit) = self.auto_partition_time_unit {
            let mut set = |key: &str, value: String| {
                properties.insert(format!("{AUTO_PARTITION_PREFIX}{key}"), value);
            };
            set("enabled", "true".into());
            set("time-unit", unit.fluss_name().into());
            if let Some(n) = self.auto_partition_num_precreate {
                set("num-precreate", n.to_string());
            }
            if let Some(n) = self.auto_partition_num_retention {
                set("num-retention", n.to_string());
            }
            if let Some(key) = &self.auto_partition_key {
                set("key", key.clone());
            }
            if let Some(zone) = &self.auto_partition_time_zone {
                set("time-zone", zone.clone());
            }
        }
        properties
    }

    /// Checks the declared table's keys, partitioning and properties.
    pub(super) fn check_table_options(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Inconsistent(m));
        let auto_set = self.auto_partition_num_precreate.is_some()
            || self.auto_partition_num_retention.is_some()
            || self.auto_partition_key.is_some()
            || self.auto_partition_time_zone.is_some();
        if auto_set && self.auto_partition_time_unit.is_none() {
            return bad(
                "the auto_partition_* options need auto_partition_time_unit (year, quarter, month, day or hour)"
                    .into(),
            );
        }
        if !self.partition_keys.is_empty() && self.columns.is_empty() {
            return bad(
                "partition_keys describe a table the sink creates; they need the table's columns".into(),
            );
        }
        if self.auto_partition_time_unit.is_some() {
            if self.partition_keys.is_empty() {
                return bad("auto_partition_time_unit needs partition_keys".into());
            }
            if self
                .table_properties
                .keys()
                .any(|k| k.starts_with(AUTO_PARTITION_PREFIX))
            {
                return bad(format!(
                    "auto-partitioning is set both by auto_partition_* options and by {AUTO_PARTITION_PREFIX}* table_properties; keep one"
                ));
            }
            match &self.auto_partition_key {
                Some(key) if !self.partition_keys.contains(key) => {
                    return bad(format!(
                        "auto_partition_key `{key}` is not one of partition_keys {:?}",
                        self.partition_keys
                    ));
                }
                None if self.partition_keys.len() > 1 => {
                    return bad(format!(
                        "with several partition_keys {:?}, auto_partition_key names the one Fluss partitions by time",
                        self.partition_keys
                    ));
                }
                _ => {}
            }
        }
        let mut seen = Vec::new();
        for key in &self.partition_keys {
            if seen.contains(&key) {
                return bad(format!("partition key `{key}` is named twice"));
            }
            seen.push(key);
            if !self.primary_key_columns.is_empty() && !self.primary_key_columns.contains(key) {
                return bad(format!(
                    "partition key `{key}` is not in primary_key_columns {:?}; Fluss needs a primary-key table's partition keys in its primary key",
                    self.primary_key_columns
                ));
            }
        }
        if let Some(key) = self.table_properties.keys().find(|k| !k.starts_with("table.")) {
            return bad(format!(
                "table_properties key `{key}` is not a Fluss table property (they start with \"table.\")"
            ));
        }
        self.declared_schema()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::parse;

    const BASE: &str = r#""bootstrap_servers":"x:1","database":"d","table":"t","columns":[{"name":"id","type":"BIGINT"},{"name":"region","type":"STRING"},{"name":"day","type":"STRING"}]"#;

    fn with(extra: &str) -> String {
        format!("{{{BASE},{extra}}}")
    }

    #[test]
    fn partition_keys_and_auto_partitioning_make_the_properties_fluss_reads() {
        let config = parse(&with(
            r#""partition_keys":["day"],"auto_partition_time_unit":"day","auto_partition_num_precreate":3,
               "auto_partition_num_retention":"10","table_properties":{"table.replication.factor":1}"#,
        ))
        .unwrap();
        let schema = config.declared_schema().unwrap().unwrap();
        assert_eq!(schema.partition_keys, vec!["day".to_string()]);
        let properties = config.table_properties();
        let get = |k: &str| properties.get(k).map(String::as_str);
        assert_eq!(get("table.auto-partition.enabled"), Some("true"));
        assert_eq!(get("table.auto-partition.time-unit"), Some("DAY"));
        assert_eq!(get("table.auto-partition.num-precreate"), Some("3"));
        assert_eq!(get("table.auto-partition.num-retention"), Some("10"));
        assert_eq!(get("table.replication.factor"), Some("1"));
        assert_eq!(get("table.auto-partition.key"), None);
    }

    #[test]
    fn inconsistent_partitioning_is_refused_with_the_fix() {
        for (extra, wanted) in [
            (r#""partition_keys":["zone"]"#, "partition key column `zone`"),
            (r#""partition_keys":["day","day"]"#, "named twice"),
            (r#""auto_partition_time_unit":"day""#, "needs partition_keys"),
            (
                r#""auto_partition_num_precreate":2"#,
                "need auto_partition_time_unit",
            ),
            (
                r#""partition_keys":["day","region"],"auto_partition_time_unit":"day""#,
                "auto_partition_key names",
            ),
            (
                r#""partition_keys":["day"],"auto_partition_time_unit":"day","auto_partition_key":"region""#,
                "is not one of partition_keys",
            ),
            (
                r#""partition_keys":["day"],"auto_partition_time_unit":"day","table_properties":{"table.auto-partition.enabled":"true"}"#,
                "keep one",
            ),
            (
                r#""table_properties":{"replication":"3"}"#,
                "not a Fluss table property",
            ),
            (
                r#""table_type":"primary_key","primary_key_columns":["id"],"partition_keys":["day"]"#,
                "in its primary key",
            ),
            (
                r#""auto_partition_time_unit":"week","partition_keys":["day"]"#,
                "unknown variant",
            ),
        ] {
            let err = parse(&with(extra)).unwrap_err().to_string();
            assert!(err.contains(wanted), "{extra}: {err}");
        }
        let err = parse(r#"{"bootstrap_servers":"x:1","database":"d","table":"t","partition_keys":["day"]}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("need the table's columns"), "{err}");
    }
}
