//! Where a bus lives: validated bus names and the per-user runtime directory that holds the
//! broker's socket and lock file.
//!
//! The directory is `$SNAPBUS_RUNTIME_DIR/<bus>` if that variable is set (tests use it for
//! isolation). Else it is `<root>/<bus>` under the first of `$XDG_RUNTIME_DIR/snapbus`,
//! `/tmp/snapbus-<uid>` and `$HOME/.snapbus/run` that already holds the bus's directory, or
//! else the first that does not exist yet or is ours and private: a root another user owns
//! (they can pre-create `/tmp/snapbus-<uid>`), or one open to others, is passed over, and `up`
//! says so. Every directory snapbus creates is `0700`, and an existing one is used only if this
//! user owns it and nobody else can enter it, so another user can neither attach nor plant a
//! socket.

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use thiserror::Error;

/// The environment variable naming the default bus.
pub const BUS_ENV: &str = "SNAPBUS_BUS";
/// The environment variable overriding the runtime root directory.
pub const RUNTIME_DIR_ENV: &str = "SNAPBUS_RUNTIME_DIR";
/// The bus used when neither `--bus` nor `$SNAPBUS_BUS` names one.
pub const DEFAULT_BUS: &str = "default";
/// The exit code of a consumer that failed for a reason a restart cannot fix (a full disk,
/// an unwritable output path, a bad argument): the broker does not restart it.
pub const EXIT_NO_RESTART: i32 = 78;

/// Why a bus name or its runtime directory is refused.
#[derive(Debug, Error)]
pub enum RuntimeError {
    /// The bus name has characters or a length we do not accept.
    #[error(
        "invalid bus name {0:?}: use 1 to 64 characters from A-Z a-z 0-9 _ - . (not starting \
         with '.' or '-')"
    )]
    BadName(String),
    /// The runtime directory exists but is not safe to use.
    #[error("runtime directory {path} is not safe to use: {why}")]
    Unsafe {
        /// The directory.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// A filesystem operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// On what.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The socket path is longer than a Unix socket address allows.
    #[error(
        "socket path {0} is too long for a Unix socket (at most 107 bytes); set {RUNTIME_DIR_ENV} to a shorter directory"
    )]
    PathTooLong(PathBuf),
}

/// A validated bus name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BusName(String);

impl BusName {
    /// Validates `name`.
    pub fn new(name: &str) -> Result<BusName, RuntimeError> {
        let ok = !name.is_empty()
            && name.len() <= 64
            && !name.starts_with('.')
            // A leading '-' would read as an option on the command lines of the broker and
            // of the consumers it starts.
            && !name.starts_with('-')
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
        if ok {
            Ok(BusName(name.to_owned()))
        } else {
            Err(RuntimeError::BadName(name.to_owned()))
        }
    }

