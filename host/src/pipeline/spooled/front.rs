//! What the drainer writes next: the queue's front batch, and while that is
//! only on disk, the batches queued right behind it too, read back and
//! joined into one write. Joined, a backlog goes to Fluss in one write's
//! round trips instead of one batch's at a time, so that a spool filled
//! while a tablet server was lost empties faster than new batches come.

use super::{Attempt, Spooler};
use crate::pipeline::Held;
use crate::spool::journal::RecordFile;
use crate::spool::record::SpooledBatch;

/// The most record bytes one replay joins (records are only joined while
/// they stay under it; a larger single record is replayed alone).
const REPLAY_MAX_BYTES: u64 = 16 << 20;

/// The queue's front, as the drainer takes it.
pub(super) enum Front {
    /// Nothing is queued.
    Empty,
    /// The front batch's first attempt, still running (and its record).
    Running(Attempt, Option<RecordFile>, String),
    /// The front batch in memory, whose first attempt failed (and its record).
    Held(Held, Option<RecordFile>, String),
    /// The front batch and those right behind it, on disk only.
    Records(Vec<RecordFile>),
}

impl Spooler {
    /// Takes the queue's front (a running attempt is taken out of its entry:
    /// it is awaited once).
    pub(super) async fn front(&self) -> Front {
        let mut queue = self.queue.lock().await;
        let Some(first) = queue.front_mut() else {
            return Front::Empty;
        };
        if let Some(attempt) = first.attempt.take() {
            return Front::Running(attempt, first.file.clone(), first.offsets());
        }
        if let Some(held) = &first.held {
            return Front::Held(held.clone(), first.file.clone(), first.offsets());
        }
        let mut files = Vec::new();
        let mut bytes = 0;
        for entry in queue.iter() {
            let (Some(file), None, None) = (&entry.file, &entry.attempt, &entry.held) else {
                break;
            };
            if !files.is_empty() && bytes + file.bytes > REPLAY_MAX_BYTES {
                break;
            }
            bytes += file.bytes;
            files.push(file.clone());
        }
        Front::Records(files)
    }

    /// The batches of `files` (the queue's front ones, in order) read back
    /// and joined into one, and how many of `files` it holds: it stops
    /// before a batch that cannot join the ones before it. `Err` when the
    /// first cannot be read (the journal has set a corrupt one aside).
    pub(super) fn read_joined(
        &self,
        files: &[RecordFile],
    ) -> Result<(Held, usize), crate::spool::SpoolError> {
        let mut joined: Option<SpooledBatch> = None;
        let mut count = 0;
        for file in files {
            let record = match self.journal.read(file) {
                Ok(record) => record,
                Err(e) if joined.is_none() => return Err(e),
                // Dropped from the queue when it comes to the front.
                Err(e) => {
                    tracing::error!("{e}");
                    break;
                }
            };
            match &mut joined {
                None => joined = Some(record),
                Some(batch) => {
                    if !batch.absorb(&record) {
                        break;
                    }
                }
            }
            count += 1;
        }
        let batch = joined.expect("the first record was read");
        Ok((Held::from_record(batch), count))
    }
}

/// "offsets A..=B of partition P" for the batches of `files` together.
pub(super) fn offsets_of(files: &[RecordFile]) -> String {
    match files {
        [] => "no batch".into(),
        [one] => one.offsets(),
        [first, .., last] if first.partition == last.partition => format!(
            "offsets {}..={} of partition {} ({} batches)",
            first.first,
            last.last,
            first.partition,
            files.len()
        ),
        [first, .., last] => format!(
            "{} to {} ({} batches)",
            first.offsets(),
            last.offsets(),
            files.len()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{held, spooler};
    use super::*;
    use crate::deadline::Deadline;
    use std::time::Duration;

    #[tokio::test]
    async fn the_batches_on_disk_behind_the_front_join_it_until_one_cannot() {
        let dir = tempfile::tempdir().unwrap();
        let spooler = spooler(dir.path());
        let deadline = Deadline::after(Duration::from_secs(10));
        // Three of partition 1, one of partition 2, one more of partition 1.
        for (partition, first) in [(1, 0), (1, 10), (1, 20), (2, 0), (1, 30)] {
            spooler
                .enqueue(held(partition, first, 10), None, deadline)
                .await
                .unwrap();
        }
        let Front::Records(files) = spooler.front().await else {
            panic!("five batches on disk are replayed from their records");
        };
        assert_eq!(files.len(), 5);
        let (joined, count) = spooler.read_joined(&files).unwrap();
        assert_eq!(count, 3, "partition 2's batch cannot join partition 1's");
        let offsets: Vec<u64> = joined.batch.iter().map(|m| m.offset).collect();
        assert_eq!(offsets, (0..30).collect::<Vec<_>>());
        assert_eq!(
            offsets_of(&files[..count]),
            "offsets 0..=29 of partition 1 (3 batches)"
        );
    }

    #[tokio::test]
    async fn records_join_up_to_the_byte_bound_and_a_held_front_goes_alone() {
        let dir = tempfile::tempdir().unwrap();
        let spooler = spooler(dir.path());
        let deadline = Deadline::after(Duration::from_secs(10));
        // About 6 MiB each: two fit under the 16 MiB bound, three do not.
        for first in [0, 120_000, 240_000] {
            spooler
                .enqueue(held(1, first, 120_000), None, deadline)
                .await
                .unwrap();
        }
        let Front::Records(files) = spooler.front().await else {
            panic!("batches on disk");
        };
        assert_eq!(
            files.len(),
            2,
            "{:?}",
            files.iter().map(|f| f.bytes).collect::<Vec<_>>()
        );
        // A batch still in memory (its first attempt failed) goes alone.
        spooler.queue.lock().await.front_mut().unwrap().held = Some(held(1, 0, 120_000));
        assert!(matches!(spooler.front().await, Front::Held(..)));
    }
}
