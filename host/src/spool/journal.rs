//! The spool's folder on disk: one file a batch, named after its sequence
//! number and offsets (`<seq>-p<partition>-<first>-<last>.rec`), written to a
//! temporary file, fsync'd, renamed into place and the folder fsync'd, so
//! that a record is either whole on disk or not there. A lock file keeps a
//! second sink instance out. At open, leftovers are listed oldest first; a
//! torn newest record (a crash while it was written) and temporary files
//! are cut; a damaged record is moved to `corrupt/` and reported with its
//! offsets, never replayed.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::SpoolError;
use super::record::{RecordError, SpooledBatch};
use crate::private_dir::{self, Unfit};

/// One record on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RecordFile {
    /// Its path.
    pub path: PathBuf,
    /// Its size in bytes.
    pub bytes: u64,
    /// Where its messages come from: partition, first and last offset.
    pub partition: u32,
    /// The first message's offset.
    pub first: u64,
    /// The last message's offset.
    pub last: u64,
}

impl RecordFile {
    /// "offsets A..=B of partition P", for log lines.
    pub(crate) fn offsets(&self) -> String {
        format!(
            "offsets {}..={} of partition {}",
            self.first, self.last, self.partition
        )
    }
}

/// The spool's folder, locked for this instance.
pub(crate) struct Journal {
    dir: PathBuf,
    max_bytes: u64,
    lock: Mutex<Option<File>>,
    next_seq: AtomicU64,
    bytes: AtomicU64,
}

/// What opening the folder found.
pub(crate) struct Opened {
    /// The folder, locked.
    pub journal: Journal,
    /// Records left by an earlier process, oldest first.
    pub leftovers: Vec<RecordFile>,
}

impl Journal {
    /// Creates or opens `dir` (private, 0700), locks it, and lists what an
    /// earlier process left there.
    pub(crate) fn open(dir: &Path, max_bytes: u64) -> Result<Opened, SpoolError> {
        let folder = |source| SpoolError::Folder {
            dir: dir.to_path_buf(),
            source,
        };
        private_dir::ensure(dir).map_err(|unfit| match unfit {
            Unfit::Io(source) => folder(source),
            Unfit::NotPrivate(reason) => SpoolError::NotPrivate {
                dir: dir.to_path_buf(),
                reason,
            },
        })?;
        let mut lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(dir.join("lock"))
            .map_err(folder)?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let holder = std::fs::read_to_string(dir.join("lock")).unwrap_or_default();
                return Err(SpoolError::Locked {
                    dir: dir.to_path_buf(),
                    holder: holder.trim().to_string(),
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(folder(e)),
        }
        lock.set_len(0).map_err(folder)?;
        let _ = write!(lock, "process {}", std::process::id());
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(folder)? {
            let entry = entry.map_err(folder)?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".tmp") {
                tracing::warn!(
                    "spool {}: removing {name}, a record whose write was cut short (it was never durable)",
                    dir.display()
                );
                std::fs::remove_file(entry.path()).map_err(folder)?;
            } else if let Some(parsed) = parse_name(&name) {
                names.push((parsed.0, entry.path(), parsed.1));
            }
        }
        names.sort_by_key(|(seq, _, _)| *seq);
        let next_seq = names.last().map_or(0, |(seq, _, _)| seq + 1);
        let newest = names.len().checked_sub(1);
        let mut leftovers = Vec::new();
        let mut total = 0;
        for (i, (_, path, (partition, first, last))) in names.into_iter().enumerate() {
            let bytes = std::fs::read(&path).map_err(folder)?;
            let file = RecordFile {
                bytes: bytes.len() as u64,
                path,
                partition,
                first,
                last,
            };
            match SpooledBatch::decode(&bytes) {
                Ok(_) => {
                    total += file.bytes;
                    leftovers.push(file);
                }
                Err(RecordError::Torn { have, need }) if Some(i) == newest => {
                    tracing::warn!(
                        "spool {}: cutting the torn newest record {} ({have} of {need} bytes, a crash \
                         while it was written; those messages were never acknowledged to the runtime as durable)",
                        dir.display(),
                        file.offsets()
                    );
                    std::fs::remove_file(&file.path).map_err(folder)?;
                }
                Err(e) => set_aside(dir, &file, &e.to_string())?,
            }
        }
        Ok(Opened {
            journal: Journal {
                dir: dir.to_path_buf(),
                max_bytes,
                lock: Mutex::new(Some(lock)),
                next_seq: AtomicU64::new(next_seq),
                bytes: AtomicU64::new(total),
            },
            leftovers,
        })
    }

