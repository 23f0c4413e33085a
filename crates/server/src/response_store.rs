//! Stored responses of the Responses API: `previous_response_id` continues a conversation
//! the server remembers, and `GET` / `DELETE /v1/responses/{id}` read and remove one.
//!
//! Held in memory and bounded in bytes (`serve --responses-store-mb`); the least recently
//! used go first. Each response keeps only its own input items, its response object (whose
//! `output` holds its output items) and the id it continued, so a chain of n turns takes
//! space linear in n; a conversation is put together by walking back along the chain.
//!
//! With a [`ResponseFolder`], every stored response is also a file of its own, written when
//! it is stored and removed when it is deleted or evicted, and a restarted server reads
//! them back, oldest first: a conversation continues across restarts.
//!
//! Conversations API conversations are kept the same way, in the same memory: an entry
//! whose object is a conversation holds its items where a response holds its input items
//! ([`Kind`]); the response accessors never give one, nor the conversation accessors a
//! response.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Why a stored conversation cannot be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("no stored response has the id `{0}`")]
    NotFound(String),
    #[error("no stored conversation has the id `{0}` (never created, deleted, or the least recently used once the response store was full)")]
    NoConversation(String),
    #[error(
        "the conversation of response `{id}` goes back to response `{missing}`, which is no longer stored (deleted, or the least recently used once the store was full)"
    )]
    Expired { id: String, missing: String },
}

/// What a store holds ([`ResponseStore::usage`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreUsage {
    pub bytes: usize,
    pub responses: usize,
    pub conversations: usize,
}

/// Where stored responses outlive the server: a folder with one JSON file per response,
/// `<id>.json`, holding a [`StoredFile`].
#[derive(Debug)]
pub struct ResponseFolder {
    dir: PathBuf,
}

/// One response's file, and what an entry is made of.
#[derive(Debug, Serialize, Deserialize)]
struct StoredFile {
    id: String,
    previous: Option<String>,
    input: Vec<Value>,
    response: Value,
    /// A background response's request while it runs: the next server runs it again if
    /// this one stops first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    request: Option<Value>,
}

impl ResponseFolder {
    /// The folder `dir`, which must exist.
    pub fn new(dir: PathBuf) -> ResponseFolder {
        ResponseFolder { dir }
    }

    /// Response `id`'s file; `None` for an id that is not a plain name (this server's ids
    /// are `resp_` and hex digits).
    fn file(&self, id: &str) -> Option<PathBuf> {
        let plain = !id.is_empty()
            && id.len() <= 128
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        plain.then(|| self.dir.join(format!("{id}.json")))
    }

    /// Write response `id`'s file (a [`StoredFile`]'s JSON), atomically and durably.
    fn write(&self, id: &str, bytes: &[u8]) -> std::io::Result<()> {
        let path = self.file(id).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a plain name")
        })?;
        epm_sys::fs::write_atomic(&path, bytes)
    }

    fn remove(&self, id: &str) {
        if let Some(path) = self.file(id) {
            let _ = std::fs::remove_file(path);
        }
    }

    /// The responses in the folder, the oldest written first. A file that cannot be read as
    /// one is said and left alone.
    fn read_all(&self) -> Vec<StoredFile> {
        let Ok(dir) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut found: Vec<(std::time::SystemTime, StoredFile)> = Vec::new();
        for entry in dir.flatten() {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let read = std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice::<StoredFile>(&b).map_err(|e| e.to_string()))
                .and_then(|f| match self.file(&f.id) {
                    Some(p) if p == path => Ok(f),
                    _ => Err(format!("it holds response `{}`, not its own", f.id)),
                });
            match read {
                Ok(f) => {
                    let written = entry
                        .metadata()
                        .and_then(|m| m.modified())
                        .unwrap_or(std::time::UNIX_EPOCH);
                    found.push((written, f));
                }
                Err(e) => tracing::warn!(
                    "{}: not a stored response ({e}); left alone",
                    path.display()
                ),
            }
        }
        found.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.id.cmp(&b.1.id)));
        found.into_iter().map(|(_, f)| f).collect()
    }
}

/// What a stored entry is, told by its object's `object` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A Responses API response: its own input items, its object (with its output items),
    /// and the response it continued.
    Response,
    /// A Conversations API conversation: its items, and its object (`id`, `created_at`,
    /// `metadata`).
    Conversation,
}

