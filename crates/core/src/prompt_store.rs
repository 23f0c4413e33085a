//! Prompt prefixes put aside on disk. When a slot's cache is about to give way to another
//! prompt (a chat UI's title request, an agent's side question), the engine saves the
//! cache's exact part to a file; a later prompt that keeps more of a saved prefix than of
//! any slot's cache has it loaded back into its slot. Which prefixes to save, which to load
//! and which to forget within a byte budget live here; the files do not.
//!
//! A loaded prefix holds the very KV bytes its slot computed, ending on a boundary of the
//! session's split, so a prompt that keeps part of it gets the output a cold run gives,
//! under the same rule as a slot's own cache (`prefix::reusable_prefix`).
//!
//! The store outlives its run through a [`StoreIndex`]: the entries as a later run with the
//! same model and settings reads them back ([`PromptStore::restore`], which keeps only
//! entries whose files are whole and re-establishes the invariants).

use serde::{Deserialize, Serialize};

use crate::prefix::SeqCache;

/// Prefixes are saved, and loaded, only where they keep at least this many tokens more than
/// the alternative: a shorter stretch costs little more to evaluate again than its KV costs
/// to write and read back.
pub const MIN_STORED_GAIN_TOKENS: usize = 256;

/// A saved prefix's file as it was written: its size, and a checksum of its bytes that is
/// checked before the file is read back (a file of the right size with other bytes would
/// otherwise load as KV and change outputs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedFile {
    pub bytes: u64,
    pub sum: u64,
}

/// One saved prefix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredPrefix {
    pub id: u64,
    /// The tokens of the saved positions `0..len`: all exact (they end on a boundary).
    pub tokens: Vec<i32>,
    /// The size of its file.
    pub bytes: u64,
    /// Its file's checksum ([`SavedFile::sum`]).
    pub sum: u64,
    last_used: u64,
}

impl StoredPrefix {
    /// What its file was written as.
    pub fn file(&self) -> SavedFile {
        SavedFile {
            bytes: self.bytes,
            sum: self.sum,
        }
    }
}

/// The saved prefixes, least recently used forgotten first.
///
/// Invariants (checked by `check` in tests):
/// 1. `used_bytes` is the sum of the entries' `bytes`, and at most `capacity_bytes`;
/// 2. no entry's tokens are a prefix of another's: the longer one serves every prompt the
///    shorter one would;
/// 3. ids are unique and never handed out twice (`next_id` only grows).
#[derive(Debug)]
pub struct PromptStore {
    entries: Vec<StoredPrefix>,
    capacity_bytes: u64,
    used_bytes: u64,
    clock: u64,
    next_id: u64,
}

impl PromptStore {
    pub fn new(capacity_bytes: u64) -> PromptStore {
        PromptStore {
            entries: Vec::new(),
            capacity_bytes,
            used_bytes: 0,
            clock: 0,
            next_id: 0,
        }
    }

    pub fn used_bytes(&self) -> u64 {
        self.used_bytes
    }

    pub fn entries(&self) -> &[StoredPrefix] {
        &self.entries
    }

    pub fn get(&self, id: u64) -> Option<&StoredPrefix> {
        self.entries.iter().find(|e| e.id == id)
    }

    /// What a later run needs to take the store up again.
    pub fn index(&self) -> StoreIndex {
        StoreIndex {
            next_id: self.next_id,
            clock: self.clock,
            entries: self.entries.clone(),
        }
    }

    /// The store a run left in `index`, within `capacity_bytes`. `file_bytes(id)` is the
    /// size of entry `id`'s file now (`None`: there is none). Entries are taken the most
    /// recently used first; one is kept when its file has the size it was saved with, its id
    /// is not taken by a more recent entry, no kept entry is a prefix of it or it of one,
    /// and it fits.
    /// Returns the store and the ids of the entries dropped, whose files must go.
    pub fn restore(
        capacity_bytes: u64,
        index: StoreIndex,
        mut file_bytes: impl FnMut(u64) -> Option<u64>,
    ) -> (PromptStore, Vec<u64>) {
        let mut store = PromptStore::new(capacity_bytes);
        store.next_id = index.next_id;
        store.clock = index.clock;
        let mut candidates = index.entries;
        candidates.sort_by_key(|e| std::cmp::Reverse(e.last_used));
        let mut gone = Vec::new();
        for e in candidates {
            store.next_id = store.next_id.max(e.id);
            store.clock = store.clock.max(e.last_used);
            let whole = file_bytes(e.id) == Some(e.bytes);
            let taken = store.entries.iter().any(|k| k.id == e.id);
            // A valid index has no entry that is a prefix of another (invariant 2); where
            // one does, the more recent entry stays.
            let overlaps = store
                .entries
                .iter()
                .any(|k| k.tokens.starts_with(&e.tokens) || e.tokens.starts_with(&k.tokens));
            let fits = store.used_bytes + e.bytes <= capacity_bytes;
            if taken {
                // The id's file belongs to the more recent entry.
                continue;
            }
            if !whole || overlaps || !fits {
                gone.push(e.id);
                continue;
            }
            store.used_bytes += e.bytes;
            store.entries.push(e);
        }
        (store, gone)
    }

