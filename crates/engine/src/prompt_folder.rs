//! The prompt store's folder on disk: the saved prompt prefixes (`prefix-<id>.kv`) and the
//! index (`index.json`) that lets the next run with the same model and settings take them
//! up again, so that a restarted server answers a known system prompt or conversation
//! without evaluating it again.
//!
//! A folder is named after what the saved KV bytes depend on ([`StoreKey`]: this build, the
//! model files, the session's settings), under the store's parent folder. One run at a
//! time holds a folder (an exclusive lock the kernel drops however the run ends); a run
//! that finds its folder held gets a folder of its own, removed when it ends. Folders of
//! other models or settings count against the same capacity: at start the least recently
//! used that no run holds go first, until they hold at most half of it.
//!
//! Which prefixes to keep is `epm_core::prompt_store`'s; the files, the lock and the index
//! are here. A file is listed in the index only after llama.cpp wrote it whole (and it was
//! synced), and an entry is taken up again only where its file has the recorded size, so
//! a run that died mid-save leaves a file that the next run deletes.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use epm_core::prompt_store::{PromptStore, StoreIndex};
use epm_sys::fs::{try_lock_exclusive, write_atomic, ExclusiveLock};

use crate::integrity::{fnv1a, ModelIdentity};
use crate::SessionOptions;

const INDEX: &str = "index.json";
const LOCK: &str = "lock";
/// Folders named after a key, which outlive their run.
const KEYED_PREFIX: &str = "kv-";
/// Folders of one run's own, removed when it ends (or by a later run, if it died).
const PRIVATE_PREFIX: &str = "run-";

/// What a prefix's KV bytes depend on besides its tokens, one fact per line. Outputs do not
/// depend on the budget or the pager's settings (they are bit-identical at every budget),
/// so neither is here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreKey {
    description: String,
}

impl StoreKey {
    /// The key of a session with `session`'s settings on the model `model`, computed by this
    /// very executable (another build of llama.cpp may compute other bytes).
    pub fn new(model: &ModelIdentity, session: &SessionOptions) -> io::Result<StoreKey> {
        let exe = std::fs::metadata(std::env::current_exe()?)?;
        let modified = exe
            .modified()?
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Ok(StoreKey::from_facts(
            &format!("{}:{modified}", exe.len()),
            &model.fingerprint(),
            session,
        ))
    }

    fn from_facts(build: &str, model: &str, session: &SessionOptions) -> StoreKey {
        StoreKey {
            description: format!(
                "epm prompt store 1\nbuild {build}\nmodel {model}\nsession {session:?}\n"
            ),
        }
    }

    /// A key of its own for a test that has no model.
    #[cfg(test)]
    pub(crate) fn for_tests(name: &str) -> StoreKey {
        StoreKey {
            description: format!("test {name}\n"),
        }
    }

    fn folder_name(&self) -> String {
        format!("{KEYED_PREFIX}{:016x}", fnv1a(self.description.as_bytes()))
    }
}

/// The index file: the store's entries and the key they were saved under (compared in full,
/// so two keys that share a folder name never share entries).
#[derive(Debug, Serialize, Deserialize)]
struct IndexFile {
    made_for: String,
    #[serde(flatten)]
    store: StoreIndex,
}

/// What a run found of the store its predecessors left.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Restored {
    /// Entries taken up again, and their files' bytes.
    pub entries: u64,
    pub bytes: u64,
    /// Entries and files found but dropped: cut short, unlisted, over the capacity.
    pub dropped_files: u64,
    /// Folders of other models or settings removed to keep within the capacity.
    pub removed_folders: u64,
}

/// The folder a run's prompt store keeps its files in.
///
/// Invariants (checked in tests):
/// 1. `lock` is held for as long as the value lives: no other run writes `dir`;
/// 2. when `persistent`, `dir/index.json` lists exactly the entries whose files are kept,
///    once [`save_index`](Self::save_index) has run after the store's last change;
/// 3. when not `persistent`, `dir` is removed on drop, and nothing outside it ever is by it.
#[derive(Debug)]
pub struct PromptFolder {
    dir: PathBuf,
    key: Option<StoreKey>,
    lock: Option<ExclusiveLock>,
}

static PRIVATE_SEQ: AtomicU64 = AtomicU64::new(0);

