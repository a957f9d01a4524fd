//! Per-skill persistent key/value storage.
//!
//! Each skill class gets one journal, `<data_dir>/skills/<Class>.jsonl`: one JSON line per
//! change, `{"k": key, "v": value}` for a set and `{"k": key}` for a removal. Why a journal:
//! a set costs what its value costs (one appended line, one fsync), not a rewrite of the
//! whole store; when the journal has grown past twice the live data it is compacted
//! (rewritten with only the live entries, atomically: temporary file, fsync, rename, fsync
//! of the directory), so the file stays within about twice [`StorageLimits::max_bytes`].
//!
//! A voice assistant is switched off by pulling the plug. A crash while appending leaves
//! at most a torn last line; it is cut off at the next load and every earlier change is
//! kept. A complete line that is not a record (damage, not a crash) moves the file aside
//! (never silently discarded), keeps the records before it and logs a warning.
//!
//! A store is loaded on first use, not when the skill file is loaded, so a spoke with many
//! skills starts without reading all their data. Sizes are bounded per value and per
//! skill ([`StorageLimits`]) because remote devices and the model can call skills that
//! store what they are given.
//!
//! Stores written by earlier versions (`<Class>.json`, one JSON object) are converted to
//! a journal on first use.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use serde_json::{Map, Value};

/// A journal longer than twice its live data plus this many bytes is compacted; the slack
/// keeps a small, busy store from being rewritten on every set.
const COMPACT_SLACK: u64 = 64 * 1024;

/// How much one skill may store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StorageLimits {
    /// All of a skill's keys and values, as stored (JSON), in bytes.
    pub max_bytes: usize,
    /// One value, as JSON, in bytes.
    pub max_value_bytes: usize,
}

impl Default for StorageLimits {
    /// 1 MiB per skill and 64 KiB per value: lists, settings and state of a voice
    /// assistant are far smaller, and a full store still loads in milliseconds on a Pi.
    fn default() -> Self {
        StorageLimits {
            max_bytes: 1024 * 1024,
            max_value_bytes: 64 * 1024,
        }
    }
}

/// Why a store could not be opened, read or written.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The class name cannot name a file.
    #[error("skill class `{0}` cannot name a storage file; use letters, digits, `_` and `-` only")]
    BadClass(String),
    /// The storage directory could not be created.
    #[error(
        "cannot create the skill storage directory {path}: {source}; check data_dir and its permissions"
    )]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// The storage file exists but could not be read.
    #[error("cannot read skill storage {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// The storage file is corrupt and could not even be moved aside.
    #[error(
        "skill storage {path} is corrupt ({reason}) and could not be moved to {backup}: {source}; \
         move or delete it by hand"
    )]
    KeepAside {
        /// The corrupt file.
        path: PathBuf,
        /// Why it is corrupt.
        reason: String,
        /// Where it should have gone.
        backup: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// Writing failed; the previous contents are intact.
    #[error("cannot write skill storage {path}: {source}; the previous contents are kept")]
    Write {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// One value is larger than a value may be.
    #[error(
        "the value for key `{key}` is {bytes} bytes, over the limit of {limit} bytes per value \
         (skills.storage_max_value_bytes); store less or split it over several keys"
    )]
    ValueTooLarge {
        /// The key being set.
        key: String,
        /// The value's size as JSON.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// The skill's storage would grow past its limit.
    #[error(
        "storing key `{key}` would make this skill's storage {bytes} bytes, over the limit of \
         {limit} bytes per skill (skills.storage_max_bytes); remove keys you no longer need"
    )]
    Full {
        /// The key being set.
        key: String,
        /// The size the store would have had.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
}

/// One live entry and the length of its journal line.
#[derive(Debug)]
struct Entry {
    value: Value,
    line_bytes: usize,
}

/// A loaded store: the live entries and the open journal.
#[derive(Debug)]
struct Live {
    entries: BTreeMap<String, Entry>,
    /// Sum of the live entries' line lengths: what a compacted journal takes.
    live_bytes: u64,
    /// Length of the journal file.
    file_bytes: u64,
    journal: File,
}

#[derive(Debug, Default)]
struct State {
    live: Option<Live>,
    recovered: Option<PathBuf>,
}