    /// The folder.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Bytes the records on disk take.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::SeqCst)
    }

    /// The most the records may take (`spool.max_size`).
    pub(crate) fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Whether a record of `bytes` fits under `spool.max_size` now.
    pub(crate) fn has_room(&self, bytes: u64) -> bool {
        self.bytes() + bytes <= self.max_bytes
    }

    /// Writes `encoded` (a record of `batch`'s offsets) durably: a
    /// temporary file, fsync, rename, fsync of the folder. An error means
    /// the record is not durable (and nothing of it is left behind).
    pub(crate) fn append(
        &self,
        encoded: &[u8],
        partition: u32,
        first: u64,
        last: u64,
    ) -> Result<RecordFile, SpoolError> {
        let seq = self.next_seq.fetch_add(1, Ordering::SeqCst);
        let name = format!("{seq:016}-p{partition}-{first}-{last}.rec");
        let path = self.dir.join(&name);
        let tmp = self.dir.join(format!("{name}.tmp"));
        let unwritable = |source| SpoolError::Write {
            path: path.clone(),
            source,
        };
        let written = (|| {
            let mut file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            file.write_all(encoded)?;
            file.sync_all()?;
            std::fs::rename(&tmp, &path)?;
            File::open(&self.dir)?.sync_all()
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            let _ = std::fs::remove_file(&path);
            return Err(unwritable(e));
        }
        self.bytes.fetch_add(encoded.len() as u64, Ordering::SeqCst);
        Ok(RecordFile {
            path,
            bytes: encoded.len() as u64,
            partition,
            first,
            last,
        })
    }

    /// Reads `file` back; a record that no longer decodes is moved aside
    /// (and reported) and its error returned.
    pub(crate) fn read(&self, file: &RecordFile) -> Result<SpooledBatch, SpoolError> {
        let bytes = std::fs::read(&file.path).map_err(|source| SpoolError::Folder {
            dir: file.path.clone(),
            source,
        })?;
        match SpooledBatch::decode(&bytes) {
            Ok(record) => Ok(record),
            Err(e) => {
                self.forget(file);
                set_aside(&self.dir, file, &e.to_string())?;
                Err(SpoolError::Corrupt {
                    path: file.path.clone(),
                    offsets: file.offsets(),
                    reason: e.to_string(),
                })
            }
        }
    }

    /// Deletes `file`: its messages are in Fluss (or dead-lettered).
    pub(crate) fn release(&self, file: &RecordFile) {
        if let Err(e) = std::fs::remove_file(&file.path) {
            tracing::warn!(
                "spool: could not delete {} ({}): {e}; it would be replayed at the next open",
                file.path.display(),
                file.offsets()
            );
        }
        self.forget(file);
    }

    fn forget(&self, file: &RecordFile) {
        let _ = self.bytes.try_update(Ordering::SeqCst, Ordering::SeqCst, |b| {
            Some(b.saturating_sub(file.bytes))
        });
    }

    /// Gives the folder up for another instance.
    pub(crate) fn unlock(&self) {
        if let Some(lock) = self.lock.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = lock.unlock();
        }
    }
}

/// The sequence number and (partition, first, last) a record's name holds.
fn parse_name(name: &str) -> Option<(u64, (u32, u64, u64))> {
    let stem = name.strip_suffix(".rec")?;
    let mut parts = stem.splitn(4, '-');
    let seq = parts.next()?.parse().ok()?;
    let partition = parts.next()?.strip_prefix('p')?.parse().ok()?;
    let first = parts.next()?.parse().ok()?;
    let last = parts.next()?.parse().ok()?;
    Some((seq, (partition, first, last)))
}