impl Kind {
    fn of(object: &Value) -> Kind {
        match object.get("object").and_then(Value::as_str) {
            Some("conversation") => Kind::Conversation,
            _ => Kind::Response,
        }
    }

    fn missing(self, id: &str) -> StoreError {
        match self {
            Kind::Response => StoreError::NotFound(id.to_string()),
            Kind::Conversation => StoreError::NoConversation(id.to_string()),
        }
    }
}

#[derive(Debug)]
struct Stored {
    previous: Option<String>,
    input: Vec<Value>,
    response: Value,
    /// What this entry is charged: its id's and its JSON's lengths.
    bytes: usize,
    last_used: u64,
}

/// The stored responses.
#[derive(Debug)]
pub struct ResponseStore {
    /// 1. `bytes` is the sum of the entries' `bytes`.
    /// 2. `bytes <= capacity`.
    entries: HashMap<String, Stored>,
    /// 3. One key per entry, its `last_used`, naming it: the eviction order.
    order: BTreeMap<u64, String>,
    bytes: usize,
    capacity: usize,
    /// 4. Greater than every entry's `last_used`.
    clock: u64,
    /// 5. When set, holds a file for each entry and for no other response.
    /// 6. A file holds a request only for a response still queued or in progress
    ///    ([`unfinished`]).
    folder: Option<ResponseFolder>,
    /// Background responses the previous server did not finish, with their requests, for
    /// this one to run again ([`Self::take_resumable`]).
    resumable: Vec<(String, Value)>,
}

/// Whether `response` is a background response not yet over.
fn unfinished(response: &Value) -> bool {
    matches!(
        response.get("status").and_then(Value::as_str),
        Some("queued" | "in_progress")
    )
}

/// `response`, failed with `message` as its error.
pub fn failed(mut response: Value, message: &str) -> Value {
    response["status"] = "failed".into();
    response["error"] = serde_json::json!({"code": "server_error", "message": message});
    response
}

impl ResponseStore {
    /// A store of at most `capacity` bytes; 0 keeps nothing.
    pub fn new(capacity: usize) -> ResponseStore {
        ResponseStore {
            entries: HashMap::new(),
            order: BTreeMap::new(),
            bytes: 0,
            capacity,
            clock: 0,
            folder: None,
            resumable: Vec::new(),
        }
    }

    /// A store of at most `capacity` bytes that keeps its responses in `folder` too, with
    /// those the folder holds already (the most recently written kept where they do not all
    /// fit; the files of those that do not are removed). A background response that was
    /// still queued or running when its server stopped is kept `queued`, to be run again
    /// ([`Self::take_resumable`]); one whose file holds no request (a build before this
    /// one's) is kept as `failed`.
    pub fn with_folder(capacity: usize, folder: ResponseFolder) -> ResponseStore {
        let mut store = ResponseStore::new(capacity);
        let kept = folder.read_all();
        store.folder = Some(folder);
        for mut f in kept {
            let id = f.id.clone();
            let stopped = unfinished(&f.response);
            let kept = match (&f.request, stopped) {
                (_, false) => store.put(f),
                (Some(request), true) => {
                    let request = request.clone();
                    f.response["status"] = "queued".into();
                    let kept = store.insert_entry(f);
                    if kept {
                        store.resumable.push((id.clone(), request));
                    }
                    kept
                }
                (None, true) => {
                    f.response = failed(
                        f.response,
                        "the server stopped before this response was finished",
                    );
                    store.insert_entry(f)
                }
            };
            if !kept {
                store.forget_file(&id);
            }
        }
        store
    }

    /// The background responses the previous server left unfinished, each with its
    /// request, once: the caller runs them again under the same ids.
    pub fn take_resumable(&mut self) -> Vec<(String, Value)> {
        std::mem::take(&mut self.resumable)
    }

    fn forget_file(&self, id: &str) {
        if let Some(folder) = &self.folder {
            folder.remove(id);
        }
    }

    /// Whether this store keeps anything.
    pub fn enabled(&self) -> bool {
        self.capacity > 0
    }

