//! A `SOCK_SEQPACKET` Unix socket carrying one postcard message per packet, with fds.
//!
//! A message larger than [`MAX_INLINE`] (`ls` on a bus of thousands of producers or schemas)
//! travels in a memfd instead: the packet is then [`SPILL_TAG`] and the message's length, and
//! carries the memfd as its last fd. The sender never blocks on it (one small packet, however
//! large the message), and the receiver reads at most [`MAX_SPILLED`] bytes from it.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use rustix::event::{PollFd, PollFlags};
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketAddrUnix, SocketFlags, SocketType,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use thiserror::Error;

/// Largest packet (bytes).
const MAX_MESSAGE: usize = 192 << 10;
/// Messages larger than this travel in a memfd (see the module docs).
const MAX_INLINE: usize = 64 << 10;
/// Largest message a memfd may carry: far beyond any realistic `ls` (2,000 producers and
/// 5,000 schemas take about 2 MB), small enough that a garbage length costs no memory.
pub(crate) const MAX_SPILLED: usize = 64 << 20;
/// First bytes of a packet whose message is in its last fd, followed by the message's length
/// (u64, little-endian). No message starts with them: postcard writes the enum variant index
/// first, as a varint, and `0xff` would begin an index above 127.
const SPILL_TAG: [u8; 4] = [0xff, b's', b'p', b'l'];
/// Most fds one message carries.
const MAX_FDS: usize = 4;

/// Why a control-socket operation failed.
#[derive(Debug, Error)]
pub enum ControlError {
    /// A system call failed.
    #[error("{op}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// A message did not decode (a peer of another version, or garbage).
    #[error("malformed control message: {0}")]
    Decode(#[from] postcard::Error),
    /// A message was larger than the limit.
    #[error("control message of {0} bytes is larger than the limit ({MAX_SPILLED})")]
    TooLarge(usize),
    /// A message said to be in a memfd was not (no fd, or fewer bytes than said).
    #[error("control message of {0} bytes in a memfd could not be read")]
    BadSpill(usize),
    /// The peer closed the connection.
    #[error("the connection was closed")]
    Closed,
    /// No reply within the time allowed.
    #[error("no reply within {0:?}")]
    Timeout(Duration),
}

fn io_err(op: &'static str) -> impl FnOnce(rustix::io::Errno) -> ControlError {
    move |e| ControlError::Io {
        op,
        source: e.into(),
    }
}

/// One end of a control connection.
#[derive(Debug)]
pub(crate) struct Conn {
    fd: OwnedFd,
    /// Receive buffer: empty until a message arrives, then as large as the largest message
    /// received (at most [`MAX_MESSAGE`]), so an idle connection costs no buffer.
    buf: Vec<u8>,
}

impl Conn {
    /// Connects to the socket at `path`.
    pub(crate) fn connect(path: &Path) -> Result<Conn, ControlError> {
        let fd = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .map_err(io_err("socket"))?;
        let addr = SocketAddrUnix::new(path).map_err(io_err("socket address"))?;
        rustix::net::connect(&fd, &addr).map_err(io_err("connect"))?;
        Ok(Conn::from_fd(fd))
    }

    /// A connected pair (`socketpair`), close-on-exec: a process and the children it forks.
    pub(crate) fn pair() -> Result<(Conn, Conn), ControlError> {
        let (a, b) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .map_err(io_err("socketpair"))?;
        Ok((Conn::from_fd(a), Conn::from_fd(b)))
    }

    fn from_fd(fd: OwnedFd) -> Conn {
        Conn {
            fd,
            buf: Vec::new(),
        }
    }

    /// The socket.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The peer's pid (`SO_PEERCRED`).
    pub(crate) fn peer_pid(&self) -> Option<u32> {
        rustix::net::sockopt::socket_peercred(&self.fd)
            .ok()
            .map(|c| c.pid.as_raw_nonzero().get() as u32)
    }

