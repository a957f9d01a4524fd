//! Per-skill persistent key/value storage.
//!
//! Each skill class gets one JSON object file, `<data_dir>/skills/<Class>.json`. A voice
//! assistant is switched off by pulling the plug, so every write replaces the file
//! atomically (temporary file in the same directory, fsync, rename, fsync of the
//! directory): after a crash the file holds either the old or the new contents, never
//! half of one. A file that is not valid JSON is moved aside (never silently discarded)
//! and the skill starts from an empty store.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use serde_json::{Map, Value};

/// Why a store could not be opened or written.
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
    /// Writing the new contents failed; the old contents are intact.
    #[error("cannot write skill storage {path}: {source}; the previous contents are kept")]
    Write {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
}

/// One skill's key/value store: a JSON object kept in memory and written through to disk.
///
/// All methods take `&self` and lock an internal mutex, so one store can serve
/// concurrent calls of the same skill.
#[derive(Debug)]
pub struct Store {
    path: PathBuf,
    dir: PathBuf,
    class: String,
    data: Mutex<Map<String, Value>>,
    recovered: Option<PathBuf>,
}

impl Store {
    /// Opens (or starts) the store of skill `class` below `data_dir`, creating
    /// `<data_dir>/skills/` when needed.
    ///
    /// A corrupt file is renamed to `<Class>.json.corrupt-<timestamp>`, a warning is
    /// logged, and the store starts empty; [`Store::recovered_from`] names the backup.
    pub fn open(data_dir: &Path, class: &str) -> Result<Store, StorageError> {
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
        let path = dir.join(format!("{class}.json"));
        let (data, recovered) = match fs::read(&path) {
            Ok(bytes) => match parse_object(&bytes) {
                Ok(map) => (map, None),
                Err(reason) => {
                    let backup = keep_aside(&path, &reason)?;
                    tracing::warn!(
                        skill = class,
                        "skill storage {} was corrupt ({reason}); kept it as {} and started empty",
                        path.display(),
                        backup.display()
                    );
                    (Map::new(), Some(backup))
                }
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => (Map::new(), None),
            Err(source) => return Err(StorageError::Read { path, source }),
        };
        Ok(Store {
            path,
            dir,
            class: class.to_string(),
            data: Mutex::new(data),
            recovered,
        })
    }

    /// The file this store lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where a corrupt file found at [`Store::open`] was moved, if one was.
    pub fn recovered_from(&self) -> Option<&Path> {
        self.recovered.as_deref()
    }

    /// The value stored under `key`, if any.
    pub fn get(&self, key: &str) -> Option<Value> {
        self.lock().get(key).cloned()
    }

    /// Stores `value` under `key` and writes the file; on failure nothing changes.
    pub fn set(&self, key: &str, value: Value) -> Result<(), StorageError> {
        let mut data = self.lock();
        let old = data.insert(key.to_string(), value);
        if let Err(e) = self.write(&data) {
            match old {
                Some(old) => data.insert(key.to_string(), old),
                None => data.remove(key),
            };
            return Err(e);
        }
        Ok(())
    }

    /// Removes `key`; returns whether it was there. On a write failure nothing changes.
    pub fn remove(&self, key: &str) -> Result<bool, StorageError> {
        let mut data = self.lock();
        let Some(old) = data.remove(key) else {
            return Ok(false);
        };
        if let Err(e) = self.write(&data) {
            data.insert(key.to_string(), old);
            return Err(e);
        }
        Ok(true)
    }

    /// All keys, sorted.
    pub fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.lock().keys().cloned().collect();
        keys.sort();
        keys
    }

