//! Whether Fluss's coordinator knows a table.
//!
//! A table whose creation the coordinator missed (apache/fluss#1018) opens
//! like any other; only the coordinator's own state lacks it. For a
//! partitioned table that is harmful beyond the table: the first partition
//! created for it makes Fluss 0.9.1's coordinator fail half-way through a
//! batch of requests to the tablet servers, after which it brings up no new
//! bucket for any table. No client call asks the coordinator about its
//! state, so the writer asks one that checks it: releasing buckets of the
//! table from a lease that does not exist. The coordinator looks the table
//! up by id in its state first: a table it does not know is refused as
//! unknown; a known one gets another answer (a log table is refused as not
//! keyed; a keyed one's release of a lease that does not exist changes
//! nothing).

use std::time::Duration;

use fluss::metadata::TableBucket;
use fluss::rpc::FlussError;

use super::birth::BIRTH_LIMIT;
use super::expired;
use crate::deadline::Deadline;
use crate::schema::TablePath;
use crate::writer::{FlussWriter, WriteError};

/// The lease the probe releases from: no lease has this id.
const NO_LEASE: &str = "iggy-fluss-sink-probe-no-such-lease";

/// How often an unknown table is asked about again.
const ASK_EVERY: Duration = Duration::from_millis(200);

/// What the coordinator answered about a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::writer) enum Known {
    /// It knows the table (or answered in a way that does not say).
    Yes,
    /// It does not know the table.
    No,
}

impl FlussWriter {
    /// Whether the coordinator knows the table with id `table_id` (at
    /// `path`). `Err`: no answer before `deadline`, or none at all.
    pub(in crate::writer) async fn coordinator_knows(
        &self,
        path: &TablePath,
        table_id: i64,
        deadline: Deadline,
    ) -> Result<Known, WriteError> {
        let asked = self
            .admin
            .release_kv_snapshot_lease(NO_LEASE, vec![TableBucket::new(table_id, 0)]);
        match deadline
            .run(asked)
            .await
            .map_err(|_| expired(path, "asking the coordinator about"))?
        {
            Err(e) if e.api_error() == Some(FlussError::UnknownTableOrBucketException) => Ok(Known::No),
            Err(e) if e.api_error().is_none() => Err(WriteError::Catalog {
                table: path.to_string(),
                step: Some("cannot ask the coordinator about the table".into()),
                source: Box::new(e),
            }),
            _ => Ok(Known::Yes),
        }
    }

    /// Returns once the coordinator knows the partitioned table with id
    /// `table_id`, before a partition is created for it; asks again while
    /// [`BIRTH_LIMIT`] has not passed since the first time it did not
    /// (a table made a moment ago may not be known yet). `Ok(Err(reason))`:
    /// it still does not, and no partition may be created.
    pub(in crate::writer) async fn before_creating_partitions(
        &self,
        path: &TablePath,
        table_id: i64,
        deadline: Deadline,
    ) -> Result<Result<(), String>, WriteError> {
        if self.known_tables.contains(table_id) {
            return Ok(Ok(()));
        }
        loop {
            if self.coordinator_knows(path, table_id, deadline).await? == Known::Yes {
                self.known_tables.knows(table_id);
                return Ok(Ok(()));
            }
            let unknown_for = self.known_tables.unknown_for(table_id);
            if unknown_for >= BIRTH_LIMIT {
                return Ok(Err(format!(
                    "Fluss's coordinator does not know table {path} ({} s after the sink first asked): it \
                     missed the table's creation (apache/fluss#1018, fixed after Fluss 0.9.1), and a \
                     partition created for it would stop the coordinator bringing up buckets for every \
                     table. Drop the table and create it again",
                    unknown_for.as_secs()
                )));
            }
            deadline
                .run(tokio::time::sleep(ASK_EVERY))
                .await
                .map_err(|_| expired(path, "waiting for the coordinator to know"))?;
        }
    }
}

/// What the writer has seen of a table's standing with the coordinator.
#[derive(Debug, Clone, Copy)]
enum Seen {
    /// The coordinator knows it: no need to ask again.
    Known,
    /// The coordinator did not know it, first at this instant.
    UnknownSince(std::time::Instant),
}

/// What the writer has seen of the coordinator's tables, by table id.
#[derive(Debug, Default)]
pub(in crate::writer) struct KnownTables(std::sync::Mutex<std::collections::HashMap<i64, Seen>>);

impl KnownTables {
    fn map(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<i64, Seen>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn contains(&self, table_id: i64) -> bool {
        matches!(self.map().get(&table_id), Some(Seen::Known))
    }

    fn knows(&self, table_id: i64) {
        self.map().insert(table_id, Seen::Known);
    }

    /// How long `table_id` has been seen unknown (zero the first time).
    fn unknown_for(&self, table_id: i64) -> Duration {
        let now = std::time::Instant::now();
        let mut map = self.map();
        let seen = map.entry(table_id).or_insert(Seen::UnknownSince(now));
        match *seen {
            Seen::UnknownSince(since) => now.saturating_duration_since(since),
            Seen::Known => {
                *seen = Seen::UnknownSince(now);
                Duration::ZERO
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_seen_known_stays_known_and_an_unknown_one_ages() {
        let tables = KnownTables::default();
        assert!(!tables.contains(7));
        assert_eq!(tables.unknown_for(7), Duration::ZERO);
        std::thread::sleep(Duration::from_millis(20));
        assert!(tables.unknown_for(7) >= Duration::from_millis(20));
        assert!(!tables.contains(7));
        tables.knows(7);
        assert!(tables.contains(7));
        assert!(!tables.contains(8));
    }
}
