//! A table the writer creates comes up, or is made again.
//!
//! Fluss 0.9's coordinator can register a new table and never bring its
//! buckets up: it misses the table's creation event (apache/fluss#1018,
//! fixed after Fluss 0.9.1), and every write to the table then waits
//! forever. So a table this writer creates is used only once each of its
//! buckets has a leader. One that the cluster still says is not up
//! [`BIRTH_LIMIT`] after its creation holds no row (nothing is written to a
//! table before it is up): it is dropped and created again, at most
//! [`MAX_REMAKES`] times. A table the writer did not create is never
//! dropped.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use fluss::metadata::{TableBucket, TableDescriptor};
use fluss::rpc::FlussError;

use super::coordinator::Known;
use super::{expired, fluss_path};
use crate::deadline::Deadline;
use crate::schema::TablePath;
use crate::writer::{FlussWriter, WriteError};

/// How long a table this writer created may take to bring every bucket up
/// before it is taken for lost (a healthy one takes well under a second).
pub(in crate::writer) const BIRTH_LIMIT: Duration = Duration::from_secs(10);

/// How many times one table is dropped and created again before the writer
/// gives up on it.
pub(in crate::writer) const MAX_REMAKES: u32 = 2;

/// How often a new table is looked at while it is not up.
const LOOK_EVERY: Duration = Duration::from_millis(200);

/// What looking at a new table found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::writer) enum Look {
    /// It opens and each of its buckets has a leader.
    Up,
    /// The cluster answered, and the table is not up: why.
    Down(String),
    /// The cluster did not answer: nothing is known of the table.
    Unreachable(String),
}

/// What to do with a new table after a look at it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::writer) enum Next {
    /// It is up: use it.
    Use,
    /// Look again.
    Wait,
    /// Drop it and create it again, for this reason.
    Remake(String),
    /// It was made again [`MAX_REMAKES`] times and is still not up.
    GiveUp(String),
}

/// A table this writer created that it has not yet seen up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::writer) struct Birth {
    /// When it was (last) created.
    pub created: Instant,
    /// How many times it was dropped and created again.
    pub remakes: u32,
}

impl Birth {
    /// What to do after `look`, at `now`. Only a table the cluster itself
    /// says is not up is made again: while the cluster does not answer, the
    /// writer waits.
    pub(in crate::writer) fn next(&self, look: &Look, now: Instant) -> Next {
        let reason = match look {
            Look::Up => return Next::Use,
            Look::Unreachable(_) => return Next::Wait,
            Look::Down(reason) => reason,
        };
        let waited = now.saturating_duration_since(self.created);
        if waited < BIRTH_LIMIT {
            return Next::Wait;
        }
        let why = format!("not up {} s after it was created: {reason}", waited.as_secs());
        if self.remakes < MAX_REMAKES {
            Next::Remake(why)
        } else {
            Next::GiveUp(why)
        }
    }
}

/// The tables this writer created and has not yet seen up, by path.
#[derive(Debug, Default)]
pub(in crate::writer) struct Births {
    map: std::sync::Mutex<HashMap<TablePath, Birth>>,
    /// Held for one look at a new table and what follows from it, so that
    /// two calls waiting for the same table never drop it on an old look
    /// (one may have seen it up since, and written to it).
    turn: tokio::sync::Mutex<()>,
}

impl Births {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<TablePath, Birth>> {
        self.map.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `path` was created now (again: its count of remakes is kept).
    fn born(&self, path: &TablePath) {
        let now = Instant::now();
        self.map()
            .entry(path.clone())
            .and_modify(|b| b.created = now)
            .or_insert(Birth {
                created: now,
                remakes: 0,
            });
    }

    fn get(&self, path: &TablePath) -> Option<Birth> {
        self.map().get(path).copied()
    }

    fn up(&self, path: &TablePath) {
        self.map().remove(path);
    }

