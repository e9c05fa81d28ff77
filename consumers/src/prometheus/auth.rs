//! Who may scrape: a bearer token, kept in a `0600` file.
//!
//! Every local user can reach 127.0.0.1, and the bus is private to its user, so `/metrics`
//! (like the plotter) answers only requests that carry the token: `Authorization: Bearer
//! <token>`, what Prometheus sends with `authorization: {credentials_file: FILE}` in its scrape
//! config. Without it the answer is 401, with a wrong one 403.
//!
//! The token lives in a file ([`token_path`]: `prometheus.token` in the bus's directory by
//! default), made on first use with 128 random bits and reused after, so that every exporter of
//! the bus, and the next one after a restart, takes the same token and a scrape config written
//! once keeps working. A file elsewhere (`--token-file`, e.g. one Prometheus's user may read) is
//! taken as it is if it is ours, a regular file and neither writable by others nor readable by
//! every user.

use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
#[cfg(test)]
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use snapbus_bus::runtime::{BusDir, not_ours_or_open};
use thiserror::Error;

/// The default token file's name in the bus's directory.
pub const TOKEN_FILE: &str = "prometheus.token";
/// The shortest token taken from a file (16 characters).
pub const MIN_TOKEN_LEN: usize = 16;

/// Why a token file cannot be used.
#[derive(Debug, Error)]
pub enum TokenError {
    /// A filesystem operation failed.
    #[error("{op} the token file {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The file is not safe to take a secret from, or holds no usable token.
    #[error("the token file {path} cannot be used: {why}")]
    Unusable {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
}

/// The token file: `file` if given, else `prometheus.token` in the bus's directory.
pub fn token_path(dir: &BusDir, file: Option<&Path>) -> PathBuf {
    file.map_or_else(|| dir.path().join(TOKEN_FILE), Path::to_owned)
}

/// The token in `path`, made first (128 random bits, hex, in a new `0600` file) if there is no
/// such file.
pub fn load_or_create(path: &Path) -> Result<String, TokenError> {
    let io = |op: &'static str| {
        let path = path.to_owned();
        move |source| TokenError::Io { op, path, source }
    };
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path);
    match created {
        Ok(mut f) => {
            let token = new_token().map_err(io("making"))?;
            f.write_all(format!("{token}\n").as_bytes())
                .and_then(|()| f.sync_all())
                .map_err(io("writing"))?;
            return Ok(token);
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io("creating")(e)),
    }
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)
        .map_err(io("opening"))?;
    let meta = f.metadata().map_err(io("reading"))?;
    check_owner_and_mode(path, &meta)?;
    let mut text = String::new();
    (&mut f)
        .take(4096)
        .read_to_string(&mut text)
        .map_err(io("reading"))?;
    let token = text.trim();
    let unusable = |why: &str| TokenError::Unusable {
        path: path.to_owned(),
        why: why.to_owned(),
    };
    if token.len() < MIN_TOKEN_LEN {
        return Err(unusable("it holds fewer than 16 characters"));
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(unusable(
            "it holds characters other than printable ASCII (spaces, control characters)",
        ));
    }
    Ok(token.to_owned())
}

/// A token file must be a regular file of ours that others can neither change nor all read.
fn check_owner_and_mode(path: &Path, meta: &std::fs::Metadata) -> Result<(), TokenError> {
    let why = if meta.is_file() {
        not_ours_or_open(
            meta,
            0o027,
            "lets others read or change it (want 600, or 640 for a group)",
        )
    } else {
        Some("not a regular file".into())
    };
    let path = path.to_owned();
    why.map_or(Ok(()), |why| Err(TokenError::Unusable { path, why }))
}

/// 128 random bits, hex.
fn new_token() -> io::Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether the request head's `Authorization` value `header` carries `token` as a bearer
/// token (compared in time independent of where they differ).
pub(super) fn bearer_matches(header: &str, token: &str) -> bool {
    let Some((scheme, given)) = header.trim().split_once(' ') else {
        return false;
    };
    if !scheme.eq_ignore_ascii_case("bearer") {
        return false;
    }
    let (a, b) = (given.trim().as_bytes(), token.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_headers_are_matched_exactly() {
        let t = "0123456789abcdef0123456789abcdef";
        assert!(bearer_matches(&format!("Bearer {t}"), t));
        assert!(bearer_matches(&format!("bearer  {t} "), t));
        assert!(!bearer_matches(&format!("Basic {t}"), t));
        assert!(!bearer_matches(&format!("Bearer {t}x"), t));
        assert!(!bearer_matches("Bearer ", t));
        assert!(!bearer_matches(t, t));
    }

    #[test]
    fn token_files_are_made_private_reused_and_checked() {
        let dir = std::env::temp_dir().join(format!("snapbus-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("t");
        let _ = std::fs::remove_file(&path);
        let made = load_or_create(&path).expect("made");
        assert_eq!(made.len(), 32);
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(load_or_create(&path).expect("reused"), made);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let e = load_or_create(&path).expect_err("world-readable");
        assert!(e.to_string().contains("mode 644"), "{e}");
        std::fs::write(&path, "short\n").expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).expect("chmod");
        let e = load_or_create(&path).expect_err("short");
        assert!(e.to_string().contains("fewer than 16"), "{e}");
        let link = dir.join("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&path, &link).expect("symlink");
        assert!(load_or_create(&link).is_err(), "a symlink is followed");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
