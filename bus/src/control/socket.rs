//! A `SOCK_SEQPACKET` Unix socket carrying one postcard message per packet, with fds.

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

/// Largest message (bytes). Replies that could grow (`ls`) stay well under it.
const MAX_MESSAGE: usize = 192 << 10;
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
    #[error("control message of {0} bytes is larger than the limit ({MAX_MESSAGE})")]
    TooLarge(usize),
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
        if bytes.len() > MAX_MESSAGE {
            return Err(ControlError::TooLarge(bytes.len()));
        }
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if !fds.is_empty() {
            let pushed = control.push(SendAncillaryMessage::ScmRights(
                &fds[..fds.len().min(MAX_FDS)],
            ));
            debug_assert!(pushed);
        }
        let iov = [io::IoSlice::new(&bytes)];
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
        let msg = postcard::from_bytes(&self.buf[..got.bytes])?;
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