/// One skill's key/value store, loaded on first use and written through to its journal.
///
/// All methods take `&self` and lock an internal mutex, so one store can serve
/// concurrent calls of the same skill.
#[derive(Debug)]
pub struct Store {
    path: PathBuf,
    legacy: PathBuf,
    dir: PathBuf,
    class: String,
    limits: StorageLimits,
    state: Mutex<State>,
}

impl Store {
    /// The store of skill `class` below `data_dir`, creating `<data_dir>/skills/` when
    /// needed. Nothing is read until the store is first used.
    pub fn open(
        data_dir: &Path,
        class: &str,
        limits: StorageLimits,
    ) -> Result<Store, StorageError> {
        let valid = !class.is_empty()
            && class
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid {
            return Err(StorageError::BadClass(class.to_string()));
        }
        let dir = data_dir.join("skills");
        fs::create_dir_all(&dir).map_err(|source| StorageError::CreateDir {
            path: dir.clone(),
            source,
        })?;
        Ok(Store {
            path: dir.join(format!("{class}.jsonl")),
            legacy: dir.join(format!("{class}.json")),
            dir,
            class: class.to_string(),
            limits,
            state: Mutex::new(State::default()),
        })
    }

    /// The journal this store lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where a corrupt file found when the store was loaded was moved, if one was.
    pub fn recovered_from(&self) -> Option<PathBuf> {
        self.lock().recovered.clone()
    }

    /// The value stored under `key`, if any.
    pub fn get(&self, key: &str) -> Result<Option<Value>, StorageError> {
        let mut state = self.lock();
        Ok(self
            .live(&mut state)?
            .entries
            .get(key)
            .map(|e| e.value.clone()))
    }

    /// All keys, sorted.
    pub fn keys(&self) -> Result<Vec<String>, StorageError> {
        let mut state = self.lock();
        Ok(self.live(&mut state)?.entries.keys().cloned().collect())
    }

    /// Stores `value` under `key` and appends it to the journal; on failure (a limit, a
    /// write error) nothing changes.
    pub fn set(&self, key: &str, value: Value) -> Result<(), StorageError> {
        let value_json = value.to_string();
        if value_json.len() > self.limits.max_value_bytes {
            return Err(StorageError::ValueTooLarge {
                key: key.to_string(),
                bytes: value_json.len(),
                limit: self.limits.max_value_bytes,
            });
        }
        let line = format!("{{\"k\":{},\"v\":{value_json}}}\n", Value::from(key));
        let mut state = self.lock();
        let live = self.live(&mut state)?;
        let replaced = live.entries.get(key).map_or(0, |e| e.line_bytes as u64);
        let after = live.live_bytes - replaced + line.len() as u64;
        if after > self.limits.max_bytes as u64 && after > live.live_bytes {
            return Err(StorageError::Full {
                key: key.to_string(),
                bytes: usize::try_from(after).unwrap_or(usize::MAX),
                limit: self.limits.max_bytes,
            });
        }
        self.append(&mut state, line.as_bytes())?;
        let live = self.live(&mut state)?;
        live.live_bytes = after;
        live.entries.insert(
            key.to_string(),
            Entry {
                value,
                line_bytes: line.len(),
            },
        );
        self.compact_if_due(&mut state)
    }

    /// Removes `key`; returns whether it was there. On a write failure nothing changes.
    pub fn remove(&self, key: &str) -> Result<bool, StorageError> {
        let mut state = self.lock();
        if !self.live(&mut state)?.entries.contains_key(key) {
            return Ok(false);
        }
        let line = format!("{{\"k\":{}}}\n", Value::from(key));
        self.append(&mut state, line.as_bytes())?;
        let live = self.live(&mut state)?;
        if let Some(old) = live.entries.remove(key) {
            live.live_bytes -= old.line_bytes as u64;
        }
        self.compact_if_due(&mut state)?;
        Ok(true)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The entries only change together with a successful append, and a failed append
        // drops them for a reload, so a panic elsewhere cannot leave them inconsistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn write_error(&self, source: io::Error) -> StorageError {
        StorageError::Write {
            path: self.path.clone(),
            source,
        }
    }

