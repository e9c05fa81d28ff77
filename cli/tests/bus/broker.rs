//! The broker against misbehaving clients: garbage, silence, and many idle connections.

use std::time::Duration;

use super::TestBus;
use crate::util::WATCHDOG;

/// A raw connection to the broker's socket (`SOCK_SEQPACKET`, one message per packet), for a
/// client that misbehaves: the control protocol is private to the bus.
fn raw_connect(sock: &std::path::Path) -> std::os::fd::OwnedFd {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
    .expect("socket");
    let addr = SocketAddrUnix::new(sock).expect("socket address");
    rustix::net::connect(&fd, &addr).expect("connect");
    fd
}

/// What the broker did to connection `fd` within `timeout`: `None`, nothing (still open,
/// nothing to read); `Some(true)`, closed it without a word; `Some(false)`, sent a message.
fn closed_within(fd: &std::os::fd::OwnedFd, timeout: Duration) -> Option<bool> {
    use rustix::event::{PollFd, PollFlags};
    let ts = rustix::time::Timespec {
        tv_sec: timeout.as_secs() as i64,
        tv_nsec: i64::from(timeout.subsec_nanos()),
    };
    let mut fds = [PollFd::new(fd, PollFlags::IN)];
    if rustix::event::poll(&mut fds, Some(&ts)).expect("poll") == 0 {
        return None;
    }
    let mut buf = [0u8; 256];
    match rustix::net::recv(fd, &mut buf, rustix::net::RecvFlags::DONTWAIT) {
        Ok((0, _)) | Err(rustix::io::Errno::CONNRESET) => Some(true),
        Ok(_) => Some(false),
        Err(e) => panic!("recv: {e}"),
    }
}

#[test]
fn the_broker_survives_garbage_and_silent_clients() {
    let bus = TestBus::up();
    let sock = crate::util::runtime_root()
        .join(&bus.name)
        .join("broker.sock");
    // A message that is not a control message: the broker drops that connection, nothing else.
    let garbage = raw_connect(&sock);
    let mut packet = vec![0xff_u8; 8];
    packet.extend_from_slice(b"not a message");
    packet.extend_from_slice(&[7u8; 32]);
    rustix::net::send(&garbage, &packet, rustix::net::SendFlags::empty()).expect("send");
    let closed = closed_within(&garbage, WATCHDOG);
    assert_eq!(closed, Some(true), "garbage: {closed:?}");
    // A client that never speaks does not hold the broker up, and is dropped after a while.
    let silent = raw_connect(&sock);
    assert!(
        bus.ls()["producers"].as_array().is_some(),
        "ls works meanwhile"
    );
    bus.demo(1, 2, 0, &[]);
    let closed = closed_within(&silent, WATCHDOG);
    assert_eq!(closed, Some(true), "silent: {closed:?}");
}

/// The resident memory of process `pid` in KiB (`VmRSS`).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

#[test]
fn idle_connections_cost_the_broker_little_and_the_oldest_are_dropped() {
    let bus = TestBus::up();
    let broker = bus.ls()["broker_pid"].as_u64().expect("broker pid") as u32;
    let sock = crate::util::runtime_root()
        .join(&bus.name)
        .join("broker.sock");
    // Warm the broker up (a few requests of every size it serves), then measure.
    for _ in 0..5 {
        bus.ls();
    }
    let before = rss_kib(broker);
    let idle: Vec<_> = (0..500).map(|_| raw_connect(&sock)).collect();
    // A real client is served meanwhile (and, once it has been, every idle one was accepted).
    assert!(bus.ls()["producers"].as_array().is_some());
    let grown = rss_kib(broker).saturating_sub(before);
    assert!(
        grown < 8 * 1024,
        "500 idle connections grew the broker by {grown} KiB"
    );
    // At most 256 are kept: the oldest was dropped.
    let closed = closed_within(&idle[0], WATCHDOG);
    assert_eq!(closed, Some(true), "oldest: {closed:?}");
    let newest = closed_within(idle.last().expect("connections"), Duration::ZERO);
    assert_eq!(newest, None, "newest: {newest:?}");
}
