//! Things that must happen at a time: timers, alarms, reminders.
//!
//! Skills put entries here with the host function `schedule(...)`; when one comes due,
//! the daemon rings it (see `daemon::voice`). Why a file shared by every skill rather
//! than each skill's own storage: an entry must be seen by the daemon even when it was
//! made by another process (`strawberry-spoke skills call TimerSkill.start ...` in a
//! shell while the daemon runs), so the file is the one source of truth. Every change
//! is a read-modify-write of `<data_dir>/schedule.json` under an exclusive `flock`,
//! written atomically (temporary file, fsync, rename), so a crash or a pulled plug
//! leaves the old or the new schedule, never half of one.
//!
//! Why one waiting task and no per-timer threads: the [`Scheduler`] sleeps until the
//! earliest entry, so fifty timers cost what one costs. It also wakes at least every
//! [`RECHECK`] to see changes made by other processes and steps of the wall clock (a
//! board without a real-time clock learns the time from the network after it boots);
//! an in-process change wakes it at once.
//!
//! An entry that came due while the daemon was not running is not lost: at start it is
//! handed over as [`Lateness::Missed`] ("your pasta timer went off at 18:05"), or as
//! [`Lateness::Stale`] when it is older than the configured limit (reported, not rung).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

/// How often the waiting task looks at the file even when nothing is due.
pub const RECHECK: Duration = Duration::from_secs(1);

/// An entry more than this late when the running daemon takes it counts as missed
/// (the machine was suspended, or the clock jumped), not as on time.
const LATE: Duration = Duration::from_secs(5);

/// One scheduled entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// The skill class that made it; only that skill lists or cancels it.
    pub skill: String,
    /// The skill's name for it, unique within the skill (`timer:pasta`).
    pub id: String,
    /// When it is due, Unix milliseconds.
    pub due_ms: i64,
    /// What is said when it comes due ("Your pasta timer is done").
    pub text: String,
    /// What is said when it came due while the daemon was down; `{time}` becomes the
    /// local time it was due ("Your pasta timer went off at {time}"). Empty: `text`.
    #[serde(default)]
    pub missed: String,
    /// The skill's own data about it (kind, name, duration), returned by `scheduled()`.
    #[serde(default)]
    pub data: serde_json::Value,
}

/// Bounds on what skills may schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduleLimits {
    /// Entries one skill may have at once.
    pub max_entries_per_skill: usize,
    /// One entry, as JSON, in bytes.
    pub max_entry_bytes: usize,
}

impl Default for ScheduleLimits {
    /// 100 entries per skill (no kitchen runs more timers than that), 4 KiB each (a
    /// reminder's text and a little data).
    fn default() -> Self {
        ScheduleLimits {
            max_entries_per_skill: 100,
            max_entry_bytes: 4096,
        }
    }
}

/// Why the schedule could not be read or changed.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// The file or its lock could not be read, written or created.
    #[error("cannot {action} {path}: {source}; check device.data_dir and its permissions")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// The file is not a schedule.
    #[error("{path} is not a schedule ({reason}); it was moved to {backup} and a new one started")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
        /// Where it went.
        backup: PathBuf,
    },
    /// A skill has as many entries as it may.
    #[error(
        "{skill} already has {limit} scheduled entries, the most a skill may have; cancel some first"
    )]
    TooMany {
        /// The skill.
        skill: String,
        /// The limit.
        limit: usize,
    },
    /// One entry is too large.
    #[error("the entry `{id}` is {bytes} bytes, over the limit of {limit}; shorten its text")]
    TooLarge {
        /// The entry's id.
        id: String,
        /// Its size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// An id that cannot be told apart or read.
    #[error("a schedule id must be 1 to 100 characters without control characters, got {0:?}")]
    BadId(String),
}