    /// Sends `msg` with `fds`. Never blocks: a peer that does not read its messages gets
    /// `Io` (`EAGAIN`) and should be dropped.
    pub(crate) fn send<T: Serialize>(
        &self,
        msg: &T,
        fds: &[BorrowedFd<'_>],
    ) -> Result<(), ControlError> {
        let bytes = postcard::to_allocvec(msg)?;
        if bytes.len() > MAX_INLINE {
            return self.send_spilled(&bytes, fds);
        }
        self.send_packet(&bytes, fds)
    }

    /// Sends `bytes` in a memfd, with `fds` (see the module docs).
    fn send_spilled(&self, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> Result<(), ControlError> {
        if bytes.len() > MAX_SPILLED || fds.len() >= MAX_FDS {
            return Err(ControlError::TooLarge(bytes.len()));
        }
        let memfd = rustix::fs::memfd_create("snapbus-message", rustix::fs::MemfdFlags::CLOEXEC)
            .map_err(io_err("memfd_create"))?;
        let mut file = std::fs::File::from(memfd);
        std::io::Write::write_all(&mut file, bytes).map_err(|source| ControlError::Io {
            op: "writing a message to its memfd",
            source,
        })?;
        let mut packet = SPILL_TAG.to_vec();
        packet.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        let mut all: Vec<BorrowedFd<'_>> = fds.to_vec();
        all.push(file.as_fd());
        self.send_packet(&packet, &all)
    }

    /// Sends one packet of `bytes` with `fds`.
    fn send_packet(&self, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> Result<(), ControlError> {
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !fds.is_empty() {
            let pushed = control.push(SendAncillaryMessage::ScmRights(
                &fds[..fds.len().min(MAX_FDS)],
            ));
            debug_assert!(pushed);
        }
        let iov = [io::IoSlice::new(bytes)];
        rustix::net::sendmsg(
            &self.fd,
            &iov,
            &mut control,
            SendFlags::DONTWAIT | SendFlags::NOSIGNAL,
        )
        .map_err(io_err("sendmsg"))?;
        Ok(())
    }

    /// Receives the next message, waiting up to `timeout` (`None`: forever). `Ok(None)`: the
    /// timeout passed with nothing to read. `Err(Closed)`: the peer is gone.
    pub(crate) fn recv<T: DeserializeOwned>(
        &mut self,
        timeout: Option<Duration>,
    ) -> Result<Option<(T, Vec<OwnedFd>)>, ControlError> {
        if !self.wait_readable(timeout)? {
            return Ok(None);
        }
        self.try_recv()
    }

    /// Receives a message if one is waiting (never blocks).
    pub(crate) fn try_recv<T: DeserializeOwned>(
        &mut self,
    ) -> Result<Option<(T, Vec<OwnedFd>)>, ControlError> {
        // The next packet's length first (`MSG_PEEK | MSG_TRUNC` returns a datagram's real
        // length and leaves it, with its fds, queued), so the buffer grows only to what arrives.
        let mut none = [io::IoSliceMut::new(&mut [])];
        let mut no_control = RecvAncillaryBuffer::new(&mut []);
        let len = match rustix::net::recvmsg(
            &self.fd,
            &mut none,
            &mut no_control,
            RecvFlags::DONTWAIT | RecvFlags::PEEK | RecvFlags::TRUNC,
        ) {
            Ok(got) => got.bytes,
            Err(rustix::io::Errno::AGAIN) => return Ok(None),
            Err(rustix::io::Errno::CONNRESET) => return Err(ControlError::Closed),
            Err(e) => return Err(io_err("recvmsg")(e)),
        };
        let want = len.clamp(1, MAX_MESSAGE);
        if self.buf.len() < want {
            self.buf.resize(want, 0);
        }
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let mut iov = [io::IoSliceMut::new(&mut self.buf)];
        let got = match rustix::net::recvmsg(
            &self.fd,
            &mut iov,
            &mut control,
            RecvFlags::DONTWAIT | RecvFlags::CMSG_CLOEXEC,
        ) {
            Ok(got) => got,
            Err(rustix::io::Errno::AGAIN) => return Ok(None),
            Err(rustix::io::Errno::CONNRESET) => return Err(ControlError::Closed),
            Err(e) => return Err(io_err("recvmsg")(e)),
        };
        let mut fds = Vec::new();
        for m in control.drain() {
            if let RecvAncillaryMessage::ScmRights(rights) = m {
                fds.extend(rights);
            }
        }
        if got.bytes == 0 {
            return Err(ControlError::Closed);
        }
        if got.flags.contains(ReturnFlags::TRUNC) {
            return Err(ControlError::TooLarge(got.bytes));
        }
        let packet = &self.buf[..got.bytes];
        if packet.len() == SPILL_TAG.len() + 8 && packet.starts_with(&SPILL_TAG) {
            let mut len = [0u8; 8];
            len.copy_from_slice(&packet[SPILL_TAG.len()..]);
            let len = u64::from_le_bytes(len);
            let memfd = fds.pop();
            let bytes = read_spilled(memfd, len)?;
            return Ok(Some((postcard::from_bytes(&bytes)?, fds)));
        }
        let msg = postcard::from_bytes(packet)?;
        Ok(Some((msg, fds)))
    }

    /// Sends `msg` and waits up to `timeout` for the reply.
    pub(crate) fn request<T: Serialize, R: DeserializeOwned>(
        &mut self,
        msg: &T,
        timeout: Duration,
    ) -> Result<(R, Vec<OwnedFd>), ControlError> {
        self.send(msg, &[])?;
        self.recv(Some(timeout))?
            .ok_or(ControlError::Timeout(timeout))
    }

    /// Waits until the socket is readable (a message or EOF).
    fn wait_readable(&self, timeout: Option<Duration>) -> Result<bool, ControlError> {
        let ts = timeout.map(|t| rustix::time::Timespec {
            tv_sec: t.as_secs().min(i64::MAX as u64) as i64,
            tv_nsec: i64::from(t.subsec_nanos()),
        });
        let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
        loop {
            match rustix::event::poll(&mut fds, ts.as_ref()) {
                Ok(n) => return Ok(n > 0),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(io_err("poll")(e)),
            }
        }
    }
}

/// The `len` bytes of a message in `memfd` (see the module docs).
fn read_spilled(memfd: Option<OwnedFd>, len: u64) -> Result<Vec<u8>, ControlError> {
    let len = usize::try_from(len).unwrap_or(usize::MAX);
    if len > MAX_SPILLED {
        return Err(ControlError::TooLarge(len));
    }
    let file = std::fs::File::from(memfd.ok_or(ControlError::BadSpill(len))?);
    let mut bytes = vec![0u8; len];
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut bytes, 0)
        .map_err(|_| ControlError::BadSpill(len))?;
    Ok(bytes)
}

/// The broker's listening socket.
#[derive(Debug)]
pub(crate) struct Listener {
    fd: OwnedFd,
}

impl Listener {
    /// Binds `path` (which must not exist) with mode `0600` and listens.
    pub(crate) fn bind(path: &Path) -> Result<Listener, ControlError> {
        let fd = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
            None,
        )
        .map_err(io_err("socket"))?;
        let addr = SocketAddrUnix::new(path).map_err(io_err("socket address"))?;
        // Bind with a private umask so the socket is never reachable by others, even briefly.
        let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o177));
        let bound = rustix::net::bind(&fd, &addr);
        rustix::process::umask(old);
        bound.map_err(io_err("bind"))?;
        rustix::net::listen(&fd, 64).map_err(io_err("listen"))?;
        Ok(Listener { fd })
    }