impl PromptFolder {
    /// The folder for `key` under `parent` (made if absent) and the store the last run
    /// with that key left in it, within `capacity_bytes` less what other keys' folders
    /// keep. Where another run holds the folder, a folder of this run's own, empty.
    pub fn open(
        parent: &Path,
        key: &StoreKey,
        capacity_bytes: u64,
    ) -> io::Result<(PromptFolder, PromptStore, Restored)> {
        std::fs::create_dir_all(parent)?;
        let dir = parent.join(key.folder_name());
        std::fs::create_dir_all(&dir)?;
        let Some(lock) = try_lock_exclusive(&dir.join(LOCK))? else {
            tracing::warn!(
                "another server keeps its prompt prefixes in {}: this one keeps its own until it stops",
                dir.display()
            );
            let (folder, store) = PromptFolder::private(parent, capacity_bytes)?;
            return Ok((folder, store, Restored::default()));
        };
        let folder = PromptFolder {
            dir,
            key: Some(key.clone()),
            lock: Some(lock),
        };
        let (others, removed_folders) = trim_other_folders(parent, &folder.dir, capacity_bytes)?;
        let index = folder.read_index();
        let (store, gone) =
            PromptStore::restore(capacity_bytes.saturating_sub(others), index, |id| {
                std::fs::metadata(folder.path(id)).ok().map(|m| m.len())
            });
        folder.forget(&gone);
        let stray = folder.remove_unlisted(&store)?;
        folder.save_index(&store)?;
        let restored = Restored {
            entries: store.entries().len() as u64,
            bytes: store.used_bytes(),
            dropped_files: gone.len() as u64 + stray,
            removed_folders,
        };
        Ok((folder, store, restored))
    }

    /// A folder of this run's own under `parent`, removed on drop, and an empty store.
    pub fn private(parent: &Path, capacity_bytes: u64) -> io::Result<(PromptFolder, PromptStore)> {
        std::fs::create_dir_all(parent)?;
        let seq = PRIVATE_SEQ.fetch_add(1, Ordering::Relaxed);
        let dir = parent.join(format!("{PRIVATE_PREFIX}{}-{seq}", std::process::id()));
        // A folder of that name can only be a dead run's (process ids are reused).
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::create_dir(&dir)?;
        let lock = try_lock_exclusive(&dir.join(LOCK))?;
        let folder = PromptFolder {
            dir,
            key: None,
            lock,
        };
        if folder.lock.is_none() {
            return Err(io::Error::other(format!(
                "{} is locked by another process",
                folder.dir.display()
            )));
        }
        Ok((folder, PromptStore::new(capacity_bytes)))
    }

    /// Whether the files outlive the run (another run holds the key's folder otherwise).
    pub fn persistent(&self) -> bool {
        self.key.is_some()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of entry `id`.
    pub fn path(&self, id: u64) -> PathBuf {
        self.dir.join(format!("prefix-{id}.kv"))
    }

    /// Delete the files of `ids`.
    pub fn forget(&self, ids: &[u64]) {
        for &id in ids {
            let _ = std::fs::remove_file(self.path(id));
        }
    }

    /// Write the index of `store` (atomically and durably) where the folder outlives the
    /// run; nothing otherwise.
    pub fn save_index(&self, store: &PromptStore) -> io::Result<()> {
        let Some(key) = &self.key else {
            return Ok(());
        };
        let file = IndexFile {
            made_for: key.description.clone(),
            store: store.index(),
        };
        let json = serde_json::to_vec(&file).map_err(io::Error::other)?;
        write_atomic(&self.dir.join(INDEX), &json)
    }

    /// The index the last run left, if it is readable and was made for this key.
    fn read_index(&self) -> StoreIndex {
        let path = self.dir.join(INDEX);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return StoreIndex::default(),
            Err(e) => {
                tracing::warn!(
                    "the prompt store's index {} cannot be read ({e}): starting empty",
                    path.display()
                );
                return StoreIndex::default();
            }
        };
        match serde_json::from_slice::<IndexFile>(&bytes) {
            Ok(f) if Some(&f.made_for) == self.key.as_ref().map(|k| &k.description) => f.store,
            Ok(_) => {
                tracing::warn!("the prompt store's index {} was made for another model or settings: starting empty", path.display());
                StoreIndex::default()
            }
            Err(e) => {
                tracing::warn!(
                    "the prompt store's index {} is malformed ({e}): starting empty",
                    path.display()
                );
                StoreIndex::default()
            }
        }
    }

    /// Delete the files in the folder that are neither an entry's, the index nor the lock
    /// (a save cut short, an index's temporary file). Returns how many.
    fn remove_unlisted(&self, store: &PromptStore) -> io::Result<u64> {
        let listed: Vec<String> = store
            .entries()
            .iter()
            .map(|e| format!("prefix-{}.kv", e.id))
            .collect();
        let mut removed = 0;
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == INDEX || name == LOCK || listed.contains(&name) {
                continue;
            }
            let path = entry.path();
            let gone = if entry.file_type()?.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            if gone.is_ok() {
                removed += 1;
            }
        }
        Ok(removed)
    }
}

