//! The state file `broker.state`, and re-adopting what it names: the id counter, the bus
//! filter and the supervised consumers outlive a broker (a crash, `down --keep-consumers`).
//! Also the exit notes a supervised consumer leaves when no broker is there to hear its exit
//! code.

use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::process::{SUPERVISED_ENV, pidfd, proc_start_time};
use super::{Kept, Supervised};
use crate::broker::Broker;
use crate::control::{BusState, Conn, ConsumerState, End, PROTOCOL_VERSION, ToBroker};
use crate::runtime::BusDir;

/// Format version of the state file.
const STATE_FORMAT: u32 = 3;

/// The state file's content.
#[derive(Serialize, Deserialize)]
struct SavedState {
    format: u32,
    next_id: u64,
    /// The bus filter (`snapbus filter`): it outlives a broker crash and `down
    /// --keep-consumers`, not a plain `down`.
    filter: String,
    supervised: Vec<SavedSupervised>,
}

/// A supervised consumer in the state file.
#[derive(Serialize, Deserialize)]
struct SavedSupervised {
    kept: Kept,
    /// It was waiting for a restart (the next broker restarts it at once).
    respawn: bool,
}

/// The state file of the bus in `dir`.
pub(in crate::broker) fn state_path(dir: &BusDir) -> PathBuf {
    dir.path().join("broker.state")
}

/// Called by a supervised consumer just before it exits with `exit_code`: tells the broker
/// that started it (see [`SUPERVISED_ENV`]), so that a broker that re-adopted it knows whether
/// it failed. Does nothing in a process the broker did not start, or when no broker listens.
///
/// With no broker running, it leaves the word in a file of the bus directory
/// (`exit-<pid>`), which the next broker reads.
pub fn report_exit(exit_code: i32) {
    let Some(sock) = std::env::var_os(SUPERVISED_ENV) else {
        return;
    };
    let sock = PathBuf::from(sock);
    let said = Conn::connect(&sock).is_ok_and(|conn| {
        conn.send(
            &ToBroker::Exiting {
                version: PROTOCOL_VERSION,
                exit_code,
            },
            &[],
        )
        .is_ok()
    });
    if said {
        return;
    }
    let pid = std::process::id();
    if let (Some(dir), Some(start)) = (sock.parent(), proc_start_time(pid)) {
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(dir.join(format!("exit-{pid}")))
            .and_then(|mut f| {
                use std::io::Write;
                writeln!(f, "{start} {exit_code}")
            });
    }
}

/// The exit code process `pid` (started at `start_time`) left in `exit-<pid>` when no broker
/// was there to tell; the file is removed.
pub(in crate::broker) fn exit_note(dir: &BusDir, pid: u32, start_time: u64) -> Option<i32> {
    let path = dir.path().join(format!("exit-{pid}"));
    let text = std::fs::read_to_string(&path).ok()?;
    let _ = std::fs::remove_file(&path);
    let (start, code) = text.trim().split_once(' ')?;
    (start.parse::<u64>().ok()? == start_time)
        .then(|| code.parse().ok())
        .flatten()
}