    /// The loaded store, loading it on first use.
    fn live<'s>(&self, state: &'s mut State) -> Result<&'s mut Live, StorageError> {
        let live = match state.live.take() {
            Some(live) => live,
            None => {
                let (live, recovered) = self.load()?;
                if recovered.is_some() {
                    state.recovered = recovered;
                }
                live
            }
        };
        Ok(state.live.insert(live))
    }

    /// Appends one record and makes it durable. A failure cuts the journal back to where
    /// it was, or, if even that fails, forgets the loaded state so that the next use
    /// reloads what is on disk (a torn tail is cut off then).
    fn append(&self, state: &mut State, line: &[u8]) -> Result<(), StorageError> {
        let live = self.live(state)?;
        let written = live
            .journal
            .write_all(line)
            .and_then(|()| live.journal.sync_data());
        match written {
            Ok(()) => {
                live.file_bytes += line.len() as u64;
                Ok(())
            }
            Err(source) => {
                let before = live.file_bytes;
                if live.journal.set_len(before).is_err() {
                    state.live = None;
                }
                Err(self.write_error(source))
            }
        }
    }

    fn compact_if_due(&self, state: &mut State) -> Result<(), StorageError> {
        let live = self.live(state)?;
        if live.file_bytes <= live.live_bytes.saturating_mul(2) + COMPACT_SLACK {
            return Ok(());
        }
        match self.rewrite(&live.entries) {
            Ok(journal) => {
                live.file_bytes = live.live_bytes;
                live.journal = journal;
                Ok(())
            }
            // The journal is intact, just long; the next set tries again.
            Err(e) => {
                tracing::warn!(skill = %self.class, "compacting skill storage failed: {e}");
                Ok(())
            }
        }
    }

    /// Replaces the journal with one record per live entry, atomically; returns the new
    /// journal opened for appending.
    fn rewrite(&self, entries: &BTreeMap<String, Entry>) -> Result<File, StorageError> {
        let failed = |e| self.write_error(e);
        let mut bytes = Vec::new();
        for (key, entry) in entries {
            bytes.extend_from_slice(
                format!(
                    "{{\"k\":{},\"v\":{}}}\n",
                    Value::from(key.as_str()),
                    entry.value
                )
                .as_bytes(),
            );
        }
        let mut tmp = tempfile::Builder::new()
            .prefix(&format!(".{}.jsonl.", self.class))
            .suffix(".tmp")
            .tempfile_in(&self.dir)
            .map_err(failed)?;
        tmp.write_all(&bytes).map_err(failed)?;
        tmp.as_file().sync_all().map_err(failed)?;
        tmp.persist(&self.path).map_err(|e| failed(e.error))?;
        // The rename is only durable once the directory entry is on disk.
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(failed)?;
        self.open_journal()
    }

    fn open_journal(&self) -> Result<File, StorageError> {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| self.write_error(e))
    }

    /// Reads the journal (or converts a store of an earlier version).
    fn load(&self) -> Result<(Live, Option<PathBuf>), StorageError> {
        let bytes = match fs::read(&self.path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return self.load_legacy(),
            Err(source) => {
                return Err(StorageError::Read {
                    path: self.path.clone(),
                    source,
                });
            }
        };
        if self.legacy.exists() {
            // A conversion that crashed after writing the journal: the journal is complete.
            let _ = fs::remove_file(&self.legacy);
        }
        let replay = replay(&bytes);
        let mut recovered = None;
        if let Some(reason) = &replay.corrupt {
            let backup = keep_aside(&self.path, reason)?;
            tracing::warn!(
                skill = %self.class,
                "skill storage {} was corrupt ({reason}); kept it as {} and kept the {} \
                 entries before the damage",
                self.path.display(),
                backup.display(),
                replay.entries.len()
            );
            recovered = Some(backup);
        } else if replay.good_bytes < bytes.len() {
            tracing::warn!(
                skill = %self.class,
                "skill storage {}: cut off a torn last record ({} bytes) left by a crash",
                self.path.display(),
                bytes.len() - replay.good_bytes
            );
        }
        let live_bytes = replay.entries.values().map(|e| e.line_bytes as u64).sum();
        let (journal, file_bytes) = if recovered.is_some() {
            (self.rewrite(&replay.entries)?, live_bytes)
        } else {
            let journal = self.open_journal()?;
            if replay.good_bytes < bytes.len() {
                journal
                    .set_len(replay.good_bytes as u64)
                    .and_then(|()| journal.sync_data())
                    .map_err(|e| self.write_error(e))?;
            }
            (journal, replay.good_bytes as u64)
        };
        Ok((
            Live {
                entries: replay.entries,
                live_bytes,
                file_bytes,
                journal,
            },
            recovered,
        ))
    }

    /// Converts `<Class>.json` (one JSON object) into a journal, or starts empty.
    fn load_legacy(&self) -> Result<(Live, Option<PathBuf>), StorageError> {
        let (map, recovered) = match fs::read(&self.legacy) {
            Ok(bytes) => match parse_object(&bytes) {
                Ok(map) => (map, None),
                Err(reason) => {
                    let backup = keep_aside(&self.legacy, &reason)?;
                    tracing::warn!(
                        skill = %self.class,
                        "skill storage {} was corrupt ({reason}); kept it as {} and started empty",
                        self.legacy.display(),
                        backup.display()
                    );
                    (Map::new(), Some(backup))
                }
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => (Map::new(), None),
            Err(source) => {
                return Err(StorageError::Read {
                    path: self.legacy.clone(),
                    source,
                });
            }
        };
        let converting = !map.is_empty();
        let entries: BTreeMap<String, Entry> = map
            .into_iter()
            .map(|(key, value)| {
                let line_bytes =
                    format!("{{\"k\":{},\"v\":{value}}}\n", Value::from(key.as_str())).len();
                (key, Entry { value, line_bytes })
            })
            .collect();
        let live_bytes = entries.values().map(|e| e.line_bytes as u64).sum();
        let journal = if converting {
            let journal = self.rewrite(&entries)?;
            fs::remove_file(&self.legacy).map_err(|e| self.write_error(e))?;
            journal
        } else {
            self.open_journal()?
        };
        Ok((
            Live {
                entries,
                live_bytes,
                file_bytes: live_bytes,
                journal,
            },
            recovered,
        ))
    }
}