    /// The bytes held, the responses and the conversations stored.
    pub fn usage(&self) -> StoreUsage {
        let conversations = self
            .entries
            .values()
            .filter(|e| Kind::of(&e.response) == Kind::Conversation)
            .count();
        StoreUsage {
            bytes: self.bytes,
            responses: self.entries.len() - conversations,
            conversations,
        }
    }

    fn touch(&mut self, id: &str) {
        let now = self.clock;
        if let Some(e) = self.entries.get_mut(id) {
            self.order.remove(&e.last_used);
            e.last_used = now;
            self.order.insert(now, id.to_string());
            self.clock += 1;
        }
    }

    /// Keep response `id`, which continued `previous` with `input` and answered `response`
    /// (whose `output` holds its items), evicting the least recently used to make room; in
    /// the folder too, when there is one (a file that cannot be written is said, and the
    /// response kept in memory only). False when it alone is larger than the store.
    pub fn insert(
        &mut self,
        id: &str,
        previous: Option<String>,
        input: Vec<Value>,
        response: Value,
    ) -> bool {
        self.insert_entry(StoredFile {
            id: id.to_string(),
            previous,
            input,
            response,
            request: None,
        })
    }

    /// [`Self::insert`] for a background response still queued or in progress, with its
    /// `request`, which a file keeps so that the next server runs it again if this one
    /// stops first (a finished response's later insert drops it).
    pub fn insert_running(
        &mut self,
        id: &str,
        previous: Option<String>,
        input: Vec<Value>,
        response: Value,
        request: Value,
    ) -> bool {
        let request = unfinished(&response).then_some(request);
        self.insert_entry(StoredFile {
            id: id.to_string(),
            previous,
            input,
            response,
            request,
        })
    }

    fn insert_entry(&mut self, entry: StoredFile) -> bool {
        let id = entry.id.clone();
        let bytes = self
            .folder
            .as_ref()
            .and_then(|_| serde_json::to_vec(&entry).ok());
        if !self.put(entry) {
            return false;
        }
        if let (Some(folder), Some(bytes)) = (&self.folder, bytes) {
            if let Err(e) = folder.write(&id, &bytes) {
                tracing::warn!(
                    "response {id} is kept in memory only: its file could not be written in {}: {e}",
                    folder.dir.display()
                );
            }
        }
        true
    }

    /// [`Self::insert`] in memory; the files of the responses evicted are removed.
    /// (A background response's request is kept in its file only.)
    fn put(&mut self, entry: StoredFile) -> bool {
        let StoredFile {
            id,
            previous,
            input,
            response,
            ..
        } = entry;
        let id = id.as_str();
        let json: usize = input.iter().map(|v| v.to_string().len()).sum();
        let bytes = id.len() + json + response.to_string().len();
        if bytes > self.capacity {
            return false;
        }
        self.remove(id);
        while self.bytes + bytes > self.capacity {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            if let Some(e) = self.entries.remove(&oldest) {
                self.bytes -= e.bytes;
                self.forget_file(&oldest);
            }
        }
        self.entries.insert(
            id.to_string(),
            Stored {
                previous,
                input,
                response,
                bytes,
                last_used: self.clock,
            },
        );
        self.order.insert(self.clock, id.to_string());
        self.clock += 1;
        self.bytes += bytes;
        true
    }

    /// The conversation up to and including response `id`: every response's input items,
    /// then its output items, from the chain's first. Each is marked used.
    pub fn conversation(&mut self, id: &str) -> Result<Vec<Value>, StoreError> {
        let mut chain: Vec<String> = Vec::new();
        let mut at = Some(id.to_string());
        while let Some(cur) = at {
            let Some(e) = self
                .entries
                .get(&cur)
                .filter(|e| Kind::of(&e.response) == Kind::Response)
            else {
                return Err(if chain.is_empty() {
                    StoreError::NotFound(cur)
                } else {
                    StoreError::Expired {
                        id: id.to_string(),
                        missing: cur,
                    }
                });
            };
            at = e.previous.clone();
            chain.push(cur);
            // Ids are fresh, so a chain cannot loop; bounded all the same.
            if chain.len() > self.entries.len() {
                break;
            }
        }
        let mut items = Vec::new();
        for cur in chain.iter().rev() {
            self.touch(cur);
            let e = &self.entries[cur];
            items.extend(e.input.iter().cloned());
            if let Some(Value::Array(out)) = e.response.get("output") {
                items.extend(out.iter().cloned());
            }
        }
        Ok(items)
    }