    fn lock(&self) -> MutexGuard<'_, Map<String, Value>> {
        // The map is only changed together with a successful write (or restored), so
        // a panic elsewhere while holding the lock cannot leave it inconsistent.
        self.data.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self, data: &Map<String, Value>) -> Result<(), StorageError> {
        let failed = |source| StorageError::Write {
            path: self.path.clone(),
            source,
        };
        let bytes = serde_json::to_vec_pretty(data)
            .map_err(io::Error::other)
            .map_err(failed)?;
        let mut tmp = tempfile::Builder::new()
            .prefix(&format!(".{}.json.", self.class))
            .suffix(".tmp")
            .tempfile_in(&self.dir)
            .map_err(failed)?;
        tmp.write_all(&bytes).map_err(failed)?;
        tmp.as_file().sync_all().map_err(failed)?;
        tmp.persist(&self.path).map_err(|e| failed(e.error))?;
        // The rename is only durable once the directory entry is on disk.
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(failed)
    }
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

    fn store(dir: &Path) -> Store {
        match Store::open(dir, "TestSkill") {
            Ok(s) => s,
            Err(e) => panic!("open: {e}"),
        }
    }

    #[test]
    fn round_trip_and_keys() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(dir.path());
        assert_eq!(s.get("a"), None);
        s.set("b", json!({"x": [1, 2.5, "three", null, true]}))
            .unwrap();
        s.set("a", json!("text")).unwrap();
        assert_eq!(s.get("a"), Some(json!("text")));
        assert_eq!(
            s.get("b"),
            Some(json!({"x": [1, 2.5, "three", null, true]}))
        );
        assert_eq!(s.keys(), vec!["a".to_string(), "b".to_string()]);
        assert!(s.remove("a").unwrap());
        assert!(!s.remove("a").unwrap());
        assert_eq!(s.keys(), vec!["b".to_string()]);
        assert_eq!(s.path(), dir.path().join("skills/TestSkill.json"));
    }

    #[test]
    fn persists_across_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let s = store(dir.path());
            s.set("count", json!(41)).unwrap();
            s.set("gone", json!(1)).unwrap();
            s.remove("gone").unwrap();
        }
        let s = store(dir.path());
        assert_eq!(s.get("count"), Some(json!(41)));
        assert_eq!(s.get("gone"), None);
        assert!(s.recovered_from().is_none());
    }

    #[test]
    fn leftover_temp_file_from_a_crash_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        store(dir.path()).set("k", json!("old")).unwrap();
        // What a crash between "write temp file" and "rename" leaves behind.
        let leftover = dir.path().join("skills/.TestSkill.json.AbC123.tmp");
        fs::write(&leftover, b"{\"k\": \"new but never ren").unwrap();
        let s = store(dir.path());
        assert_eq!(s.get("k"), Some(json!("old")));
        s.set("k", json!("newer")).unwrap();
        assert_eq!(store(dir.path()).get("k"), Some(json!("newer")));
    }

    #[test]
    fn readers_never_see_a_half_written_file() {
        let dir = tempfile::tempdir().unwrap();
        let s = std::sync::Arc::new(store(dir.path()));
        s.set("big", json!("x".repeat(200_000))).unwrap();
        let path = s.path().to_path_buf();
        let writer = {
            let s = s.clone();
            std::thread::spawn(move || {
                for i in 0..40 {
                    let c = if i % 2 == 0 { "y" } else { "z" };
                    s.set("big", json!(c.repeat(200_000 + i))).unwrap();
                }
            })
        };
        let mut reads = 0;
        while !writer.is_finished() {
            let bytes = fs::read(&path).unwrap();
            let map = parse_object(&bytes).unwrap_or_else(|e| panic!("torn read: {e}"));
            assert!(map["big"].as_str().unwrap().len() >= 200_000);
            reads += 1;
        }
        writer.join().unwrap();
        assert!(reads > 0);
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
        assert_eq!(store(dir.path()).keys().len(), 40);
    }

    #[test]
    fn corrupt_file_is_kept_aside_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("skills")).unwrap();
        let path = dir.path().join("skills/TestSkill.json");
        fs::write(&path, b"{\"a\": 1,,}").unwrap();
        let s = store(dir.path());
        let backup = s
            .recovered_from()
            .expect("corruption is reported")
            .to_path_buf();
        let name = backup.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("TestSkill.json.corrupt-"), "{name}");
        assert_eq!(fs::read(&backup).unwrap(), b"{\"a\": 1,,}");
        assert!(!path.exists());
        assert_eq!(s.keys(), Vec::<String>::new());
        s.set("a", json!(2)).unwrap();
        assert_eq!(store(dir.path()).get("a"), Some(json!(2)));
    }

    #[test]
    fn non_object_json_is_corrupt_too() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("skills")).unwrap();
        fs::write(dir.path().join("skills/TestSkill.json"), b"[1, 2]").unwrap();
        assert!(store(dir.path()).recovered_from().is_some());
        assert_eq!(
            parse_object(b"[1]").unwrap_err(),
            "expected a JSON object, found an array"
        );
    }

    #[test]
    fn bad_class_names_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        for bad in ["", "../Evil", "a/b", "x.json"] {
            let err = Store::open(dir.path(), bad).unwrap_err();
            assert!(matches!(err, StorageError::BadClass(_)), "{bad}: {err}");
        }
    }
}