impl Broker {
    /// Loads the state file an earlier broker of this bus left: the id counter, and the
    /// supervised consumers, re-adopting those still running.
    pub(in crate::broker) fn load_state(&mut self) {
        let path = state_path(&self.dir);
        let Ok(bytes) = std::fs::read(&path) else {
            return;
        };
        let saved: SavedState = match postcard::from_bytes::<SavedState>(&bytes) {
            Ok(s) if s.format == STATE_FORMAT => s,
            _ => {
                crate::say!(
                    "snapbus broker: {} is unreadable; starting without it (consumers \
                     supervised by the earlier broker are not re-adopted)",
                    path.display()
                );
                return;
            }
        };
        self.next_id = self.next_id.max(saved.next_id);
        match crate::level::check_filter_size(&saved.filter) {
            Ok(()) => self.filter = saved.filter,
            Err(why) => {
                crate::say!(
                    "snapbus broker: the bus filter stored in {} is dropped ({why}); every \
                     producer uses its own filter",
                    path.display()
                );
                self.dirty = true;
            }
        }
        let now = Instant::now();
        for v in saved.supervised {
            let mut s = Supervised::new(v.kept);
            if v.respawn {
                s.respawn_at = Some(now);
            } else if s.running() {
                // The pidfd first, then the start time: if it matches, the pidfd is of the
                // process we started (a pid reused later is never signalled through it).
                s.pidfd = pidfd(s.kept.pid)
                    .filter(|_| proc_start_time(s.kept.pid) == Some(s.kept.start_time));
                if s.pidfd.is_some() {
                    crate::say!(
                        "snapbus broker: re-adopted {} {} (pid {})",
                        s.kept.kind,
                        s.kept.id,
                        s.kept.pid
                    );
                } else {
                    let code = exit_note(&self.dir, s.kept.pid, s.kept.start_time);
                    let how = match code {
                        Some(code) => End::ExitedUnwatched(code),
                        None => End::EndedUnwatched,
                    };
                    crate::say!(
                        "snapbus broker: {} {} (pid {}) {how}",
                        s.kept.kind,
                        s.kept.id,
                        s.kept.pid
                    );
                    self.ended(&mut s, how, code, now);
                }
            }
            self.supervised.push(s);
        }
        // Notes of processes that are not ours (any more). A re-adopted consumer may write
        // its note before this broker's socket is up: those stay, for when it is reaped.
        let ours: Vec<String> = self
            .supervised
            .iter()
            .filter(|s| s.running())
            .map(|s| format!("exit-{}", s.kept.pid))
            .collect();
        if let Ok(entries) = std::fs::read_dir(self.dir.path()) {
            for e in entries.filter_map(Result::ok) {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with("exit-") && !ours.contains(&name) {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        self.dirty = true;
    }

    /// Before `ls` shows `state`: the counters of each connected supervised consumer are
    /// kept in the state file (saved now, if they changed since the last `ls`), so that a
    /// broker that replaces this one after a crash shows no less for it until it rejoins
    /// (counters in `ls` never go backwards; a consumer that rejoins says its own).
    pub(in crate::broker) fn keep_shown_counters(&mut self, state: &BusState) {
        let counters = |c: &ConsumerState| (c.delivered, c.lost, c.damaged, c.garbage);
        let mut changed = false;
        for row in state.consumers.iter().filter(|c| c.supervised) {
            if !self.consumers.values().any(|c| c.id == row.id) {
                continue;
            }
            if let Some(s) = self.supervised.iter_mut().find(|s| s.kept.id == row.id)
                && s.kept.last.as_ref().map(counters) != Some(counters(row))
            {
                s.kept.last = Some(row.clone());
                changed = true;
            }
        }
        if changed {
            self.save_state();
        }
    }

    /// Writes the state file (write a temporary file, then rename over the old one).
    pub(in crate::broker) fn save_state(&mut self) {
        self.dirty = false;
        let saved = SavedState {
            format: STATE_FORMAT,
            next_id: self.next_id,
            filter: self.filter.clone(),
            supervised: self
                .supervised
                .iter()
                .map(|s| SavedSupervised {
                    kept: s.kept.clone(),
                    respawn: s.respawn_at.is_some(),
                })
                .collect(),
        };
        let path = state_path(&self.dir);
        let tmp = path.with_extension("state.tmp");
        let written = postcard::to_allocvec(&saved)
            .map_err(std::io::Error::other)
            .and_then(|bytes| {
                use std::io::Write;
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .write(true)
                    .truncate(true)
                    .mode(0o600)
                    .open(&tmp)?;
                f.write_all(&bytes)?;
                std::fs::rename(&tmp, &path)
            });
        if let Err(e) = written {
            crate::say!("snapbus broker: writing {}: {e}", path.display());
        }
    }
}