    /// Entry `id` of `kind`, marked used.
    fn get(&mut self, id: &str, kind: Kind) -> Result<&Stored, StoreError> {
        match self.entries.get(id) {
            Some(e) if Kind::of(&e.response) == kind => {
                self.touch(id);
                Ok(&self.entries[id])
            }
            _ => Err(kind.missing(id)),
        }
    }

    /// Response `id`'s object.
    pub fn response(&mut self, id: &str) -> Result<Value, StoreError> {
        self.get(id, Kind::Response).map(|e| e.response.clone())
    }

    /// The input items response `id` was sent (not those of the responses it continued).
    pub fn input_items(&mut self, id: &str) -> Result<Vec<Value>, StoreError> {
        self.get(id, Kind::Response).map(|e| e.input.clone())
    }

    /// Forget response `id` (its file too); false when it was not stored.
    pub fn delete(&mut self, id: &str) -> bool {
        self.get(id, Kind::Response).is_ok() && self.remove(id)
    }

    /// Keep conversation `object` (its `id` names it; `object` is `conversation`) with its
    /// `items`, replacing what was kept under that id, as [`Self::insert`] keeps a response.
    /// False when it alone is larger than the store (what was kept stays).
    pub fn put_conversation(&mut self, object: Value, items: Vec<Value>) -> bool {
        debug_assert_eq!(Kind::of(&object), Kind::Conversation);
        let id = object
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        self.insert(&id, None, items, object)
    }

    /// Conversation `id`'s object and items.
    pub fn conversation_items(&mut self, id: &str) -> Result<(Value, Vec<Value>), StoreError> {
        self.get(id, Kind::Conversation)
            .map(|e| (e.response.clone(), e.input.clone()))
    }

    /// Forget conversation `id` (its file too); false when it was not stored.
    pub fn delete_conversation(&mut self, id: &str) -> bool {
        self.get(id, Kind::Conversation).is_ok() && self.remove(id)
    }

    /// Forget entry `id`, of either kind (its file too); false when it was not stored.
    fn remove(&mut self, id: &str) -> bool {
        match self.entries.remove(id) {
            Some(e) => {
                self.order.remove(&e.last_used);
                self.bytes -= e.bytes;
                self.forget_file(id);
                true
            }
            None => false,
        }
    }