impl Drop for PromptFolder {
    fn drop(&mut self) {
        if !self.persistent() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The bytes of the files in `dir`.
fn folder_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

/// Remove the folders under `parent` other than `ours` that no run holds, the least
/// recently used first, until those left hold at most half of `capacity_bytes`; a dead
/// run's own folder always goes. Returns the bytes the folders left keep (held ones
/// included), and how many folders went.
fn trim_other_folders(parent: &Path, ours: &Path, capacity_bytes: u64) -> io::Result<(u64, u64)> {
    let mut kept = 0u64;
    let mut removable = Vec::new();
    let mut removed = 0u64;
    for entry in std::fs::read_dir(parent)? {
        let entry = entry?;
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let ours_by_name = name.starts_with(KEYED_PREFIX) || name.starts_with(PRIVATE_PREFIX);
        if path == ours || !ours_by_name || !entry.file_type()?.is_dir() {
            continue;
        }
        let bytes = folder_bytes(&path);
        match try_lock_exclusive(&path.join(LOCK)) {
            Ok(Some(lock)) if name.starts_with(PRIVATE_PREFIX) => {
                if std::fs::remove_dir_all(&path).is_ok() {
                    removed += 1;
                }
                drop(lock);
            }
            Ok(Some(lock)) => {
                let used = std::fs::metadata(path.join(INDEX))
                    .or_else(|_| entry.metadata())
                    .and_then(|m| m.modified())
                    .ok();
                removable.push((used, bytes, path, lock));
                kept += bytes;
            }
            // Held by a running server, or not ours to lock: it stays, and counts.
            _ => kept += bytes,
        }
    }
    removable.sort_by_key(|(used, ..)| *used);
    for (_, bytes, path, lock) in removable {
        if kept <= capacity_bytes / 2 {
            break;
        }
        if std::fs::remove_dir_all(&path).is_ok() {
            kept -= bytes;
            removed += 1;
        }
        drop(lock);
    }
    Ok((kept, removed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use epm_core::prefix::PromptCuts;
    use epm_core::prompt_store::SavedFile;

    fn session(n_ubatch: u32) -> SessionOptions {
        SessionOptions {
            n_ctx: 4096,
            n_batch: 2048,
            n_ubatch,
            n_threads: 2,
            n_threads_batch: 2,
            n_seq: 1,
            prompt_cuts: PromptCuts::Turns,
        }
    }

    fn key(n_ubatch: u32) -> StoreKey {
        StoreKey::from_facts("b", "m", &session(n_ubatch))
    }

    /// Save an entry of `bytes` as the generation core does: the file, then the index.
    fn save(folder: &PromptFolder, store: &mut PromptStore, tokens: Vec<i32>, bytes: usize) -> u64 {
        let id = store.new_id();
        std::fs::write(folder.path(id), vec![1u8; bytes]).unwrap();
        let file = SavedFile {
            bytes: bytes as u64,
            sum: 0,
        };
        let gone = store.insert(id, tokens, file);
        folder.forget(&gone);
        folder.save_index(store).unwrap();
        id
    }

    fn files(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn the_key_covers_the_build_the_model_and_the_session() {
        let base = key(512);
        assert_eq!(base, key(512));
        assert_eq!(base.folder_name(), key(512).folder_name());
        let others = [
            StoreKey::from_facts("b2", "m", &session(512)),
            StoreKey::from_facts("b", "m2", &session(512)),
            key(1024),
            StoreKey::from_facts(
                "b",
                "m",
                &SessionOptions {
                    prompt_cuts: PromptCuts::Grid,
                    ..session(512)
                },
            ),
        ];
        for k in others {
            assert_ne!(k.folder_name(), base.folder_name(), "{k:?}");
        }
    }

    #[test]
    fn a_folder_outlives_its_run_and_the_next_run_takes_its_entries_up() {
        let parent = tempfile::tempdir().unwrap();
        let (folder, mut store, restored) =
            PromptFolder::open(parent.path(), &key(512), 1000).unwrap();
        assert_eq!(restored, Restored::default());
        assert!(folder.persistent());
        let a = save(&folder, &mut store, (0..300).collect(), 100);
        let b = save(&folder, &mut store, (1000..1300).collect(), 200);
        // Invariant 1: a second run with the same key gets a folder of its own meanwhile.
        let (second, second_store, _) = PromptFolder::open(parent.path(), &key(512), 1000).unwrap();
        assert!(!second.persistent());
        assert!(second_store.entries().is_empty());
        let second_dir = second.dir().to_path_buf();
        assert!(second_dir.starts_with(parent.path()) && second_dir != folder.dir());
        drop(second);
        // Invariant 3: only its own folder went.
        assert!(!second_dir.exists());
        let dir = folder.dir().to_path_buf();
        drop((folder, store));
        assert_eq!(
            files(&dir),
            [
                INDEX.to_string(),
                LOCK.into(),
                format!("prefix-{a}.kv"),
                format!("prefix-{b}.kv")
            ]
        );
        // The next run takes both up, ids and all.
        let (folder, mut store, restored) =
            PromptFolder::open(parent.path(), &key(512), 1000).unwrap();
        assert_eq!(
            restored,
            Restored {
                entries: 2,
                bytes: 300,
                ..Restored::default()
            }
        );
        assert!(store.get(a).is_some() && store.get(b).is_some());
        // Invariant 2: the index lists what is kept.
        let index: IndexFile =
            serde_json::from_slice(&std::fs::read(dir.join(INDEX)).unwrap()).unwrap();
        assert_eq!(index.store, store.index());
        assert!(store.new_id() > b);
        drop(folder);
    }

    #[test]
    fn files_cut_short_or_unlisted_go_and_a_bad_index_starts_empty() {
        let parent = tempfile::tempdir().unwrap();
        let (folder, mut store, _) = PromptFolder::open(parent.path(), &key(512), 1000).unwrap();
        let a = save(&folder, &mut store, (0..300).collect(), 100);
        let b = save(&folder, &mut store, (1000..1300).collect(), 100);
        let dir = folder.dir().to_path_buf();
        drop((folder, store));
        // A save cut short (its file shorter than listed), and one the index never got to.
        std::fs::write(dir.join(format!("prefix-{b}.kv")), [1u8; 10]).unwrap();
        std::fs::write(dir.join("prefix-99.kv"), [1u8; 10]).unwrap();
        std::fs::write(dir.join(".index.json.partial-1-0"), b"{").unwrap();
        let (folder, store, restored) = PromptFolder::open(parent.path(), &key(512), 1000).unwrap();
        assert_eq!(
            (restored.entries, restored.bytes, restored.dropped_files),
            (1, 100, 3)
        );
        assert!(store.get(a).is_some() && store.get(b).is_none());
        assert_eq!(
            files(&dir),
            [INDEX.to_string(), LOCK.into(), format!("prefix-{a}.kv")]
        );
        drop((folder, store));
        // A malformed index: nothing is trusted, every entry's file goes.
        std::fs::write(dir.join(INDEX), b"{not json").unwrap();
        let (_folder, store, restored) =
            PromptFolder::open(parent.path(), &key(512), 1000).unwrap();
        assert!(store.entries().is_empty());
        assert_eq!((restored.entries, restored.dropped_files), (0, 1));
        assert_eq!(files(&dir), [INDEX.to_string(), LOCK.into()]);
    }

    #[test]
    fn other_keys_folders_keep_at_most_half_the_capacity_least_recently_used_first() {
        const CAPACITY: u64 = 200_000;
        let parent = tempfile::tempdir().unwrap();
        let mut dirs = Vec::new();
        for ub in [128, 256, 1024] {
            let (folder, mut store, _) =
                PromptFolder::open(parent.path(), &key(ub), CAPACITY).unwrap();
            save(&folder, &mut store, (0..300).collect(), 40_000);
            dirs.push(folder.dir().to_path_buf());
            // Index times apart, oldest first.
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // A dead run's own folder.
        let dead = parent.path().join(format!("{PRIVATE_PREFIX}1-0"));
        std::fs::create_dir(&dead).unwrap();
        std::fs::write(dead.join("prefix-1.kv"), [1u8; 50]).unwrap();
        // Something of the user's: never touched.
        let theirs = parent.path().join("notes");
        std::fs::create_dir(&theirs).unwrap();
        // The 256 folder is in use by a running server: it stays, and counts.
        let held = try_lock_exclusive(&dirs[1].join(LOCK)).unwrap().unwrap();
        let (folder, mut store, restored) =
            PromptFolder::open(parent.path(), &key(512), CAPACITY).unwrap();
        // Three folders of about 41 kB; at most 100 kB may stay: the oldest unheld one goes.
        assert_eq!(
            restored.removed_folders, 2,
            "the dead run's and the 128 one"
        );
        assert!(!dead.exists() && !dirs[0].exists());
        assert!(dirs[1].exists() && dirs[2].exists() && theirs.exists());
        // This run's store gets what the others leave.
        let others: u64 = dirs[1..].iter().map(|d| folder_bytes(d)).sum();
        assert!(others > 80_000 && others <= CAPACITY / 2, "{others}");
        let first = save(&folder, &mut store, (0..300).collect(), 40_000);
        let room = CAPACITY - others;
        let id = store.new_id();
        let file = |bytes| SavedFile { bytes, sum: 0 };
        assert_eq!(
            store.insert(id, (5000..5300).collect(), file(room)),
            vec![first]
        );
        assert_eq!(store.used_bytes(), room);
        let id = store.new_id();
        assert_eq!(
            store.insert(id, (6000..6300).collect(), file(room + 1)),
            vec![id]
        );
        drop(held);
    }
}