/// What replaying a journal gave.
struct Replay {
    entries: BTreeMap<String, Entry>,
    /// Length of the prefix made of complete, valid records.
    good_bytes: usize,
    /// Why a complete line was not a record, if one was not.
    corrupt: Option<String>,
}

/// Applies the journal's records in order; stops at a torn tail or a damaged line.
fn replay(bytes: &[u8]) -> Replay {
    let mut entries = BTreeMap::new();
    let mut good_bytes = 0;
    let mut corrupt = None;
    for line in bytes.split_inclusive(|&b| b == b'\n') {
        if line.last() != Some(&b'\n') {
            // A torn last record: the crash happened while it was being appended.
            break;
        }
        match record(&line[..line.len() - 1]) {
            Ok((key, Some(value))) => {
                entries.insert(
                    key,
                    Entry {
                        value,
                        line_bytes: line.len(),
                    },
                );
            }
            Ok((key, None)) => {
                entries.remove(&key);
            }
            Err(reason) => {
                corrupt = Some(format!("record at byte {good_bytes}: {reason}"));
                break;
            }
        }
        good_bytes += line.len();
    }
    Replay {
        entries,
        good_bytes,
        corrupt,
    }
}

/// One journal line: the key, and the value for a set or `None` for a removal.
fn record(line: &[u8]) -> Result<(String, Option<Value>), String> {
    let mut map = parse_object(line)?;
    let key = match map.remove("k") {
        Some(Value::String(key)) => key,
        _ => return Err("no string `k`".into()),
    };
    Ok((key, map.remove("v")))
}