/// Moves a damaged record to `corrupt/` and reports it at error level.
fn set_aside(dir: &Path, file: &RecordFile, reason: &str) -> Result<(), SpoolError> {
    let aside = dir.join("corrupt");
    let folder = |source| SpoolError::Folder {
        dir: aside.clone(),
        source,
    };
    std::fs::create_dir_all(&aside).map_err(folder)?;
    let name = file.path.file_name().expect("a record has a name");
    std::fs::rename(&file.path, aside.join(name)).map_err(folder)?;
    tracing::error!(
        "spool {}: the record of {} is damaged ({reason}); it was moved to {} and is NOT replayed: \
         those messages may not be in Fluss",
        dir.display(),
        file.offsets(),
        aside.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{MessageBatch, PayloadSchema, Source};

    fn record(first: u64, count: u64) -> (Vec<u8>, u64, u64) {
        let mut batch = MessageBatch::new(Source {
            stream: "s".into(),
            topic: "t".into(),
            partition: 2,
        });
        for o in first..first + count {
            batch.push(o, o as u128, o, b"{}", []).unwrap();
        }
        let r = SpooledBatch {
            spooled_at_micros: 1,
            schema: PayloadSchema::Json,
            batch,
            rows: None,
            rows_made_for: None,
        };
        (r.encode(), first, first + count - 1)
    }

    fn append(j: &Journal, first: u64) -> RecordFile {
        let (bytes, a, b) = record(first, 10);
        j.append(&bytes, 2, a, b).unwrap()
    }

    #[test]
    fn records_survive_a_reopen_oldest_first_and_released_ones_are_gone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spool");
        let opened = Journal::open(&path, 1 << 20).unwrap();
        assert!(opened.leftovers.is_empty());
        let j = opened.journal;
        let files: Vec<_> = (0..12).map(|i| append(&j, i * 10)).collect();
        j.release(&files[1]);
        let before = j.bytes();
        j.unlock();
        drop(j);
        let again = Journal::open(&path, 1 << 20).unwrap();
        let firsts: Vec<u64> = again.leftovers.iter().map(|f| f.first).collect();
        let mut want: Vec<u64> = (0..12).map(|i| i * 10).collect();
        want.remove(1);
        assert_eq!(
            firsts, want,
            "oldest first (sequence order, not name order of offsets)"
        );
        assert_eq!(again.journal.bytes(), before);
        let back = again.journal.read(&again.leftovers[0]).unwrap();
        assert_eq!(back.batch.get(9).offset, 9);
        // New records come after the leftovers.
        let next = append(&again.journal, 500);
        assert!(next.path > again.leftovers.last().unwrap().path);
    }

    #[test]
    fn a_second_instance_on_the_folder_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let first = Journal::open(dir.path(), 1 << 20).unwrap();
        let Err(e) = Journal::open(dir.path(), 1 << 20) else {
            panic!("a second instance took a locked spool");
        };
        let text = e.to_string();
        assert!(text.contains(&dir.path().display().to_string()), "{text}");
        assert!(
            text.contains(&format!("process {}", std::process::id())),
            "{text}"
        );
        first.journal.unlock();
        Journal::open(dir.path(), 1 << 20).expect("free once unlocked");
    }

    #[test]
    fn a_torn_tail_is_cut_and_a_damaged_record_is_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(dir.path(), 1 << 20).unwrap().journal;
        let files: Vec<_> = (0..3).map(|i| append(&j, i * 10)).collect();
        j.unlock();
        // The newest cut short, the middle one with a flipped byte, and a
        // temporary file left by a crash.
        let newest = std::fs::read(&files[2].path).unwrap();
        std::fs::write(&files[2].path, &newest[..newest.len() / 2]).unwrap();
        let mut middle = std::fs::read(&files[1].path).unwrap();
        let at = middle.len() - 3;
        middle[at] ^= 0xff;
        std::fs::write(&files[1].path, middle).unwrap();
        std::fs::write(dir.path().join("0000000000000009-p2-0-0.rec.tmp"), b"FSP1").unwrap();
        let again = Journal::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(again.leftovers, vec![files[0].clone()]);
        assert!(!files[2].path.exists(), "the torn tail is cut");
        let aside = dir
            .path()
            .join("corrupt")
            .join(files[1].path.file_name().unwrap());
        assert!(
            aside.exists(),
            "the damaged record is kept aside for a person to look at"
        );
        assert_eq!(again.journal.bytes(), files[0].bytes);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(!names.iter().any(|n| n.ends_with(".tmp")), "{names:?}");
    }

    #[test]
    fn a_torn_record_that_is_not_the_newest_is_damage_not_a_tail() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(dir.path(), 1 << 20).unwrap().journal;
        let files: Vec<_> = (0..2).map(|i| append(&j, i * 10)).collect();
        j.unlock();
        let oldest = std::fs::read(&files[0].path).unwrap();
        std::fs::write(&files[0].path, &oldest[..20]).unwrap();
        let again = Journal::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(again.leftovers, vec![files[1].clone()]);
        assert!(
            dir.path()
                .join("corrupt")
                .join(files[0].path.file_name().unwrap())
                .exists()
        );
    }

    #[test]
    fn room_is_counted_against_max_size() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::open(dir.path(), 1000).unwrap().journal;
        let f = append(&j, 0);
        assert!(j.has_room(1000 - f.bytes));
        assert!(!j.has_room(1000 - f.bytes + 1));
        j.release(&f);
        assert!(j.has_room(1000));
    }

    #[test]
    fn a_folder_others_can_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let Err(e) = Journal::open(dir.path(), 1000) else {
            panic!("a world-writable spool was used");
        };
        assert!(e.to_string().contains("writable by group or others"), "{e}");
    }
}
