//! Schema-id globs: what a subscription matches.

use thiserror::Error;

/// A malformed schema-id glob.
#[derive(Debug, Error)]
#[error(
    "bad glob {0:?}: use schema-id characters (A-Z a-z 0-9 _ - .) with `*` (any run) and `?` \
     (one character), e.g. 'monty.env_interface.*'"
)]
pub struct GlobError(pub String);

/// A schema-id pattern: `*` matches any run of characters (dots included), `?` one.
#[derive(Debug, Clone)]
pub struct Glob {
    text: String,
    pattern: wildmatch::WildMatch,
}

impl Glob {
    /// Parses and validates a glob.
    pub fn new(text: &str) -> Result<Glob, GlobError> {
        let ok = !text.is_empty()
            && text.len() <= 256
            && text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-.*?".contains(&b));
        if !ok {
            return Err(GlobError(text.to_owned()));
        }
        Ok(Glob {
            text: text.to_owned(),
            pattern: wildmatch::WildMatch::new(text),
        })
    }

    /// Whether `schema_id` matches.
    pub fn matches(&self, schema_id: &str) -> bool {
        self.pattern.matches(schema_id)
    }

    /// The glob as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}
