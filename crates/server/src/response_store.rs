//! Stored responses of the Responses API: `previous_response_id` continues a conversation
//! the server remembers, and `GET` / `DELETE /v1/responses/{id}` read and remove one.
//!
//! Held in memory and bounded in bytes (`serve --responses-store-mb`); the least recently
//! used go first. Each response keeps only its own input items, its response object (whose
//! `output` holds its output items) and the id it continued, so a chain of n turns takes
//! space linear in n; a conversation is put together by walking back along the chain.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

/// Why a stored conversation cannot be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("no stored response has the id `{0}`")]
    NotFound(String),
    #[error(
        "the conversation of response `{id}` goes back to response `{missing}`, which is no longer stored (deleted, or the least recently used once the store was full)"
    )]
    Expired { id: String, missing: String },
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
        }
    }

    /// Whether this store keeps anything.
    pub fn enabled(&self) -> bool {
        self.capacity > 0
    }

    /// The bytes held and the responses stored.
    pub fn usage(&self) -> (usize, usize) {
        (self.bytes, self.entries.len())
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
    /// (whose `output` holds its items), evicting the least recently used to make room.
    /// False when it alone is larger than the store.
    pub fn insert(
        &mut self,
        id: &str,
        previous: Option<String>,
        input: Vec<Value>,
        response: Value,
    ) -> bool {
        let json: usize = input.iter().map(|v| v.to_string().len()).sum();
        let bytes = id.len() + json + response.to_string().len();
        if bytes > self.capacity {
            return false;
        }
        self.delete(id);
        while self.bytes + bytes > self.capacity {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            if let Some(e) = self.entries.remove(&oldest) {
                self.bytes -= e.bytes;
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
            let Some(e) = self.entries.get(&cur) else {
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

    /// Response `id`'s object.
    pub fn response(&mut self, id: &str) -> Result<Value, StoreError> {
        self.touch(id);
        self.entries
            .get(id)
            .map(|e| e.response.clone())
            .ok_or_else(|| StoreError::NotFound(id.to_string()))
    }

    /// The input items response `id` was sent (not those of the responses it continued).
    pub fn input_items(&mut self, id: &str) -> Result<Vec<Value>, StoreError> {
        self.touch(id);
        self.entries
            .get(id)
            .map(|e| e.input.clone())
            .ok_or_else(|| StoreError::NotFound(id.to_string()))
    }

    /// Forget response `id`; false when it was not stored.
    pub fn delete(&mut self, id: &str) -> bool {
        match self.entries.remove(id) {
            Some(e) => {
                self.order.remove(&e.last_used);
                self.bytes -= e.bytes;
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
        assert_eq!(s.usage(), (3 * one, 3));
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
    fn deleted_replaced_and_oversized_entries_keep_the_count_exact() {
        let mut s = ResponseStore::new(200);
        assert!(s.insert("a", None, vec![msg("user", "q")], answer("r")));
        assert!(s.insert("a", None, vec![msg("user", "qq")], answer("r")));
        s.check();
        assert_eq!(s.usage().1, 1);
        assert!(!s.insert(
            "big",
            None,
            vec![msg("user", &"x".repeat(300))],
            answer("r")
        ));
        assert!(s.delete("a"));
        assert!(!s.delete("a"));
        s.check();
        assert_eq!(s.usage(), (0, 0));
        let mut off = ResponseStore::new(0);
        assert!(!off.enabled());
        assert!(!off.insert("a", None, vec![], json!({})));
        off.check();
    }
}
