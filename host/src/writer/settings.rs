//! How a writer connects and how hard it tries.

use std::collections::BTreeMap;
use std::time::Duration;

use super::tables::routing::TablePattern;
use crate::retry::RetryPolicy;
use crate::schema::TablePath;

/// How the writer connects and how hard it tries.
#[derive(Clone)]
pub struct WriterSettings {
    /// `host:port` of the Fluss coordinator(s), comma-separated.
    pub bootstrap_servers: String,
    /// SASL/PLAIN credentials, if the cluster needs them.
    pub sasl: Option<(String, String)>,
    /// The longest one call (`consume`, or a `write` without a deadline of
    /// its own) may take, retries, bisection and dead letters included.
    pub delivery_timeout: Duration,
    /// How long a write waits for Fluss's answer before the client's
    /// connections to the tablet servers are closed, so that fluss-rs sends
    /// its requests again on new ones (see `writer::unanswered`).
    pub request_timeout: Duration,
    /// How many times a write that failed transiently is sent again.
    pub max_retries: u32,
    /// First backoff between retries; doubles each time, with jitter, up to 5 s.
    pub retry_backoff: Duration,
    /// The longest a write may wait for room in the client's buffer.
    pub buffer_wait_timeout: Duration,
    /// The longest rows wait in the client's buffer for more rows before
    /// being sent; the writer flushes at the end of each batch regardless.
    pub batch_timeout: Duration,
    /// Where dead letters go; `None` logs them at error level only.
    pub dead_letter_table: Option<TablePath>,
    /// Create a routed table that does not exist, with the sink table's schema.
    pub auto_create_table: bool,
    /// The tables rows may be routed to besides the sink's own.
    pub allowed_tables: Vec<TablePattern>,
    /// Buckets of tables the sink creates.
    pub bucket_count: Option<i32>,
    /// Fill metadata columns from the messages (see [`crate::rows::metadata`]).
    pub include_metadata: bool,
    /// Create a partition rows need that does not exist; `None`: unless
    /// Fluss creates the table's partitions itself (auto-partitioning).
    pub auto_create_partitions: Option<bool>,
    /// Fluss table properties (`table.*`) of the tables the sink creates.
    pub table_properties: BTreeMap<String, String>,
    /// With `evolve_schema` and dynamic routing: a routed table lacking
    /// the last of the sink table's columns is given them, up to this many
    /// columns in all (`max_table_columns`); `None` leaves routed tables
    /// as they are.
    pub evolve_routed_tables: Option<usize>,
    /// With `evolve_schema` (the JSON mapping): a value its column's type
    /// does not take is dead-lettered as `schema`, not `mapping` (the
    /// column was typed from the field's earlier values).
    pub conversions_are_schema: bool,
}

impl std::fmt::Debug for WriterSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriterSettings")
            .field("bootstrap_servers", &self.bootstrap_servers)
            .field("sasl", &self.sasl.as_ref().map(|(user, _)| (user, "<redacted>")))
            .field("delivery_timeout", &self.delivery_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("max_retries", &self.max_retries)
            .field("retry_backoff", &self.retry_backoff)
            .field("buffer_wait_timeout", &self.buffer_wait_timeout)
            .field("batch_timeout", &self.batch_timeout)
            .field("dead_letter_table", &self.dead_letter_table)
            .field("auto_create_table", &self.auto_create_table)
            .field("allowed_tables", &self.allowed_tables)
            .field("bucket_count", &self.bucket_count)
            .field("include_metadata", &self.include_metadata)
            .field("auto_create_partitions", &self.auto_create_partitions)
            .field("table_properties", &self.table_properties)
            .field("evolve_routed_tables", &self.evolve_routed_tables)
            .field("conversions_are_schema", &self.conversions_are_schema)
            .finish()
    }
}

impl WriterSettings {
    /// How writes are retried: `retry_backoff` and `max_retries`.
    pub(crate) fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy {
            first_backoff: self.retry_backoff,
            max_retries: self.max_retries,
        }
    }
}

/// The options' defaults (`config::defaults`), for a writer made without a
/// connector config (the CLI's `check`, tests and benchmarks).
impl Default for WriterSettings {
    fn default() -> Self {
        use crate::config::defaults;
        Self {
            bootstrap_servers: "127.0.0.1:9123".into(),
            sasl: None,
            delivery_timeout: defaults::DELIVERY_TIMEOUT,
            request_timeout: defaults::REQUEST_TIMEOUT,
            max_retries: defaults::MAX_RETRIES,
            retry_backoff: defaults::RETRY_BACKOFF,
            buffer_wait_timeout: defaults::BUFFER_WAIT_TIMEOUT,
            batch_timeout: defaults::FLUSH_INTERVAL,
            dead_letter_table: None,
            auto_create_table: false,
            allowed_tables: Vec::new(),
            bucket_count: None,
            include_metadata: false,
            auto_create_partitions: None,
            table_properties: BTreeMap::new(),
            evolve_routed_tables: None,
            conversions_are_schema: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_password() {
        let settings = WriterSettings {
            sasl: Some(("alice".into(), "s3cret-pw".into())),
            ..WriterSettings::default()
        };
        let text = format!("{settings:?}");
        assert!(text.contains("alice"), "{text}");
        assert!(!text.contains("s3cret-pw"), "{text}");
    }
}