    fn counted_remake(&self, path: &TablePath) {
        if let Some(b) = self.map().get_mut(path) {
            b.remakes += 1;
        }
    }
}

impl FlussWriter {
    /// Creates the table at `path` as `descriptor` says, unless it exists,
    /// and, when this writer created it, returns once it is up (made again
    /// while Fluss leaves it down), within `deadline`.
    pub(super) async fn create_table_up(
        &self,
        path: &TablePath,
        descriptor: &TableDescriptor,
        deadline: Deadline,
    ) -> Result<(), WriteError> {
        let created = self.create_table_once(path, descriptor, deadline).await?;
        if created {
            self.births.born(path);
        } else if self.births.get(path).is_none() {
            // Another's table, or one of this writer's already seen up.
            return Ok(());
        }
        loop {
            let turn = deadline
                .run(self.births.turn.lock())
                .await
                .map_err(|_| expired(path, "waiting to look at new table"))?;
            let Some(birth) = self.births.get(path) else {
                return Ok(());
            };
            let look = self.look_at_new_table(path, deadline).await?;
            match birth.next(&look, Instant::now()) {
                Next::Use => {
                    self.births.up(path);
                    return Ok(());
                }
                Next::Wait => {
                    drop(turn);
                    deadline
                        .run(tokio::time::sleep(LOOK_EVERY))
                        .await
                        .map_err(|_| expired(path, "waiting for the buckets of new table"))?
                }
                Next::Remake(reason) => self.remake_table(path, descriptor, &reason, deadline).await?,
                Next::GiveUp(reason) => {
                    return Err(WriteError::Table {
                        table: path.to_string(),
                        reason: format!(
                            "Fluss registered this table but never brought its buckets up, though it was \
                             dropped and created again {MAX_REMAKES} times ({reason}); see the coordinator's \
                             log for the table, drop it and restart the connector"
                        ),
                    });
                }
            }
        }
    }

    /// Asks Fluss to create the table; whether this call created it
    /// (`false`: it existed).
    async fn create_table_once(
        &self,
        path: &TablePath,
        descriptor: &TableDescriptor,
        deadline: Deadline,
    ) -> Result<bool, WriteError> {
        match deadline
            .run(self.admin.create_table(&fluss_path(path), descriptor, false))
            .await
            .map_err(|_| expired(path, "creating the table"))?
        {
            Ok(()) => Ok(true),
            Err(e) if e.api_error() == Some(FlussError::TableAlreadyExist) => Ok(false),
            Err(e) => Err(WriteError::Catalog {
                table: path.to_string(),
                step: Some("cannot create table".into()),
                source: Box::new(e),
            }),
        }
    }

    /// Whether the new table at `path` opens with a leader for each bucket
    /// (a partitioned table's buckets come with its partitions: it is up
    /// once it opens and the coordinator knows it).
    async fn look_at_new_table(&self, path: &TablePath, deadline: Deadline) -> Result<Look, WriteError> {
        let table = match deadline
            .run(self.connection.get_table(&fluss_path(path)))
            .await
            .map_err(|_| expired(path, "looking up new table"))?
        {
            Ok(table) => table,
            Err(e) if e.api_error().is_some() => {
                return Ok(Look::Down(format!(
                    "it does not open: {}",
                    first_line(&e.to_string())
                )));
            }
            Err(e) => return Ok(Look::Unreachable(e.to_string())),
        };
        let info = table.get_table_info();
        if info.is_partitioned() {
            // Its buckets come with its partitions; the coordinator must
            // know it before one is created (see `coordinator`).
            return Ok(
                match self.coordinator_knows(path, info.get_table_id(), deadline).await {
                    Ok(Known::Yes) => Look::Up,
                    Ok(Known::No) => Look::Down("Fluss's coordinator does not know it".into()),
                    Err(e @ WriteError::DeadlinePassed { .. }) => return Err(e),
                    Err(e) => Look::Unreachable(e.to_string()),
                },
            );
        }
        let cluster = self.connection.get_metadata().get_cluster();
        let leaderless = (0..info.get_num_buckets()).find(|&b| {
            cluster
                .leader_for(&TableBucket::new(info.get_table_id(), b))
                .is_none()
        });
        Ok(match leaderless {
            Some(bucket) => Look::Down(format!("bucket {bucket} has no leader")),
            None => Look::Up,
        })
    }