/// The schedule file. Holds no state: every operation reads the file under its lock.
#[derive(Debug, Clone)]
pub struct ScheduleFile {
    path: PathBuf,
    lock: PathBuf,
    limits: ScheduleLimits,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Contents {
    entries: Vec<Entry>,
}

/// The file's identity, to notice a change made by another process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
}

impl ScheduleFile {
    /// The schedule below `data_dir` (created on the first change).
    pub fn new(data_dir: &Path, limits: ScheduleLimits) -> ScheduleFile {
        ScheduleFile {
            path: data_dir.join("schedule.json"),
            lock: data_dir.join("schedule.lock"),
            limits,
        }
    }

    /// Where it is kept.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io(&self, action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> ScheduleError {
        let path = path.to_path_buf();
        move |source| ScheduleError::Io {
            action,
            path,
            source,
        }
    }

    /// Runs `change` on the entries under the lock; writes them back when it says so.
    fn locked<R>(
        &self,
        change: impl FnOnce(&mut Vec<Entry>) -> Result<(R, bool), ScheduleError>,
    ) -> Result<R, ScheduleError> {
        if let Some(dir) = self.path.parent() {
            fs::create_dir_all(dir).map_err(self.io("create the directory of", &self.path))?;
        }
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.lock)
            .map_err(self.io("open", &self.lock))?;
        // SAFETY: flock only takes a valid descriptor, which `lock` owns until it drops
        // (closing it releases the lock).
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(ScheduleError::Io {
                action: "lock",
                path: self.lock.clone(),
                source: io::Error::last_os_error(),
            });
        }
        let mut entries = self.read()?;
        let (result, changed) = change(&mut entries)?;
        if changed {
            self.write(&entries)?;
        }
        Ok(result)
    }

    fn read(&self) -> Result<Vec<Entry>, ScheduleError> {
        let bytes = match fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(self.io("read", &self.path)(e)),
        };
        match serde_json::from_slice::<Contents>(&bytes) {
            Ok(contents) => Ok(contents.entries),
            Err(e) => {
                let backup = self.path.with_extension("json.corrupt");
                fs::rename(&self.path, &backup).map_err(self.io("move aside", &self.path))?;
                let error = ScheduleError::Corrupt {
                    path: self.path.clone(),
                    reason: e.to_string(),
                    backup,
                };
                tracing::error!("{error}");
                Ok(Vec::new())
            }
        }
    }

    fn write(&self, entries: &[Entry]) -> Result<(), ScheduleError> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let mut tmp = tempfile::NamedTempFile::new_in(dir)
            .map_err(self.io("create a temporary file in", dir))?;
        let contents = Contents {
            entries: entries.to_vec(),
        };
        let json = serde_json::to_vec_pretty(&contents)
            .map_err(|e| self.io("encode", &self.path)(io::Error::other(e)))?;
        tmp.write_all(&json).map_err(self.io("write", tmp.path()))?;
        tmp.as_file()
            .sync_all()
            .map_err(self.io("sync", &self.path))?;
        tmp.persist(&self.path)
            .map_err(|e| self.io("replace", &self.path)(e.error))?;
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }

    /// Adds `entry`, replacing one of the same skill and id.
    pub fn put(&self, entry: Entry) -> Result<(), ScheduleError> {
        if entry.id.is_empty()
            || entry.id.chars().count() > 100
            || entry.id.chars().any(char::is_control)
        {
            return Err(ScheduleError::BadId(entry.id));
        }
        let bytes = serde_json::to_vec(&entry).map_or(usize::MAX, |b| b.len());
        if bytes > self.limits.max_entry_bytes {
            return Err(ScheduleError::TooLarge {
                id: entry.id,
                bytes,
                limit: self.limits.max_entry_bytes,
            });
        }
        let limit = self.limits.max_entries_per_skill;
        self.locked(|entries| {
            entries.retain(|e| !(e.skill == entry.skill && e.id == entry.id));
            if entries.iter().filter(|e| e.skill == entry.skill).count() >= limit {
                return Err(ScheduleError::TooMany {
                    skill: entry.skill.clone(),
                    limit,
                });
            }
            entries.push(entry);
            entries.sort_by_key(|e| e.due_ms);
            Ok(((), true))
        })
    }

    /// Removes the entry `id` of `skill`; whether it was there.
    pub fn remove(&self, skill: &str, id: &str) -> Result<bool, ScheduleError> {
        self.locked(|entries| {
            let before = entries.len();
            entries.retain(|e| !(e.skill == skill && e.id == id));
            let removed = entries.len() != before;
            Ok((removed, removed))
        })
    }

    /// The entries of `skill`, soonest first.
    pub fn list(&self, skill: &str) -> Result<Vec<Entry>, ScheduleError> {
        self.locked(|entries| {
            Ok((
                entries
                    .iter()
                    .filter(|e| e.skill == skill)
                    .cloned()
                    .collect(),
                false,
            ))
        })
    }

    /// Removes and returns the entries due at `now_ms`, and the next due time after.
    fn take_due(&self, now_ms: i64) -> Result<(Vec<Entry>, Option<i64>), ScheduleError> {
        self.locked(|entries| {
            let (due, rest): (Vec<Entry>, Vec<Entry>) =
                entries.drain(..).partition(|e| e.due_ms <= now_ms);
            *entries = rest;
            let next = entries.iter().map(|e| e.due_ms).min();
            let changed = !due.is_empty();
            Ok(((due, next), changed))
        })
    }

    fn stamp(&self) -> Option<Stamp> {
        let meta = fs::metadata(&self.path).ok()?;
        Some(Stamp {
            modified: meta.modified().ok(),
            len: meta.len(),
        })
    }
}

