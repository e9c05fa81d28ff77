//! A consumer's own status, shown by `snapbus ls`: a [`StatusBoard`] of named counters,
//! numbers and texts that the consumer updates from any of its threads and that its
//! [`Subscriber`](crate::subscriber::Subscriber) sends to the broker with its counters.
//!
//! # Guarantees
//!
//! - **Cheap and never blocking for long.** An update takes a mutex held for one map
//!   operation; the subscriber copies the board about twice a second. Nothing here touches
//!   the lanes, so a board cannot slow a producer.
//! - **Bounded.** What is sent is at most [`MAX_BOARD_BYTES`] of keys and texts: at most
//!   [`MAX_ENTRIES`] entries (the first, by key order), keys cut to [`MAX_KEY_BYTES`], texts to
//!   [`MAX_TEXT_BYTES`]; so boards cannot outgrow the broker's reply to `ls`.
//! - **Survives a panicking writer.** A thread that panicked while holding the lock does not
//!   poison the board for the others.
//!
//! # Example
//!
//! ```
//! use snapbus_bus::status::{StatusBoard, StatusValue};
//!
//! let board = StatusBoard::new();
//! board.set("state", "ok");
//! board.add("exported.metrics", 3);
//! board.add("exported.metrics", 2);
//! let e = board.entries();
//! assert_eq!(e[0].key, "exported.metrics");
//! assert_eq!(e[0].value, StatusValue::Count(5));
//! assert_eq!(e[1].value, StatusValue::Text("ok".into()));
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

/// The most entries a board sends to the broker.
pub const MAX_ENTRIES: usize = 64;
/// The longest key sent, in bytes (longer ones are cut at a character boundary).
pub const MAX_KEY_BYTES: usize = 64;
/// The longest text value sent, in bytes (longer ones are cut at a character boundary).
pub const MAX_TEXT_BYTES: usize = 256;
/// The most bytes of keys and values a board sends (the entries after are left out).
pub const MAX_BOARD_BYTES: usize = 4096;

/// One status value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum StatusValue {
    /// A count (exported records, retries, …).
    Count(u64),
    /// A measurement (a rate, seconds since something, …).
    Number(f64),
    /// A state or a message (`ok`, the last error).
    Text(String),
}

impl fmt::Display for StatusValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StatusValue::Count(n) => write!(f, "{n}"),
            StatusValue::Number(x) => write!(f, "{x}"),
            StatusValue::Text(s) if s.chars().any(char::is_whitespace) || s.is_empty() => {
                write!(f, "{s:?}")
            }
            StatusValue::Text(s) => f.write_str(s),
        }
    }
}

impl From<u64> for StatusValue {
    fn from(n: u64) -> Self {
        StatusValue::Count(n)
    }
}

impl From<f64> for StatusValue {
    fn from(x: f64) -> Self {
        StatusValue::Number(x)
    }
}

impl From<&str> for StatusValue {
    fn from(s: &str) -> Self {
        StatusValue::Text(s.to_owned())
    }
}

impl From<String> for StatusValue {
    fn from(s: String) -> Self {
        StatusValue::Text(s)
    }
}

/// A named status value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusEntry {
    /// Dotted lower-snake name: `state`, `exported.metrics`, `dropped.queue_full`.
    pub key: String,
    /// Its value.
    pub value: StatusValue,
}

/// A consumer's status, shared by its threads (clones are the same board).
#[derive(Debug, Clone, Default)]
pub struct StatusBoard(Arc<Mutex<BTreeMap<String, StatusValue>>>);

impl StatusBoard {
    /// An empty board.
    pub fn new() -> StatusBoard {
        StatusBoard::default()
    }

    fn map(&self) -> MutexGuard<'_, BTreeMap<String, StatusValue>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets `key` to `value`.
    pub fn set(&self, key: &str, value: impl Into<StatusValue>) {
        let value = value.into();
        let mut m = self.map();
        match m.get_mut(key) {
            Some(v) => *v = value,
            None => {
                m.insert(key.to_owned(), value);
            }
        }
    }