    /// Check the numbered invariants (tests).
    #[cfg(test)]
    fn check(&self) {
        let sum: usize = self.entries.values().map(|e| e.bytes).sum();
        assert_eq!(self.bytes, sum, "1");
        assert!(self.bytes <= self.capacity, "2");
        assert_eq!(self.order.len(), self.entries.len(), "3");
        for (t, id) in &self.order {
            assert_eq!(self.entries[id].last_used, *t, "3");
            assert!(*t < self.clock, "4");
        }
        if let Some(folder) = &self.folder {
            let files = folder.read_all();
            for f in &files {
                assert!(f.request.is_none() || unfinished(&f.response), "6");
            }
            let mut on_disk: Vec<String> = files.into_iter().map(|f| f.id).collect();
            let mut held: Vec<String> = self.entries.keys().cloned().collect();
            on_disk.sort();
            held.sort();
            assert_eq!(on_disk, held, "5");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn msg(role: &str, text: &str) -> Value {
        json!({"type": "message", "role": role, "content": text})
    }

    fn answer(text: &str) -> Value {
        json!({"object": "response", "output": [msg("assistant", text)]})
    }

    #[test]
    fn a_chain_is_put_together_from_its_first_response() {
        let mut s = ResponseStore::new(1 << 20);
        assert!(s.insert("a", None, vec![msg("user", "1")], answer("2")));
        assert!(s.insert("b", Some("a".into()), vec![msg("user", "3")], answer("4")));
        assert!(s.insert("c", Some("b".into()), vec![msg("user", "5")], answer("6")));
        s.check();
        let texts: Vec<Value> = s
            .conversation("c")
            .unwrap()
            .iter()
            .map(|m| m["content"].clone())
            .collect();
        assert_eq!(texts, ["1", "2", "3", "4", "5", "6"]);
        assert_eq!(s.conversation("a").unwrap().len(), 2);
        assert_eq!(s.input_items("b").unwrap(), vec![msg("user", "3")]);
        assert_eq!(s.response("c").unwrap(), answer("6"));
        assert_eq!(s.conversation("x"), Err(StoreError::NotFound("x".into())));
        s.check();
    }

    #[test]
    fn the_least_recently_used_go_first_and_a_broken_chain_says_so() {
        let one = "a".len() + msg("user", "q").to_string().len() + answer("r").to_string().len();
        let mut s = ResponseStore::new(3 * one);
        for id in ["a", "b", "c"] {
            assert!(s.insert(id, None, vec![msg("user", "q")], answer("r")));
            s.check();
        }
        // `a` used: `b` is now the oldest and goes for `d`.
        s.response("a").unwrap();
        assert!(s.insert("d", Some("b".into()), vec![msg("user", "q")], answer("r")));
        s.check();
        assert_eq!((s.usage().bytes, s.usage().responses), (3 * one, 3));
        assert!(s.response("a").is_ok());
        assert_eq!(s.response("b"), Err(StoreError::NotFound("b".into())));
        assert_eq!(
            s.conversation("d"),
            Err(StoreError::Expired {
                id: "d".into(),
                missing: "b".into()
            })
        );
    }

    #[test]
    fn a_store_with_a_folder_is_read_back_by_the_next_server() {
        let dir = tempfile::tempdir().unwrap();
        let folder = || ResponseFolder::new(dir.path().to_path_buf());
        let one =
            "resp_a".len() + msg("user", "q").to_string().len() + answer("r").to_string().len();
        let mut s = ResponseStore::with_folder(3 * one, folder());
        assert!(s.insert("resp_a", None, vec![msg("user", "q")], answer("r")));
        assert!(s.insert(
            "resp_b",
            Some("resp_a".into()),
            vec![msg("user", "q")],
            answer("r")
        ));
        assert!(s.insert("resp_c", None, vec![msg("user", "q")], answer("r")));
        assert!(s.delete("resp_c"));
        s.check();
        // Not a response's file, and a file whose id is not its name: both left alone.
        std::fs::write(dir.path().join("junk.json"), b"{").unwrap();
        let moved = std::fs::read(dir.path().join("resp_a.json")).unwrap();
        std::fs::write(dir.path().join("resp_x.json"), &moved).unwrap();
        drop(s);
        // The next server's store: the chain is there, the deleted one is not.
        let mut s = ResponseStore::with_folder(3 * one, folder());
        assert_eq!(s.conversation("resp_b").unwrap().len(), 4);
        assert_eq!(
            s.response("resp_c"),
            Err(StoreError::NotFound("resp_c".into()))
        );
        assert_eq!((s.usage().bytes, s.usage().responses), (2 * one, 2));
        std::fs::remove_file(dir.path().join("junk.json")).unwrap();
        std::fs::remove_file(dir.path().join("resp_x.json")).unwrap();
        s.check();
        // Evicted ones lose their files; a smaller store keeps the newest written.
        assert!(s.insert("resp_d", None, vec![msg("user", "q")], answer("r")));
        assert!(s.insert("resp_e", None, vec![msg("user", "q")], answer("r")));
        s.check();
        assert!(!dir.path().join("resp_a.json").exists());
        drop(s);
        let mut s = ResponseStore::with_folder(one, folder());
        s.check();
        assert_eq!((s.usage().bytes, s.usage().responses), (one, 1));
        assert!(s.response("resp_e").is_ok());
        // A background response its server never finished runs again with its request,
        // handed out once; over, its file drops the request (invariant 6).
        drop(s);
        let running = json!({"object": "response", "status": "in_progress", "output": []});
        let request = json!({"input": "q", "background": true});
        let mut s = ResponseStore::with_folder(3 * one + 64, folder());
        assert!(s.insert_running(
            "resp_r",
            None,
            vec![msg("user", "q")],
            running,
            request.clone()
        ));
        s.check();
        drop(s);
        let mut s = ResponseStore::with_folder(3 * one + 64, folder());
        s.check();
        assert_eq!(s.response("resp_r").unwrap()["status"], "queued");
        assert_eq!(
            s.take_resumable(),
            vec![("resp_r".to_string(), request.clone())]
        );
        assert!(s.take_resumable().is_empty());
        assert!(s.insert_running("resp_r", None, vec![msg("user", "q")], answer("r"), request));
        s.check();
        assert!(!std::fs::read_to_string(dir.path().join("resp_r.json"))
            .unwrap()
            .contains("request"));
        assert!(s.delete("resp_r"));
        // One written by a build that kept no request comes back failed, and stays so.
        drop(s);
        let queued = json!({"object": "response", "status": "queued", "output": []});
        let mut s = ResponseStore::with_folder(3 * one, folder());
        assert!(s.insert("resp_q", None, vec![msg("user", "q")], queued));
        drop(s);
        for _ in 0..2 {
            let mut s = ResponseStore::with_folder(3 * one, folder());
            s.check();
            let r = s.response("resp_q").unwrap();
            assert_eq!(r["status"], "failed", "{r}");
            assert_eq!(r["error"]["code"], "server_error");
        }
        // An id that is not a plain name never becomes a path.
        assert!(folder().file("../x").is_none() && folder().file("").is_none());
    }

    #[test]
    fn conversations_and_responses_are_kept_apart_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let folder = || ResponseFolder::new(dir.path().to_path_buf());
        let conv =
            json!({"id": "conv-a", "object": "conversation", "created_at": 1, "metadata": {}});
        let mut s = ResponseStore::with_folder(1 << 20, folder());
        assert!(s.insert("resp-a", None, vec![msg("user", "q")], answer("r")));
        assert!(s.put_conversation(conv.clone(), vec![msg("user", "1")]));
        // Replaced whole, as each response adds its items.
        let two = vec![msg("user", "1"), msg("assistant", "2")];
        assert!(s.put_conversation(conv.clone(), two.clone()));
        s.check();
        let usage = s.usage();
        assert_eq!((usage.responses, usage.conversations), (1, 1));
        // Neither kind is found as the other.
        assert_eq!(
            s.response("conv-a"),
            Err(StoreError::NotFound("conv-a".into()))
        );
        assert_eq!(
            s.input_items("conv-a"),
            Err(StoreError::NotFound("conv-a".into()))
        );
        assert_eq!(
            s.conversation("conv-a"),
            Err(StoreError::NotFound("conv-a".into()))
        );
        assert!(s.insert("resp-b", Some("conv-a".into()), vec![], answer("r")));
        assert_eq!(
            s.conversation("resp-b"),
            Err(StoreError::Expired {
                id: "resp-b".into(),
                missing: "conv-a".into()
            })
        );
        assert_eq!(
            s.conversation_items("resp-a"),
            Err(StoreError::NoConversation("resp-a".into()))
        );
        assert!(!s.delete("conv-a") && !s.delete_conversation("resp-a"));
        s.check();
        drop(s);
        // The next server's store has the conversation as it was last put.
        let mut s = ResponseStore::with_folder(1 << 20, folder());
        s.check();
        assert_eq!(
            s.conversation_items("conv-a").unwrap(),
            (conv.clone(), two.clone())
        );
        // One that would outgrow the store is not put, and what was kept stays.
        let huge = vec![msg("user", &"x".repeat(1 << 20))];
        assert!(!s.put_conversation(conv.clone(), huge));
        assert_eq!(s.conversation_items("conv-a").unwrap().1, two);
        assert!(s.delete_conversation("conv-a"));
        assert_eq!(
            s.conversation_items("conv-a"),
            Err(StoreError::NoConversation("conv-a".into()))
        );
        s.check();
        assert_eq!(s.usage().conversations, 0);
    }

    #[test]
    fn deleted_replaced_and_oversized_entries_keep_the_count_exact() {
        let mut s = ResponseStore::new(200);
        assert!(s.insert("a", None, vec![msg("user", "q")], answer("r")));
        assert!(s.insert("a", None, vec![msg("user", "qq")], answer("r")));
        s.check();
        assert_eq!(s.usage().responses, 1);
        assert!(!s.insert(
            "big",
            None,
            vec![msg("user", &"x".repeat(300))],
            answer("r")
        ));
        assert!(s.delete("a"));
        assert!(!s.delete("a"));
        s.check();
        assert_eq!(s.usage(), StoreUsage::default());
        let mut off = ResponseStore::new(0);
        assert!(!off.enabled());
        assert!(!off.insert("a", None, vec![], json!({})));
        off.check();
    }
}