    /// The part of `cache` worth saving before a prompt that keeps only `keep` of its tokens
    /// takes its slot: its exact part, when that holds at least [`MIN_STORED_GAIN_TOKENS`]
    /// more than `keep` and no entry holds it already (the same tokens, or more).
    pub fn worth_saving<'c>(&self, cache: &'c SeqCache, keep: usize) -> Option<&'c [i32]> {
        let exact = &cache.tokens[..cache.exact.min(cache.tokens.len())];
        if exact.len() < keep + MIN_STORED_GAIN_TOKENS || self.capacity_bytes == 0 {
            return None;
        }
        if self.entries.iter().any(|e| e.tokens.starts_with(exact)) {
            return None;
        }
        Some(exact)
    }

    /// How many leading tokens of `cache`'s exact part the store holds already: the longest
    /// entry that is a prefix of it (0 when none). A save that would add fewer than
    /// [`MIN_STORED_GAIN_TOKENS`] to it is not worth writing the whole prefix again.
    pub fn stored_part(&self, cache: &SeqCache) -> usize {
        let exact = &cache.tokens[..cache.exact.min(cache.tokens.len())];
        self.entries
            .iter()
            .filter(|e| exact.starts_with(&e.tokens))
            .map(|e| e.tokens.len())
            .max()
            .unwrap_or(0)
    }

    /// The most bytes the store's files may take together: a larger file is not worth
    /// writing.
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    /// An id for a prefix about to be saved (its file's name).
    pub fn new_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Record the prefix saved as `id`: `tokens`, in `file`. Returns the ids whose files
    /// must go: entries it extends, then the least recently used until it fits, or `id`
    /// itself when it alone is larger than the store.
    pub fn insert(&mut self, id: u64, tokens: Vec<i32>, file: SavedFile) -> Vec<u64> {
        let bytes = file.bytes;
        if bytes > self.capacity_bytes {
            return vec![id];
        }
        let mut gone = Vec::new();
        self.entries.retain(|e| {
            let extended = tokens.starts_with(&e.tokens);
            if extended {
                gone.push(e.id);
            }
            !extended
        });
        self.used_bytes = self.entries.iter().map(|e| e.bytes).sum();
        while self.used_bytes + bytes > self.capacity_bytes {
            let oldest = (0..self.entries.len())
                .min_by_key(|&i| self.entries[i].last_used)
                .expect("bytes <= capacity, so an entry is left while over it");
            let e = self.entries.swap_remove(oldest);
            self.used_bytes -= e.bytes;
            gone.push(e.id);
        }
        self.clock += 1;
        self.used_bytes += bytes;
        self.entries.push(StoredPrefix {
            id,
            tokens,
            bytes,
            sum: file.sum,
            last_used: self.clock,
        });
        gone
    }

    /// The entry that lets a prompt keep the most, where `keep_of` says how many of its
    /// tokens an entry lets it keep, when that beats `have` (what its slot keeps) by at
    /// least [`MIN_STORED_GAIN_TOKENS`]: `(id, tokens kept)`.
    pub fn best_for(
        &self,
        have: usize,
        mut keep_of: impl FnMut(&StoredPrefix) -> usize,
    ) -> Option<(u64, usize)> {
        self.entries
            .iter()
            .map(|e| (e.id, keep_of(e)))
            .filter(|&(_, keep)| keep >= have + MIN_STORED_GAIN_TOKENS)
            .max_by_key(|&(id, keep)| (keep, id))
    }

    /// `id` was loaded: it is the most recently used.
    pub fn touch(&mut self, id: u64) {
        self.clock += 1;
        let now = self.clock;
        if let Some(e) = self.entries.iter_mut().find(|e| e.id == id) {
            e.last_used = now;
        }
    }

    /// Forget `id` (its file could not be read back).
    pub fn remove(&mut self, id: u64) -> Option<StoredPrefix> {
        let i = self.entries.iter().position(|e| e.id == id)?;
        let e = self.entries.swap_remove(i);
        self.used_bytes -= e.bytes;
        Some(e)
    }

    #[cfg(test)]
    fn check(&self) {
        // 1.
        let sum: u64 = self.entries.iter().map(|e| e.bytes).sum();
        assert_eq!(sum, self.used_bytes, "invariant 1: used bytes");
        assert!(
            self.used_bytes <= self.capacity_bytes,
            "invariant 1: capacity"
        );
        for a in &self.entries {
            for b in &self.entries {
                // 2. and 3.
                if a.id != b.id {
                    assert!(!b.tokens.starts_with(&a.tokens), "invariant 2");
                }
                assert!(a.id <= self.next_id, "invariant 3");
            }
        }
        let mut ids: Vec<u64> = self.entries.iter().map(|e| e.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), self.entries.len(), "invariant 3: unique");
    }
}

