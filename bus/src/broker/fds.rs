//! The broker's file descriptors: each producer costs it about four (its connection, lane,
//! catalog and pidfd), so the common soft limit of 1,024 would refuse producers past ~250.
//! The broker raises its soft limit to the hard one at start, and when a producer's fds still
//! do not arrive (the kernel drops fds a full table cannot take), the refusal says it is the
//! broker's limit, not the producer's fault.

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Raises the soft open-file limit to the hard one (said in the log when it changes);
/// returns the limit now in force (`None`: unlimited or unknown).
pub(super) fn raise_limit() -> Option<u64> {
    let Rlimit { current, maximum } = getrlimit(Resource::Nofile);
    if current.is_some() && current != maximum {
        let raised = Rlimit {
            current: maximum,
            maximum,
        };
        match setrlimit(Resource::Nofile, raised) {
            Ok(()) => crate::say!(
                "snapbus broker: open-file limit raised from {} to {}",
                show(current),
                show(maximum)
            ),
            Err(e) => crate::say!(
                "snapbus broker: could not raise the open-file limit from {} ({e})",
                show(current)
            ),
        }
    }
    getrlimit(Resource::Nofile).current
}

fn show(limit: Option<u64>) -> String {
    limit.map_or_else(|| "unlimited".to_owned(), |n| n.to_string())
}

/// Why a hello came with `n` fds instead of 2: the broker's own limit when its table is
/// (nearly) full, else the producer's message.
pub(super) fn missing_fds(n: usize) -> String {
    let limit = getrlimit(Resource::Nofile);
    // Reading the table takes an fd itself: failing for want of one says it is full.
    let full = match std::fs::read_dir("/proc/self/fd") {
        Ok(d) => limit.current.is_some_and(|l| d.count() as u64 + 8 >= l),
        Err(e) => e.raw_os_error() == Some(rustix::io::Errno::MFILE.raw_os_error()),
    };
    if full {
        format!(
            "the broker is out of file descriptors (its limit is {}; each producer takes about \
             4), so the lane's fds were dropped: raise the open-file limit (`ulimit -n`, hard \
             limit {}) of `snapbus up`; the producer is not at fault",
            show(limit.current),
            show(limit.maximum)
        )
    } else {
        format!("expected 2 fds (lane, catalog), got {n}")
    }
}

/// A producer the broker refused, for `ls`.
pub(super) struct Refused {
    pub(super) name: String,
    pub(super) pid: u32,
    pub(super) why: String,
    pub(super) times: u64,
}

/// How many refused producers `ls` shows (the most recent).
const REFUSED_KEPT: usize = 16;

/// Notes that producer `name` (pid `pid`) was refused for `why`: once per producer, counted.
pub(super) fn note_refused(
    refused: &mut std::collections::VecDeque<Refused>,
    name: &str,
    pid: u32,
    why: &str,
) {
    if let Some(i) = refused.iter().position(|r| r.pid == pid && r.name == name) {
        if let Some(mut r) = refused.remove(i) {
            r.times += 1;
            r.why = why.to_owned();
            refused.push_back(r);
        }
        return;
    }
    if refused.len() == REFUSED_KEPT {
        refused.pop_front();
    }
    refused.push_back(Refused {
        name: name.to_owned(),
        pid,
        why: why.to_owned(),
        times: 1,
    });
}
