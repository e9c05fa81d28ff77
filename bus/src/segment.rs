//! Shared-memory segments: sealed memfds, mapped read-write by their creator and read-only by
//! everyone else.
//!
//! A memfd has no name in any filesystem: it is reachable only through a file descriptor
//! (inherited, passed over a Unix socket, or opened via `/proc/<pid>/fd/<n>` by the same user),
//! and the kernel frees it when the last descriptor and mapping are gone, so a crashed process
//! can never leak a segment. Its size is sealed (`F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`),
//! so a reader's mapping can never be truncated under it (no SIGBUS); [`Segment::open`] refuses
//! an fd that lacks those seals.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use memmap2::MmapOptions;
use rustix::fs::{MemfdFlags, SealFlags};
use thiserror::Error;

use crate::mem::ShmMem;

/// A segment could not be created or opened.
#[derive(Debug, Error)]
pub enum SegmentError {
    /// A system call failed.
    #[error("{op}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The fd is not sealed against shrinking and growing: a writer could truncate it and crash
    /// every reader.
    #[error("segment is not sealed against resizing (seals {seals:?}); refusing to map it")]
    NotSealed {
        /// The seals found.
        seals: SealFlags,
    },
    /// The segment's size is not usable.
    #[error("segment size {len} bytes is invalid: {why}")]
    BadSize {
        /// The size found.
        len: u64,
        /// Why it is refused.
        why: &'static str,
    },
}

fn io_err(op: &'static str) -> impl FnOnce(io::Error) -> SegmentError {
    move |source| SegmentError::Io { op, source }
}

/// A mapped shared-memory segment.
pub(crate) struct Segment {
    pub(crate) mem: ShmMem,
    file: File,
}

impl Segment {
    /// Creates a sealed memfd of `len` bytes (a multiple of the page size), maps it read-write
    /// and pre-faults it.
    pub(crate) fn create(name: &str, len: usize) -> Result<Segment, SegmentError> {
        if len == 0 || len % page_size() != 0 {
            return Err(SegmentError::BadSize {
                len: len as u64,
                why: "must be a non-zero multiple of the page size",
            });
        }
        let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
            .map_err(|e| io_err("memfd_create")(e.into()))?;
        rustix::fs::ftruncate(&fd, len as u64).map_err(|e| io_err("ftruncate")(e.into()))?;
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)
            .map_err(|e| io_err("fcntl(F_ADD_SEALS)")(e.into()))?;
        let file = File::from(fd);
        let map = MmapOptions::new()
            .len(len)
            .populate()
            .map_raw(&file)
            .map_err(io_err("mmap"))?;
        Ok(Segment {
            mem: ShmMem::new(map, true),
            file,
        })
    }

    /// Maps an existing segment read-only, after checking its seals and size.
    pub(crate) fn open(fd: OwnedFd) -> Result<Segment, SegmentError> {
        let file = checked(fd)?;
        let map = MmapOptions::new()
            .map_raw_read_only(&file)
            .map_err(io_err("mmap"))?;
        Ok(Segment {
            mem: ShmMem::new(map, false),
            file,
        })
    }

    /// Maps an existing segment read-write (for doorbell pages, which producers and consumers
    /// both write), after checking its seals and size.
    pub(crate) fn open_rw(fd: OwnedFd) -> Result<Segment, SegmentError> {
        let file = checked(fd)?;
        let map = MmapOptions::new().map_raw(&file).map_err(io_err("mmap"))?;
        Ok(Segment {
            mem: ShmMem::new(map, true),
            file,
        })
    }

    /// The segment's file descriptor (to pass to other processes).
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

/// The system page size.
pub(crate) fn page_size() -> usize {
    rustix::param::page_size()
}

/// A segment another process made, as a file, once it is sealed against resizing (no SIGBUS
/// from a shrink) and a non-zero multiple of the page size.
fn checked(fd: OwnedFd) -> Result<File, SegmentError> {
    let seals =
        rustix::fs::fcntl_get_seals(&fd).map_err(|e| io_err("fcntl(F_GET_SEALS)")(e.into()))?;
    if !seals.contains(SealFlags::SHRINK | SealFlags::GROW) {
        return Err(SegmentError::NotSealed { seals });
    }
    let file = File::from(fd);
    let len = file.metadata().map_err(io_err("fstat"))?.len();
    if len == 0 || len % page_size() as u64 != 0 || usize::try_from(len).is_err() {
        return Err(SegmentError::BadSize {
            len,
            why: "must be a non-zero multiple of the page size",
        });
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::{Segment, page_size};

    /// A segment's memory hands out the words `get` does, and nothing past the end (the
    /// check `mem`'s tests run on heap memory).
    #[test]
    fn shared_words_and_spans_are_the_words_get_gives_and_none_past_the_end() {
        let seg = Segment::create("mem-words", page_size()).expect("segment");
        crate::mem::tests::check_words(&seg.mem);
    }
}