fn parse_object(bytes: &[u8]) -> Result<Map<String, Value>, String> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(format!(
            "expected a JSON object, found {}",
            match other {
                Value::Null => "null",
                Value::Bool(_) => "a boolean",
                Value::Number(_) => "a number",
                Value::String(_) => "a string",
                Value::Array(_) => "an array",
                Value::Object(_) => "an object",
            }
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// Renames a corrupt file to `<name>.corrupt-<UTC timestamp>[-n]` and returns the new path.
fn keep_aside(path: &Path, reason: &str) -> Result<PathBuf, StorageError> {
    let stamp = jiff::Timestamp::now()
        .strftime("%Y%m%dT%H%M%SZ")
        .to_string();
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut backup = path.with_file_name(format!("{name}.corrupt-{stamp}"));
    let mut n = 1;
    while backup.exists() {
        backup = path.with_file_name(format!("{name}.corrupt-{stamp}-{n}"));
        n += 1;
    }
    fs::rename(path, &backup).map_err(|source| StorageError::KeepAside {
        path: path.to_path_buf(),
        reason: reason.to_string(),
        backup: backup.clone(),
        source,
    })?;
    Ok(backup)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn store_with(dir: &Path, limits: StorageLimits) -> Store {
        match Store::open(dir, "TestSkill", limits) {
            Ok(s) => s,
            Err(e) => panic!("open: {e}"),
        }
    }

    fn store(dir: &Path) -> Store {
        store_with(dir, StorageLimits::default())
    }

    fn get(s: &Store, key: &str) -> Option<Value> {
        s.get(key).unwrap()
    }

    #[test]
    fn round_trip_and_keys() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        assert_eq!(get(&s, "a"), None);
        s.set("b", json!({"x": [1, 2.5, "three", null, true]}))
            .unwrap();
        s.set("a", json!("text")).unwrap();
        s.set("n", json!(null)).unwrap();
        assert_eq!(get(&s, "a"), Some(json!("text")));
        assert_eq!(get(&s, "n"), Some(json!(null)));
        assert_eq!(
            get(&s, "b"),
            Some(json!({"x": [1, 2.5, "three", null, true]}))
        );
        assert_eq!(s.keys().unwrap(), vec!["a", "b", "n"]);
        assert!(s.remove("a").unwrap());
        assert!(!s.remove("a").unwrap());
        assert_eq!(s.keys().unwrap(), vec!["b", "n"]);
        assert_eq!(s.path(), dir.path().join("skills/TestSkill.jsonl"));
    }

    #[test]
    fn persists_across_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = store(dir.path());
            s.set("count", json!(41)).unwrap();
            s.set("gone", json!(1)).unwrap();
            s.remove("gone").unwrap();
            s.set("count", json!(42)).unwrap();
        }
        let s = store(dir.path());
        assert_eq!(get(&s, "count"), Some(json!(42)));
        assert_eq!(get(&s, "gone"), None);
        assert!(s.recovered_from().is_none());
    }

    #[test]
    fn nothing_is_read_before_first_use() {
        let dir = tempfile::tempdir().unwrap();
        store(dir.path()).set("k", json!(1)).unwrap();
        let s = store(dir.path());
        // Replaced under a store that has not been used yet: the store sees the new file.
        fs::write(s.path(), b"{\"k\":\"k\",\"v\":2}\n").unwrap();
        assert_eq!(get(&s, "k"), Some(json!(2)));
    }

    #[test]
    fn a_torn_last_record_loses_only_itself() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = store(dir.path());
            s.set("a", json!("first")).unwrap();
            s.set("b", json!([1, 2, 3])).unwrap();
            s.set("a", json!("second")).unwrap();
        }
        let path = dir.path().join("skills/TestSkill.jsonl");
        let whole = fs::read(&path).unwrap();
        let last_start = whole[..whole.len() - 1]
            .iter()
            .rposition(|&b| b == b'\n')
            .unwrap()
            + 1;
        // Every cut inside the last record: what a crash while appending it leaves.
        for cut in last_start + 1..whole.len() {
            fs::write(&path, &whole[..cut]).unwrap();
            let s = store(dir.path());
            assert_eq!(get(&s, "a"), Some(json!("first")), "cut at {cut}");
            assert_eq!(get(&s, "b"), Some(json!([1, 2, 3])), "cut at {cut}");
            assert!(s.recovered_from().is_none());
            // The torn tail is gone, so the next record starts on a line of its own.
            s.set("c", json!(true)).unwrap();
            let again = store(dir.path());
            assert_eq!(get(&again, "c"), Some(json!(true)), "cut at {cut}");
            assert_eq!(get(&again, "a"), Some(json!("first")), "cut at {cut}");
        }
    }

    #[test]
    fn leftover_temp_file_from_a_crashed_compaction_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        store(dir.path()).set("k", json!("old")).unwrap();
        let leftover = dir.path().join("skills/.TestSkill.jsonl.AbC123.tmp");
        fs::write(&leftover, b"{\"k\":\"k\",\"v\":\"new but never ren").unwrap();
        let s = store(dir.path());
        assert_eq!(get(&s, "k"), Some(json!("old")));
        s.set("k", json!("newer")).unwrap();
        assert_eq!(get(&store(dir.path()), "k"), Some(json!("newer")));
    }

    #[test]
    fn sets_append_and_compaction_keeps_the_file_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        s.set("big", json!("x".repeat(50_000))).unwrap();
        let path = s.path().to_path_buf();
        let size = || fs::metadata(&path).unwrap().len();
        let before = size();
        s.set("small", json!(1)).unwrap();
        // An append, not a rewrite: the big value is not written again.
        assert!(size() - before < 100, "{} -> {}", before, size());
        let mut largest = 0;
        for i in 0..200 {
            s.set("big", json!(format!("{i}").repeat(10_000))).unwrap();
            largest = largest.max(size());
        }
        let live = s.lock().live.as_ref().unwrap().live_bytes;
        assert!(
            largest <= 2 * live + COMPACT_SLACK + 60_000,
            "journal reached {largest} bytes for {live} live"
        );
        assert_eq!(
            get(&store(dir.path()), "big"),
            Some(json!("199".repeat(10_000)))
        );
    }

    #[test]
    fn limits_name_the_key_and_the_setting() {
        let dir = tempfile::tempdir().unwrap();
        let s = store_with(
            dir.path(),
            StorageLimits {
                max_bytes: 1000,
                max_value_bytes: 300,
            },
        );
        let err = s.set("huge", json!("y".repeat(400))).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, StorageError::ValueTooLarge { .. }), "{text}");
        assert!(text.contains("`huge`") && text.contains("skills.storage_max_value_bytes"));
        for i in 0..3 {
            s.set(&format!("k{i}"), json!("z".repeat(250))).unwrap();
        }
        let err = s.set("k3", json!("z".repeat(250))).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, StorageError::Full { .. }), "{text}");
        assert!(
            text.contains("`k3`") && text.contains("skills.storage_max_bytes"),
            "{text}"
        );
        assert_eq!(get(&s, "k3"), None);
        // Replacing a value by one no larger still works at the limit.
        s.set("k0", json!("short")).unwrap();
        s.set("k3", json!("z".repeat(200))).unwrap();
    }

    #[test]
    fn concurrent_writers_lose_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let s = std::sync::Arc::new(store(dir.path()));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let s = s.clone();
                std::thread::spawn(move || {
                    for i in 0..10 {
                        s.set(&format!("t{t}-{i}"), json!(i)).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(store(dir.path()).keys().unwrap().len(), 40);
    }

    #[test]
    fn a_damaged_record_is_kept_aside_with_what_came_before() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("skills")).unwrap();
        let path = dir.path().join("skills/TestSkill.jsonl");
        let text = "{\"k\":\"a\",\"v\":1}\n{\"k\":\"b\",,}\n{\"k\":\"c\",\"v\":3}\n";
        fs::write(&path, text).unwrap();
        let s = store(dir.path());
        assert_eq!(s.keys().unwrap(), vec!["a"]);
        let backup = s.recovered_from().expect("damage is reported");
        let name = backup.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("TestSkill.jsonl.corrupt-"), "{name}");
        assert_eq!(fs::read_to_string(&backup).unwrap(), text);
        s.set("d", json!(4)).unwrap();
        assert_eq!(store(dir.path()).keys().unwrap(), vec!["a", "d"]);
    }

    #[test]
    fn a_store_of_an_earlier_version_is_converted() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("skills")).unwrap();
        let legacy = dir.path().join("skills/TestSkill.json");
        fs::write(&legacy, b"{\"list:shopping\": [\"milk\"], \"n\": 2}").unwrap();
        let s = store(dir.path());
        assert_eq!(get(&s, "list:shopping"), Some(json!(["milk"])));
        assert!(!legacy.exists());
        assert_eq!(get(&store(dir.path()), "n"), Some(json!(2)));
    }

    #[test]
    fn a_corrupt_store_of_an_earlier_version_is_kept_aside() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("skills")).unwrap();
        for bad in [&b"{\"a\": 1,,}"[..], b"[1, 2]"] {
            let legacy = dir.path().join("skills/TestSkill.json");
            fs::write(&legacy, bad).unwrap();
            let _ = fs::remove_file(dir.path().join("skills/TestSkill.jsonl"));
            let s = store(dir.path());
            assert_eq!(s.keys().unwrap(), Vec::<String>::new());
            let backup = s.recovered_from().expect("corruption is reported");
            assert_eq!(fs::read(&backup).unwrap(), bad);
            assert!(!legacy.exists());
        }
        assert_eq!(
            parse_object(b"[1]").unwrap_err(),
            "expected a JSON object, found an array"
        );
    }

    #[test]
    fn bad_class_names_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        for bad in ["", "../Evil", "a/b", "x.json"] {
            let err = Store::open(dir.path(), bad, StorageLimits::default()).unwrap_err();
            assert!(matches!(err, StorageError::BadClass(_)), "{bad}: {err}");
        }
    }
}
