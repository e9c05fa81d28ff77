//! Output files (recordings, snapshots, exports, the aggregator's CSV, the plotter's URL file):
//! created so that another local user cannot read them, redirect them, or make us write into a
//! file of theirs.
//!
//! - A new file is created with `O_EXCL` (a symlink planted at the path is never followed),
//!   mode [`FILE_MODE`] (0600: bus data is private, like the broker's socket; the umask can
//!   only narrow it, `chmod` shares a file).
//! - An existing path is refused unless the caller replaces (`--force`), and refused even then
//!   when it is not ours (its owner, by `lstat`: a file or a symlink another user planted) or
//!   is a directory.
//! - Replacing writes a new file next to it and renames it over the path: the old file (and
//!   whatever a symlink there pointed to) is never opened, written or truncated; a reader that
//!   had it open keeps the old contents. The rename happens at once, so that a file that is
//!   written for a long time (a recording) is where it is expected from the start.
//! - Appending (the aggregator's CSV) opens with `O_NOFOLLOW` and refuses a file not ours.

use std::fs::File;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use thiserror::Error;

/// The mode of every file snapbus writes.
pub const FILE_MODE: u32 = 0o600;

/// Why an output file was not opened.
#[derive(Debug, Error)]
pub enum OutputError {
    /// The path exists and replacing it was not asked for.
    #[error("{0} exists; choose another path, or pass --force to overwrite it")]
    Exists(PathBuf),
    /// The path is another user's file or symlink: never written, nor replaced.
    #[error(
        "{path} belongs to another user (uid {owner}); snapbus does not write or replace \
         another user's file (or a symlink they planted): remove it, or choose another path"
    )]
    NotOurs {
        /// The path.
        path: PathBuf,
        /// Its owner.
        owner: u32,
    },
    /// The path is a directory.
    #[error("{0} is a directory")]
    Directory(PathBuf),
    /// Creating, opening or renaming failed.
    #[error("creating {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl OutputError {
    /// The operating system's error, if that is what it is.
    pub fn io(&self) -> Option<&std::io::Error> {
        match self {
            OutputError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> OutputError + '_ {
    move |source| OutputError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Checks that `path` may be written: absent, or (with `replace`) a file or symlink of ours.
/// Returns whether it exists.
pub fn check(path: &Path, replace: bool) -> Result<bool, OutputError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io(path)(e)),
    };
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me {
        return Err(OutputError::NotOurs {
            path: path.to_owned(),
            owner: meta.uid(),
        });
    }
    if meta.is_dir() {
        return Err(OutputError::Directory(path.to_owned()));
    }
    if !replace {
        return Err(OutputError::Exists(path.to_owned()));
    }
    Ok(true)
}

/// Checks that the output directory `path` (csv, parquet) may be written into: absent, or a
/// directory of ours (not a symlink: another user could plant one). Returns whether it exists.
pub fn check_dir(path: &Path) -> Result<bool, OutputError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io(path)(e)),
    };
    if meta.uid() != rustix::process::geteuid().as_raw() {
        return Err(OutputError::NotOurs {
            path: path.to_owned(),
            owner: meta.uid(),
        });
    }
    if !meta.is_dir() {
        return Err(io(path)(std::io::Error::other(
            "it is not a directory (a symlink is not followed)",
        )));
    }
    Ok(true)
}

/// Creates `path` for writing, [`FILE_MODE`]; with `replace`, a file (or symlink) of ours there
/// is replaced by rename (see the module's documentation).
pub fn create(path: &Path, replace: bool) -> Result<File, OutputError> {
    if !check(path, replace)? {
        match new_file(path) {
            Ok(f) => return Ok(f),
            // Created meanwhile: replace it, if that is allowed and it is ours.
            Err(OutputError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::AlreadyExists =>
            {
                check(path, replace)?;
            }
            Err(e) => return Err(e),
        }
    }
    let tmp = temp_path(path);
    let file = new_file(&tmp)?;
    if let Err(e) = std::fs::rename(&tmp, path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(path)(e));
    }
    Ok(file)
}

/// Opens `path` for appending, creating it ([`FILE_MODE`]) if it is absent; never through a
/// symlink, never another user's file.
pub fn append(path: &Path) -> Result<File, OutputError> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .mode(FILE_MODE)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .map_err(|e| {
            // O_NOFOLLOW on a symlink: ELOOP.
            if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
                return match check(path, true) {
                    Err(owned) => owned,
                    Ok(_) => io(path)(std::io::Error::other(
                        "it is a symlink; snapbus does not write through one",
                    )),
                };
            }
            io(path)(e)
        })?;
    let owner = file.metadata().map_err(io(path))?.uid();
    if owner != rustix::process::geteuid().as_raw() {
        return Err(OutputError::NotOurs {
            path: path.to_owned(),
            owner,
        });
    }
    Ok(file)
}

/// A new file at `path`: `O_CREAT | O_EXCL` (which never follows a symlink), [`FILE_MODE`].
fn new_file(path: &Path) -> Result<File, OutputError> {
    std::fs::OpenOptions::new()
        .write(true)
        .read(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(path)
        .map_err(io(path))
}

/// `.NAME.snapbus-PID-N` next to `path`.
fn temp_path(path: &Path) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .map_or_else(|| "output".into(), |n| n.to_string_lossy().into_owned());
    path.with_file_name(format!(
        ".{name}.snapbus-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("snapbus-output-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("dir");
        d
    }

    #[test]
    fn append_never_follows_a_symlink_nor_writes_another_users_file() {
        let d = dir("append");
        let target = d.join("target.csv");
        std::fs::write(&target, "a,b\n").expect("write");
        let link = d.join("link.csv");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        let e = append(&link).expect_err("a symlink");
        assert!(e.to_string().contains("symlink"), "{e}");
        assert_eq!(std::fs::read_to_string(&target).expect("target"), "a,b\n");
        // Another user's file (the tests run as root, who may chown; CI does too).
        std::os::unix::fs::chown(&target, Some(65534), Some(65534)).expect("chown (root)");
        let e = append(&target).expect_err("theirs");
        assert!(
            matches!(e, OutputError::NotOurs { owner: 65534, .. }),
            "{e}"
        );
        // Ours: appended to, 0600 when new.
        let ours = d.join("ours.csv");
        std::io::Write::write_all(&mut append(&ours).expect("new"), b"x\n").expect("write");
        std::io::Write::write_all(&mut append(&ours).expect("again"), b"y\n").expect("write");
        assert_eq!(std::fs::read_to_string(&ours).expect("ours"), "x\ny\n");
        let mode = std::fs::metadata(&ours).expect("meta").mode();
        assert_eq!(mode & 0o777, FILE_MODE);
        let _ = std::fs::remove_dir_all(&d);
    }
}
