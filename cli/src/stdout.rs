//! Lines on standard output that never panic (`println!` does on a closed stdout: `snapbus
//! attach … | tail -0`). A closed stdout is an `Err` the verb returns: `main` exits quietly
//! with 0 when a reader stopped reading a stream (`snapbus echo | head -1`), and says so with 1
//! when what was lost is what the verb was asked for ([`Lost`]: an attached consumer's id or
//! URL). A leaf the verbs share.

use std::io::Write;

/// Writes `text` and a newline to stdout, flushed; a closed stdout is an `Err`.
pub(crate) fn line(text: impl std::fmt::Display) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")?;
    out.flush()
}

/// Writes `text` as [`line()`] does; a closed stdout loses `what` ([`Lost`]).
pub(crate) fn vital(text: impl std::fmt::Display, what: &str) -> anyhow::Result<()> {
    line(text).map_err(|e| anyhow::Error::new(e).context(Lost(what.to_owned())))
}

/// What a closed stdout lost (an error context `main` looks for).
#[derive(Debug)]
pub(crate) struct Lost(pub(crate) String);

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stdout is closed: {} was not printed", self.0)
    }
}