/// The store as a later run reads it back: its entries and its counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreIndex {
    pub next_id: u64,
    pub clock: u64,
    pub entries: Vec<StoredPrefix>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(from: i32, n: usize) -> Vec<i32> {
        (from..from + n as i32).collect()
    }

    fn file(bytes: u64) -> SavedFile {
        SavedFile { bytes, sum: bytes }
    }

    fn saved(store: &mut PromptStore, t: Vec<i32>, bytes: u64) -> (u64, Vec<u64>) {
        let id = store.new_id();
        let gone = store.insert(id, t, file(bytes));
        store.check();
        (id, gone)
    }

    #[test]
    fn only_an_exact_part_long_enough_and_not_yet_held_is_worth_saving() {
        let mut store = PromptStore::new(1 << 30);
        let cache = SeqCache {
            tokens: tokens(0, 700),
            exact: 512,
        };
        assert_eq!(store.worth_saving(&cache, 0).map(<[i32]>::len), Some(512));
        assert_eq!(store.worth_saving(&cache, 256).map(<[i32]>::len), Some(512));
        assert!(store.worth_saving(&cache, 257).is_none(), "gains 255");
        // Held by an entry with the same tokens, or one that extends them.
        saved(&mut store, tokens(0, 600), 10);
        assert!(store.worth_saving(&cache, 0).is_none());
        // A disabled store saves nothing.
        assert!(PromptStore::new(0).worth_saving(&cache, 0).is_none());
    }

    #[test]
    fn the_stored_part_is_the_longest_entry_the_exact_part_extends() {
        let mut store = PromptStore::new(1 << 30);
        let cache = SeqCache {
            tokens: tokens(0, 900),
            exact: 768,
        };
        assert_eq!(store.stored_part(&cache), 0);
        saved(&mut store, tokens(0, 300), 10);
        saved(&mut store, tokens(5, 600), 10);
        assert_eq!(store.stored_part(&cache), 300);
        // Only the exact part counts: an entry past it is not a part of it.
        saved(&mut store, tokens(0, 800), 10);
        assert_eq!(store.stored_part(&cache), 0);
        let grown = SeqCache {
            tokens: tokens(0, 1100),
            exact: 1024,
        };
        assert_eq!(store.stored_part(&grown), 800);
        // What a save would add beyond it decides.
        let keep = store.stored_part(&grown);
        assert!(store.worth_saving(&grown, keep).is_none(), "adds 224");
        let longer = SeqCache {
            tokens: tokens(0, 1100),
            exact: 1056,
        };
        assert_eq!(
            store.worth_saving(&longer, keep).map(<[i32]>::len),
            Some(1056)
        );
    }

    #[test]
    fn an_entry_replaces_those_it_extends_and_the_least_recently_used_make_room() {
        let mut store = PromptStore::new(100);
        let (a, gone) = saved(&mut store, tokens(0, 300), 40);
        assert!(gone.is_empty());
        let (b, _) = saved(&mut store, tokens(1000, 300), 40);
        // The conversation behind `a` went on: its longer prefix replaces it.
        let (a2, gone) = saved(&mut store, tokens(0, 600), 50);
        assert_eq!(gone, [a]);
        assert_eq!(store.used_bytes(), 90);
        // `b` is used again, so `a2` is the oldest when room is needed.
        store.touch(b);
        let (_, gone) = saved(&mut store, tokens(2000, 300), 30);
        assert_eq!(gone, [a2]);
        assert!(store.get(b).is_some());
        // Larger than the store: not kept.
        let id = store.new_id();
        assert_eq!(store.insert(id, tokens(5000, 300), file(101)), [id]);
        store.check();
        assert!(store.get(id).is_none());
    }

    #[test]
    fn the_best_entry_must_beat_the_slot_by_the_minimum_gain() {
        let mut store = PromptStore::new(1 << 20);
        let (a, _) = saved(&mut store, tokens(0, 400), 1);
        let (b, _) = saved(
            &mut store,
            tokens(0, 1).into_iter().chain(tokens(50, 900)).collect(),
            1,
        );
        let keep = |e: &StoredPrefix| e.tokens.len();
        assert_eq!(store.best_for(0, keep), Some((b, 901)));
        assert_eq!(store.best_for(645, keep), Some((b, 901)));
        assert_eq!(store.best_for(646, keep), None);
        assert_eq!(
            store.best_for(100, |e| if e.id == a { 400 } else { 0 }),
            Some((a, 400))
        );
        assert_eq!(store.remove(a).map(|e| e.id), Some(a));
        store.check();
        assert_eq!(
            store.best_for(100, |e| if e.id == a { 400 } else { 0 }),
            None
        );
    }

    #[test]
    fn a_store_restored_from_its_index_is_the_same_store() {
        let mut store = PromptStore::new(1000);
        let (a, _) = saved(&mut store, tokens(0, 300), 40);
        let (b, _) = saved(&mut store, tokens(1000, 300), 60);
        store.touch(a);
        let index = store.index();
        let json = serde_json::to_string(&index).unwrap();
        let back: StoreIndex = serde_json::from_str(&json).unwrap();
        assert_eq!(back, index);
        let sizes = |id: u64| Some(if id == a { 40 } else { 60 });
        let (restored, gone) = PromptStore::restore(1000, back, sizes);
        restored.check();
        assert!(gone.is_empty());
        assert_eq!(restored.index(), index);
        // Ids go on from where the run left them, and `a` stays the most recently used.
        let mut restored = restored;
        assert_eq!(restored.new_id(), b + 1);
        let id = restored.new_id();
        let mut small = restored;
        small.capacity_bytes = 100;
        assert_eq!(small.insert(id, tokens(2000, 300), file(10)), [b]);
        small.check();
    }

    #[test]
    fn restoring_keeps_only_whole_files_and_re_establishes_the_invariants() {
        let entry = |id: u64, t: Vec<i32>, bytes: u64, last_used: u64| StoredPrefix {
            id,
            tokens: t,
            bytes,
            sum: 0,
            last_used,
        };
        let index = StoreIndex {
            // Lower than the ids it holds: a later id must not be handed out twice.
            next_id: 2,
            clock: 1,
            entries: vec![
                entry(1, tokens(0, 300), 30, 5),
                // Extends 1, which is more recent (no valid index has such a pair).
                entry(2, tokens(0, 600), 60, 3),
                // Its file was cut short (a crash during the save).
                entry(3, tokens(1000, 300), 30, 9),
                // The same id twice: the more recent one is kept.
                entry(4, tokens(2000, 300), 30, 8),
                entry(4, tokens(3000, 300), 30, 2),
                // Least recently used, and no room left for it.
                entry(5, tokens(4000, 300), 50, 1),
                // Its file is gone.
                entry(6, tokens(5000, 300), 30, 7),
            ],
        };
        let sizes = |id: u64| match id {
            3 => Some(12),
            6 => None,
            _ => Some([0, 30, 60, 0, 30, 50][id as usize]),
        };
        let (mut store, mut gone) = PromptStore::restore(100, index, sizes);
        store.check();
        gone.sort_unstable();
        assert_eq!(gone, [2, 3, 5, 6]);
        let mut kept: Vec<u64> = store.entries().iter().map(|e| e.id).collect();
        kept.sort_unstable();
        assert_eq!(kept, [1, 4]);
        assert_eq!(store.get(4).unwrap().tokens, tokens(2000, 300));
        assert_eq!(store.used_bytes(), 60);
        assert_eq!(store.new_id(), 7);
        // An empty index is an empty store.
        let (empty, gone) = PromptStore::restore(100, StoreIndex::default(), |_| None);
        empty.check();
        assert!(empty.entries().is_empty() && gone.is_empty());
    }
}