/// How late an entry is handed over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lateness {
    /// At its time.
    OnTime,
    /// It came due while the daemon was not running (or the machine slept): ring it,
    /// saying when it was due.
    Missed,
    /// It came due longer ago than the configured limit: say so once, do not ring.
    Stale,
}

/// An entry that came due.
#[derive(Debug, Clone, PartialEq)]
pub struct Due {
    /// The entry, already removed from the schedule.
    pub entry: Entry,
    /// How late.
    pub lateness: Lateness,
}

impl Due {
    /// What to say: the entry's text, or for a late one its `missed` text with the time
    /// it was due (local time, `HH:MM`).
    pub fn line(&self) -> String {
        let entry = &self.entry;
        if self.lateness == Lateness::OnTime {
            return entry.text.clone();
        }
        let time = jiff::Timestamp::from_millisecond(entry.due_ms)
            .map(|t| {
                t.to_zoned(jiff::tz::TimeZone::system())
                    .strftime("%H:%M")
                    .to_string()
            })
            .unwrap_or_default();
        if entry.missed.is_empty() {
            format!("{} It was due at {time}.", entry.text)
        } else {
            entry.missed.replace("{time}", &time)
        }
    }
}

/// Hands entries over as they come due; see the module docs.
pub struct Scheduler {
    file: ScheduleFile,
    /// Older than this at start: [`Lateness::Stale`].
    missed_limit: Duration,
    changed: Arc<Notify>,
}

impl Scheduler {
    /// A scheduler over `file`; `changed` is notified by in-process changes.
    pub fn new(file: ScheduleFile, missed_limit: Duration, changed: Arc<Notify>) -> Scheduler {
        Scheduler {
            file,
            missed_limit,
            changed,
        }
    }