    /// Adds `n` to the count `key` (created at 0; a key holding a number or text is replaced
    /// by the count `n`).
    pub fn add(&self, key: &str, n: u64) {
        let mut m = self.map();
        match m.get_mut(key) {
            Some(StatusValue::Count(c)) => *c = c.saturating_add(n),
            Some(v) => *v = StatusValue::Count(n),
            None => {
                m.insert(key.to_owned(), StatusValue::Count(n));
            }
        }
    }

    /// Removes `key`.
    pub fn remove(&self, key: &str) {
        self.map().remove(key);
    }

    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<StatusValue> {
        self.map().get(key).cloned()
    }

    /// The entries, sorted by key, within the bounds of the module's guarantees.
    pub fn entries(&self) -> Vec<StatusEntry> {
        let mut bytes = 0usize;
        self.map()
            .iter()
            .take(MAX_ENTRIES)
            .map(|(k, v)| StatusEntry {
                key: cut(k, MAX_KEY_BYTES).to_owned(),
                value: match v {
                    StatusValue::Text(s) => StatusValue::Text(cut(s, MAX_TEXT_BYTES).to_owned()),
                    v => v.clone(),
                },
            })
            .take_while(|e| {
                bytes += e.key.len()
                    + match &e.value {
                        StatusValue::Text(t) => t.len(),
                        _ => 8,
                    };
                bytes <= MAX_BOARD_BYTES
            })
            .collect()
    }
}

/// `s` cut to at most `max` bytes, at a character boundary.
fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_one_board_and_counts_add_up() {
        let a = StatusBoard::new();
        let b = a.clone();
        let t = std::thread::spawn(move || {
            for _ in 0..1000 {
                b.add("n", 1);
            }
        });
        for _ in 0..1000 {
            a.add("n", 1);
        }
        t.join().unwrap();
        assert_eq!(a.get("n"), Some(StatusValue::Count(2000)));
    }

    #[test]
    fn set_replaces_and_add_resets_a_non_count() {
        let b = StatusBoard::new();
        b.set("state", "ok");
        b.set("state", "down");
        assert_eq!(b.get("state"), Some(StatusValue::Text("down".into())));
        b.add("state", 2);
        assert_eq!(b.get("state"), Some(StatusValue::Count(2)));
        b.remove("state");
        assert_eq!(b.get("state"), None);
    }

    #[test]
    fn entries_are_bounded_in_number_and_text_length() {
        let b = StatusBoard::new();
        for i in 0..(MAX_ENTRIES + 10) {
            b.set(&format!("k{i:03}"), i as u64);
        }
        b.set("k000", "é".repeat(MAX_TEXT_BYTES));
        let e = b.entries();
        assert_eq!(e.len(), MAX_ENTRIES);
        let long = StatusBoard::new();
        for i in 0..MAX_ENTRIES {
            long.set(
                &format!("{i:02}{}", "k".repeat(100)),
                "t".repeat(MAX_TEXT_BYTES),
            );
        }
        let cut_down = long.entries();
        assert!(cut_down.iter().all(|e| e.key.len() == MAX_KEY_BYTES));
        let total: usize = cut_down.iter().map(|e| e.key.len() + MAX_TEXT_BYTES).sum();
        assert!(
            total <= MAX_BOARD_BYTES && total + MAX_KEY_BYTES + MAX_TEXT_BYTES > MAX_BOARD_BYTES
        );
        assert_eq!(e[0].key, "k000");
        let StatusValue::Text(t) = &e[0].value else {
            panic!("k000 should be text: {:?}", e[0].value)
        };
        assert!(
            t.len() <= MAX_TEXT_BYTES && t.len() >= MAX_TEXT_BYTES - 1,
            "{}",
            t.len()
        );
        assert_eq!(e[MAX_ENTRIES - 1].key, format!("k{:03}", MAX_ENTRIES - 1));
    }

    #[test]
    fn display_quotes_texts_with_spaces() {
        assert_eq!(StatusValue::from("ok").to_string(), "ok");
        assert_eq!(
            StatusValue::from("503 busy").to_string(),
            "\"503 busy\"".to_owned()
        );
        assert_eq!(StatusValue::from(7u64).to_string(), "7");
    }
}