    /// The socket.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Accepts a pending connection, if any (never blocks).
    pub(crate) fn accept(&self) -> Result<Option<Conn>, ControlError> {
        match rustix::net::accept_with(&self.fd, SocketFlags::CLOEXEC) {
            Ok(fd) => Ok(Some(Conn::from_fd(fd))),
            Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => Ok(None),
            Err(rustix::io::Errno::CONNABORTED) => Ok(None),
            Err(e) => Err(io_err("accept")(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::FromBroker;

    fn pair() -> (Conn, Conn) {
        let (a, b) = rustix::net::socketpair(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )
        .expect("socketpair");
        (Conn::from_fd(a), Conn::from_fd(b))
    }

    /// A message far larger than a packet arrives whole, with the fds sent with it.
    #[test]
    fn a_message_larger_than_a_packet_arrives_whole_with_its_fds() {
        let (a, mut b) = pair();
        let message = "x".repeat(3 * MAX_MESSAGE);
        let (extra, _keep) = pair();
        a.send(
            &FromBroker::Error {
                message: message.clone(),
            },
            &[extra.fd()],
        )
        .expect("send");
        let (got, fds) = b
            .recv::<FromBroker>(Some(Duration::from_secs(10)))
            .expect("recv")
            .expect("a message");
        assert_eq!(got, FromBroker::Error { message });
        assert_eq!(fds.len(), 1, "the memfd is not handed on, the sent fd is");
    }

    /// A spill packet without its memfd, or saying more than the limit, is an error (the
    /// connection's), not a panic nor an allocation of the said length.
    #[test]
    fn a_bad_spill_packet_is_an_error() {
        for (len, with_fd) in [(100u64, false), (u64::MAX, true), (1 << 40, true)] {
            let (a, mut b) = pair();
            let mut packet = SPILL_TAG.to_vec();
            packet.extend_from_slice(&len.to_le_bytes());
            let (extra, _keep) = pair();
            let fds = if with_fd { vec![extra.fd()] } else { vec![] };
            a.send_packet(&packet, &fds).expect("send");
            let err = b
                .recv::<FromBroker>(Some(Duration::from_secs(10)))
                .expect_err("a bad spill decoded");
            assert!(
                matches!(err, ControlError::BadSpill(_) | ControlError::TooLarge(_)),
                "{err}"
            );
        }
    }
}
