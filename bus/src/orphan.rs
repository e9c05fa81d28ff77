//! Children that die with their parent: [`die_with_parent`].
//!
//! A helper process the CLI starts for itself (the demo's `echo`, an interpreter check) must
//! not outlive it: after a `kill -9` of the parent nothing would stop it, and it would run on
//! for as long as its input lasts (or forever). Linux's `PR_SET_PDEATHSIG` asks the kernel to
//! signal the child when its parent dies; it is set in the child between `fork` and `exec`,
//! and the parent may have died before then, so the child then checks that its parent is still
//! the process that started it, and fails to start otherwise.
//!
//! Processes meant to outlive their starter (the broker `up` detaches, the consumers the broker
//! supervises) must not use it.

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

pub use rustix::process::Signal;
use rustix::process::{getpid, getppid, set_parent_process_death_signal};

/// Makes the child `cmd` starts receive `signal` when its parent dies.
///
/// The kernel sends it when the *thread* that spawned the child ends, so spawn from a thread
/// that lives as long as the child should (the main thread, typically). If the parent is already
/// gone when the child sets this up, the child does not run: `spawn` fails (or, the parent
/// being dead, nobody sees it).
pub fn die_with_parent(cmd: &mut Command, signal: Signal) -> &mut Command {
    let parent = getpid();
    // SAFETY: the hook runs in the child between `fork` and `exec`, where only
    // async-signal-safe operations are allowed: it makes two system calls (`prctl`, `getppid`)
    // through rustix, which allocate nothing and take no lock, and its errors are an OS error
    // code or an `ErrorKind`, neither of which allocates. It captures only a `Pid` and a
    // `Signal` (both `Copy`).
    unsafe {
        cmd.pre_exec(move || {
            set_parent_process_death_signal(Some(signal))?;
            // The parent may have died before the line above: then we were re-parented (to
            // init or a subreaper) and no signal will ever come.
            if getppid() != Some(parent) {
                return Err(io::Error::from(io::ErrorKind::NotFound));
            }
            Ok(())
        })
    }
}
