//! Consumer processes: starting one, its pidfd, whether it has exited, its start time (against
//! pid reuse), how it ended.

use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use rustix::event::{PollFd, PollFlags};

use crate::control::End;
use crate::runtime::BusDir;

/// Set in a supervised consumer's environment: the broker's socket, where
/// [`report_exit`](crate::broker::report_exit) says the exit code.
pub const SUPERVISED_ENV: &str = "SNAPBUS_SUPERVISED_BY";

/// Starts `exe args` in `cwd`, its output appended to `log`, in its own process group (a Ctrl-C
/// meant for the broker's terminal is not its), with `SNAPBUS_RESTART` set to how many times
/// it was restarted and [`SUPERVISED_ENV`] to the broker's socket.
pub(super) fn spawn_consumer(
    exe: &Path,
    args: &[String],
    cwd: &str,
    log: &Path,
    restart: u32,
    dir: &BusDir,
) -> Result<(Child, Option<OwnedFd>), String> {
    use std::os::unix::process::CommandExt;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(log)
        .map_err(|e| format!("creating {}: {e}", log.display()))?;
    if restart > 0 {
        use std::io::Write;
        let _ = writeln!(&file, "snapbus broker: restart {restart} of this consumer");
    }
    let out = file
        .try_clone()
        .map_err(|e| format!("creating {}: {e}", log.display()))?;
    let child = Command::new(exe)
        .args(args)
        .current_dir(cwd)
        .env("SNAPBUS_RESTART", restart.to_string())
        .env(SUPERVISED_ENV, dir.socket_path())
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(file)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("starting {} {args:?}: {e}", exe.display()))?;
    let pidfd = pidfd(child.id());
    Ok((child, pidfd))
}

/// A pidfd of process `pid`, if it is running.
pub(super) fn pidfd(pid: u32) -> Option<OwnedFd> {
    rustix::process::Pid::from_raw(pid as i32)
        .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok())
}

/// Whether the process of `fd` has exited (its pidfd is readable).
pub(in crate::broker) fn has_exited(fd: &OwnedFd) -> bool {
    let mut fds = [PollFd::new(fd, PollFlags::IN)];
    let zero = rustix::time::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    rustix::event::poll(&mut fds, Some(&zero)).is_ok_and(|n| n > 0)
}

/// The start time of process `pid` (clock ticks after boot, field 22 of `/proc/PID/stat`);
/// `None` if it is not running (gone, or a zombie nobody has reaped yet).
pub(super) fn proc_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold anything: count from the last
    // ')'; the field after it is field 3, the state.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    if matches!(fields.next(), Some("Z" | "X" | "x")) {
        return None;
    }
    fields.nth(22 - 4)?.parse().ok()
}

/// `exited 0`, `killed by signal 9`.
pub(super) fn exit_end(status: std::process::ExitStatus) -> End {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => End::Exited(code),
        (None, Some(sig)) => End::Signalled(sig),
        _ => End::Ended,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_of_this_process_is_read_and_stable() {
        let t = proc_start_time(std::process::id()).expect("start time");
        assert_eq!(proc_start_time(std::process::id()), Some(t));
    }
}