    /// `name` if given, else `$SNAPBUS_BUS`, else `default`.
    pub fn resolve(name: Option<&str>) -> Result<BusName, RuntimeError> {
        match name {
            Some(n) => BusName::new(n),
            None => match std::env::var(BUS_ENV) {
                Ok(n) if !n.is_empty() => BusName::new(&n),
                _ => BusName::new(DEFAULT_BUS),
            },
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for BusName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The runtime directory of one bus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BusDir {
    name: BusName,
    dir: PathBuf,
    /// The directories [`BusDir::create`] makes, outermost first (`dir` last).
    make: Vec<PathBuf>,
    /// Why earlier candidate roots were passed over.
    note: Option<String>,
}

fn io_err(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> RuntimeError {
    let path = path.to_owned();
    move |source| RuntimeError::Io { op, path, source }
}

/// A place bus directories may live, in the order tried.
struct Candidate {
    /// The root; a bus's directory is `root/<bus>`.
    root: PathBuf,
    /// The directories to create for it, outermost first (the root last).
    make: Vec<PathBuf>,
}

impl Candidate {
    fn at(root: PathBuf) -> Candidate {
        Candidate {
            make: vec![root.clone()],
            root,
        }
    }
}

/// The places bus directories of this user may live, in order: `$SNAPBUS_RUNTIME_DIR` alone if
/// set; else `$XDG_RUNTIME_DIR/snapbus` (if that directory exists), `/tmp/snapbus-<uid>` and
/// `$HOME/.snapbus/run`. The last is the fallback another user cannot pre-create (they can
/// squat `/tmp/snapbus-<uid>` with a directory of their own).
fn candidates() -> Vec<Candidate> {
    if let Some(dir) = std::env::var_os(RUNTIME_DIR_ENV).filter(|d| !d.is_empty()) {
        return vec![Candidate::at(PathBuf::from(dir))];
    }
    let mut out = Vec::new();
    if let Some(dir) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        if dir.is_dir() {
            out.push(Candidate::at(dir.join("snapbus")));
        }
    }
    let uid = rustix::process::getuid().as_raw();
    out.push(Candidate::at(
        std::env::temp_dir().join(format!("snapbus-{uid}")),
    ));
    if let Some(home) = std::env::var_os("HOME").map(PathBuf::from) {
        if home.is_absolute() && home.is_dir() {
            let base = home.join(".snapbus");
            let root = base.join("run");
            out.push(Candidate {
                make: vec![base, root.clone()],
                root,
            });
        }
    }
    out
}

/// Picks where bus `name` lives: the first candidate that already holds its directory, else
/// the first one that does not exist yet or is ours and private. Candidates that exist but
/// are not safe (another user's, or open to others) are passed over; `note` says which and why.
fn choose(name: &BusName) -> (Candidate, Option<String>) {
    let mut all = candidates();
    let mut passed = Vec::new();
    // (index, whether it holds the bus's directory) of each usable candidate.
    let mut usable = Vec::new();
    for (i, c) in all.iter().enumerate() {
        match std::fs::symlink_metadata(&c.root) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => usable.push((i, false)),
            _ => match check_private(&c.root) {
                Ok(()) => usable.push((i, c.root.join(name.as_str()).is_dir())),
                Err(e) => passed.push(e.to_string()),
            },
        }
    }
    let pick = usable
        .iter()
        .find(|(_, has_bus)| *has_bus)
        .or_else(|| usable.first())
        .map(|(i, _)| *i);
    match pick {
        Some(i) => {
            let note = (!passed.is_empty()).then(|| passed.join("; "));
            (all.swap_remove(i), note)
        }
        // None usable: the first, so that creating it says what is wrong with it.
        None => (all.swap_remove(0), None),
    }
}

impl BusDir {
    /// The directory of bus `name` (not created): see `candidates` and `choose`. A
    /// producer, a consumer and `snapbus up` pick the same one.
    pub fn locate(name: &BusName) -> BusDir {
        let (c, note) = choose(name);
        let dir = c.root.join(name.as_str());
        let mut make = c.make;
        make.push(dir.clone());
        BusDir {
            name: name.clone(),
            dir,
            make,
            note,
        }
    }

    /// The directory of bus `name` under `root` instead of the default root.
    pub fn locate_in(root: &Path, name: &BusName) -> BusDir {
        let dir = root.join(name.as_str());
        BusDir {
            name: name.clone(),
            make: vec![root.to_owned(), dir.clone()],
            dir,
            note: None,
        }
    }

    /// Why runtime directories tried before this one were passed over (another user owns
    /// `/tmp/snapbus-<uid>`, say), if any were.
    pub fn passed_over(&self) -> Option<&str> {
        self.note.as_deref()
    }

    /// The bus's name.
    pub fn name(&self) -> &BusName {
        &self.name
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The broker's control socket.
    pub fn socket_path(&self) -> PathBuf {
        self.dir.join("broker.sock")
    }

    /// The lock file the running broker holds.
    pub fn lock_path(&self) -> PathBuf {
        self.dir.join("broker.lock")
    }

    /// The broker's log file (when it runs detached).
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("broker.log")
    }

    /// Creates the directory (and its root) `0700`, or checks that the existing ones are
    /// ours and private. Says on stderr if earlier candidate roots were passed over.
    pub fn create(&self) -> Result<(), RuntimeError> {
        if let Some(note) = &self.note {
            crate::say!(
                "snapbus: {note}; using {} instead",
                self.dir.parent().unwrap_or(Path::new("/")).display()
            );
        }
        for dir in &self.make {
            match std::fs::DirBuilder::new().mode(0o700).create(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io_err("create directory", dir)(e)),
            }
            check_private(dir)?;
        }
        let sock = self.socket_path();
        if sock.as_os_str().len() > 107 {
            return Err(RuntimeError::PathTooLong(sock));
        }
        Ok(())
    }
}

/// Checks that `dir` is a real directory owned by this user with no group/other access.
fn check_private(dir: &Path) -> Result<(), RuntimeError> {
    let meta = std::fs::symlink_metadata(dir).map_err(io_err("stat", dir))?;
    let why = if meta.is_dir() {
        not_ours_or_open(&meta, 0o077, "lets other users in (want 700)")
    } else {
        Some("not a directory (or a symbolic link)".into())
    };
    let path = dir.to_owned();
    why.map_or(Ok(()), |why| Err(RuntimeError::Unsafe { path, why }))
}

/// Why a file of `meta` is not safe to trust: owned by another user, or with any of the mode
/// bits `open` set (`mode … {what}`); `None` if it is ours and closed so.
pub fn not_ours_or_open(meta: &std::fs::Metadata, open: u32, what: &str) -> Option<String> {
    let uid = rustix::process::getuid().as_raw();
    if meta.uid() != uid {
        return Some(format!("owned by uid {}, not by us ({uid})", meta.uid()));
    }
    let mode = meta.permissions().mode() & 0o777;
    (mode & open != 0).then(|| format!("mode {mode:o} {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_names_are_validated() {
        for ok in ["default", "exp-1", "a.b_c", "X"] {
            assert!(BusName::new(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            ".hidden",
            "-x",
            "--help",
            "-",
            "a/b",
            "../x",
            "a b",
            &"x".repeat(65),
        ] {
            assert!(BusName::new(bad).is_err(), "{bad}");
        }
    }
}