    /// Runs until `stop` is cancelled, sending each due entry to `out` (the voice loop's
    /// queue, as [`super::spoken::Spoken::Due`]), waiting for room: nothing is dropped.
    /// Entries already due at the start are late.
    pub async fn run<T: From<Due>>(self, out: mpsc::Sender<T>, stop: CancellationToken) {
        let mut starting = true;
        // The file as last read and the next due time in it; `None`: read it again.
        let mut known: Option<(Option<Stamp>, Option<i64>)> = None;
        loop {
            let now = jiff::Timestamp::now().as_millisecond();
            let stale = known.is_none_or(|(stamp, next)| {
                stamp != self.file.stamp() || next.is_some_and(|n| n <= now)
            });
            if stale {
                let file = self.file.clone();
                let taken = tokio::task::spawn_blocking(move || {
                    let taken = file.take_due(now);
                    (taken, file.stamp())
                })
                .await;
                match taken {
                    Ok((Ok((entries, next)), stamp)) => {
                        known = Some((stamp, next));
                        for entry in entries {
                            let lateness = self.lateness(now - entry.due_ms, starting);
                            tracing::info!(skill = %entry.skill, id = %entry.id, late_ms = now - entry.due_ms, ?lateness, "scheduled entry due");
                            if out.send(Due { entry, lateness }.into()).await.is_err() {
                                return;
                            }
                        }
                    }
                    Ok((Err(error), _)) => tracing::error!("schedule not read: {error}"),
                    Err(error) => tracing::error!("schedule not read: {error}"),
                }
                starting = false;
            }
            let next = known.and_then(|(_, next)| next);
            let wait = next.map_or(RECHECK, |n| {
                let now = jiff::Timestamp::now().as_millisecond();
                RECHECK.min(Duration::from_millis(u64::try_from(n - now).unwrap_or(0)))
            });
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = self.changed.notified() => known = None,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    fn lateness(&self, late_ms: i64, starting: bool) -> Lateness {
        let late = Duration::from_millis(u64::try_from(late_ms).unwrap_or(0));
        if late > self.missed_limit {
            Lateness::Stale
        } else if starting || late > LATE {
            Lateness::Missed
        } else {
            Lateness::OnTime
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(skill: &str, id: &str, due_ms: i64) -> Entry {
        Entry {
            skill: skill.into(),
            id: id.into(),
            due_ms,
            text: format!("{id} is due"),
            missed: String::new(),
            data: serde_json::Value::Null,
        }
    }

    #[test]
    fn entries_belong_to_their_skill_and_replace_by_id() {
        let dir = tempfile::tempdir().unwrap();
        let file = ScheduleFile::new(dir.path(), ScheduleLimits::default());
        file.put(entry("A", "x", 20)).unwrap();
        file.put(entry("A", "y", 10)).unwrap();
        file.put(entry("B", "x", 5)).unwrap();
        file.put(entry("A", "x", 30)).unwrap();
        let a: Vec<_> = file
            .list("A")
            .unwrap()
            .into_iter()
            .map(|e| (e.id, e.due_ms))
            .collect();
        assert_eq!(a, [("y".to_string(), 10), ("x".to_string(), 30)]);
        assert!(!file.remove("A", "z").unwrap());
        assert!(file.remove("B", "x").unwrap());
        assert!(file.list("B").unwrap().is_empty());
        // Another handle (another process) sees the same file.
        let again = ScheduleFile::new(dir.path(), ScheduleLimits::default());
        assert_eq!(again.list("A").unwrap().len(), 2);
    }

    #[test]
    fn limits_are_enforced_with_their_reason() {
        let dir = tempfile::tempdir().unwrap();
        let limits = ScheduleLimits {
            max_entries_per_skill: 2,
            max_entry_bytes: 300,
        };
        let file = ScheduleFile::new(dir.path(), limits);
        file.put(entry("A", "1", 1)).unwrap();
        file.put(entry("A", "2", 1)).unwrap();
        let error = file.put(entry("A", "3", 1)).unwrap_err();
        assert!(
            matches!(error, ScheduleError::TooMany { limit: 2, .. }),
            "{error}"
        );
        file.put(entry("A", "2", 2)).unwrap();
        file.put(entry("B", "1", 1)).unwrap();
        let mut big = entry("B", "2", 1);
        big.text = "x".repeat(400);
        assert!(matches!(
            file.put(big).unwrap_err(),
            ScheduleError::TooLarge { .. }
        ));
        assert!(matches!(
            file.put(entry("B", "", 1)).unwrap_err(),
            ScheduleError::BadId(_)
        ));
    }

    #[test]
    fn a_damaged_file_is_moved_aside_not_lost() {
        let dir = tempfile::tempdir().unwrap();
        let file = ScheduleFile::new(dir.path(), ScheduleLimits::default());
        fs::write(file.path(), b"{\"entries\": [tor").unwrap();
        assert!(file.list("A").unwrap().is_empty());
        assert!(dir.path().join("schedule.json.corrupt").exists());
        file.put(entry("A", "x", 1)).unwrap();
        assert_eq!(file.list("A").unwrap().len(), 1);
    }

    async fn collect(rx: &mut mpsc::Receiver<Due>, n: usize) -> Vec<(Due, i64)> {
        let mut got = Vec::new();
        while got.len() < n {
            let due = tokio::time::timeout(Duration::from_secs(10), rx.recv())
                .await
                .expect("an entry came due in time")
                .expect("the scheduler runs");
            got.push((due, jiff::Timestamp::now().as_millisecond()));
        }
        got
    }

    // How late they come is a figure, not a test bound (a busy disk delays the fsyncs):
    // `cargo bench --bench soak -- timers` measures it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn fifty_timers_set_while_it_runs_come_due_in_order_never_early() {
        let dir = tempfile::tempdir().unwrap();
        let file = ScheduleFile::new(dir.path(), ScheduleLimits::default());
        let changed = Arc::new(Notify::new());
        let (tx, mut rx) = mpsc::channel(64);
        let stop = CancellationToken::new();
        let scheduler = Scheduler::new(file.clone(), Duration::from_secs(3600), changed.clone());
        let task = tokio::spawn(scheduler.run(tx, stop.clone()));
        let start = jiff::Timestamp::now().as_millisecond();
        for i in 0..50 {
            file.put(entry("T", &format!("t{i:02}"), start + 300 + i * 37))
                .unwrap();
            changed.notify_one();
        }
        let got = collect(&mut rx, 50).await;
        for (i, (due, at)) in got.iter().enumerate() {
            assert_eq!(due.entry.id, format!("t{i:02}"));
            assert_eq!(due.lateness, Lateness::OnTime);
            assert!(
                *at >= due.entry.due_ms,
                "{} came {} ms early",
                due.entry.id,
                due.entry.due_ms - at
            );
        }
        assert!(
            file.list("T").unwrap().is_empty(),
            "rung entries leave the schedule"
        );
        stop.cancel();
        task.await.unwrap();
    }

    #[tokio::test]
    async fn entries_due_while_stopped_are_missed_or_stale() {
        let dir = tempfile::tempdir().unwrap();
        let file = ScheduleFile::new(dir.path(), ScheduleLimits::default());
        let now = jiff::Timestamp::now().as_millisecond();
        let mut recent = entry("T", "recent", now - 60_000);
        recent.missed = "went off at {time}".into();
        file.put(recent).unwrap();
        file.put(entry("T", "old", now - 7_200_000)).unwrap();
        let (tx, mut rx) = mpsc::channel(8);
        let stop = CancellationToken::new();
        let scheduler = Scheduler::new(
            file.clone(),
            Duration::from_secs(3600),
            Arc::new(Notify::new()),
        );
        let task = tokio::spawn(scheduler.run(tx, stop.clone()));
        let got = collect(&mut rx, 2).await;
        let by_id = |id: &str| {
            got.iter()
                .find(|(d, _)| d.entry.id == id)
                .unwrap()
                .0
                .clone()
        };
        assert_eq!(by_id("old").lateness, Lateness::Stale);
        let recent = by_id("recent");
        assert_eq!(recent.lateness, Lateness::Missed);
        assert!(
            recent.line().starts_with("went off at ") && recent.line().contains(':'),
            "{}",
            recent.line()
        );
        stop.cancel();
        task.await.unwrap();
    }
}