    /// Drops the table this writer created at `path`, which never came up
    /// and so holds no row, and creates it again.
    async fn remake_table(
        &self,
        path: &TablePath,
        descriptor: &TableDescriptor,
        reason: &str,
        deadline: Deadline,
    ) -> Result<(), WriteError> {
        tracing::warn!(
            table = %path,
            "the table this sink created is {reason}: Fluss registered it without bringing its buckets up \
             (a coordinator that missed its creation: apache/fluss#1018, fixed after Fluss 0.9.1); it holds \
             no row, so it is dropped and created again"
        );
        deadline
            .run(self.admin.drop_table(&fluss_path(path), true))
            .await
            .map_err(|_| expired(path, "dropping new table that never came up"))?
            .map_err(|e| WriteError::Catalog {
                table: path.to_string(),
                step: Some("cannot drop the table that never came up".into()),
                source: Box::new(e),
            })?;
        self.births.counted_remake(path);
        self.tables.lock().await.remove(path);
        if let Some(metrics) = &self.metrics {
            metrics.table_remade();
        }
        // Created again by this writer, or by another in between: looked at
        // as this writer's either way.
        self.create_table_once(path, descriptor, deadline).await?;
        self.births.born(path);
        Ok(())
    }
}

/// The first line of `message`, at most 300 characters (Fluss's server
/// errors carry a Java stack trace).
fn first_line(message: &str) -> String {
    let line = message.lines().next().unwrap_or_default();
    match line.char_indices().nth(300) {
        Some((end, _)) => format!("{}…", &line[..end]),
        None => line.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn birth(ago: Duration, remakes: u32) -> (Birth, Instant) {
        let now = Instant::now() + Duration::from_secs(3600);
        (
            Birth {
                created: now - ago,
                remakes,
            },
            now,
        )
    }

    #[test]
    fn an_up_table_is_used_at_once() {
        let (b, now) = birth(Duration::from_secs(600), MAX_REMAKES);
        assert_eq!(b.next(&Look::Up, now), Next::Use);
    }

    #[test]
    fn a_down_table_is_waited_for_until_the_limit_then_made_again() {
        let down = Look::Down("bucket 1 has no leader".into());
        let (b, now) = birth(BIRTH_LIMIT - Duration::from_millis(1), 0);
        assert_eq!(b.next(&down, now), Next::Wait);
        let (b, now) = birth(BIRTH_LIMIT, 0);
        assert_eq!(
            b.next(&down, now),
            Next::Remake("not up 10 s after it was created: bucket 1 has no leader".into())
        );
    }

    #[test]
    fn a_table_is_made_again_at_most_max_remakes_times() {
        let down = Look::Down("it does not open: unknown server error".into());
        let (b, now) = birth(BIRTH_LIMIT, MAX_REMAKES - 1);
        assert!(matches!(b.next(&down, now), Next::Remake(_)));
        let (b, now) = birth(BIRTH_LIMIT, MAX_REMAKES);
        assert!(matches!(b.next(&down, now), Next::GiveUp(r) if r.ends_with("unknown server error")));
    }

    #[test]
    fn an_unreachable_cluster_never_gets_a_table_dropped() {
        let (b, now) = birth(BIRTH_LIMIT * 100, 0);
        assert_eq!(
            b.next(&Look::Unreachable("connection refused".into()), now),
            Next::Wait
        );
    }

    #[test]
    fn a_server_error_is_told_by_its_first_line_only() {
        assert_eq!(
            first_line("Failed to get tables.\n\tat org.apache.Foo"),
            "Failed to get tables."
        );
        assert_eq!(first_line(&"é".repeat(400)).chars().count(), 301);
    }

    #[test]
    fn a_remade_table_counts_its_remakes_and_waits_afresh() {
        let births = Births::default();
        let path: TablePath = "db.t".parse().unwrap();
        births.born(&path);
        births.counted_remake(&path);
        births.born(&path);
        let b = births.get(&path).unwrap();
        assert_eq!(b.remakes, 1);
        assert!(b.created.elapsed() < BIRTH_LIMIT);
        births.up(&path);
        assert_eq!(births.get(&path), None);
    }
}
