//! The producer side of each scenario: spawns the consumer, writes, and turns the consumer's
//! results into a row.

use super::*;

struct Consumer {
    child: std::process::Child,
    out: BufReader<ChildStdout>,
}

impl Consumer {
    /// Spawns the consumer and waits until it is ready.
    fn spawn(
        role: &str,
        lane: Option<&ShmLane>,
        bells: Option<&DoorbellPage>,
        stdin: Stdio,
    ) -> Consumer {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.env("SNAPBUS_LANE_CHILD", role)
            .env("SNAPBUS_LANE_PID", std::process::id().to_string())
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if n_cpus() > CONSUMER_CPU {
            cmd.env("SNAPBUS_LANE_CPU", CONSUMER_CPU.to_string());
        }
        if let Some(l) = lane {
            cmd.env("SNAPBUS_LANE_FD", l.fd().as_raw_fd().to_string());
        }
        if let Some(b) = bells {
            cmd.env("SNAPBUS_BELL_FD", b.fd().as_raw_fd().to_string());
        }
        let mut child = cmd.spawn().unwrap();
        // `cmd` (and the child's end of a socket pair in `stdin`) is dropped here.
        drop(cmd);
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready", "consumer {role} did not start");
        Consumer { child, out }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Reads the consumer's result line and reaps it.
    fn finish(mut self) -> BTreeMap<String, String> {
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "consumer failed: {status}");
        line.split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }
}

fn num(r: &BTreeMap<String, String>, key: &str) -> f64 {
    r.get(key).and_then(|v| v.parse().ok()).unwrap_or(0.0)
}

// ---------------------------------------------------------------------------------------------
// Scenarios.
// ---------------------------------------------------------------------------------------------

fn tput_from(r: &BTreeMap<String, String>, size: usize, produced: u64, prod_secs: f64) -> Tput {
    let delivered = num(r, "delivered");
    let lost = num(r, "lost");
    let secs = num(r, "secs").max(1e-9);
    Tput {
        delivered_per_s: delivered / secs,
        bytes_per_s: delivered * size as f64 / secs,
        loss_pct: if delivered + lost > 0.0 {
            100.0 * lost / (delivered + lost)
        } else {
            0.0
        },
        produced_per_s: produced as f64 / prod_secs,
        bad: num(r, "bad") as u64,
        lapped: num(r, "lapped") as u64,
        torn: num(r, "torn") as u64,
    }
}

/// How `lane_tput` writes: a single-thread `LaneWriter` (with the doorbell page, if any), or
/// the `SharedLaneWriter` a `Publisher` uses (claim, copy into `payload_mut`, commit: what
/// `emit_raw` does; no doorbell).
enum TputWriter {
    Single(LaneWriter<ShmMem>),
    Shared(SharedLaneWriter<ShmMem>),
}

/// Lane throughput: the producer writes `size`-byte records for `dur`, then closes the lane.
pub(crate) fn lane_tput(
    size: usize,
    role: &str,
    with_bell: bool,
    shared: bool,
    dur: Duration,
) -> Tput {
    let lane = ShmLane::create("bench-tput", &LaneConfig::default()).unwrap();
    let bells = with_bell.then(|| Arc::new(DoorbellPage::create("bench-bells").unwrap()));
    let consumer = Consumer::spawn(role, Some(&lane), bells.as_deref(), Stdio::null());
    let mut w = if shared {
        TputWriter::Shared(lane.lane().shared_writer().unwrap())
    } else {
        let mut w = lane.lane().writer().unwrap();
        if let Some(b) = &bells {
            w.set_doorbells(Some((Arc::clone(b), 1)));
        }
        TputWriter::Single(w)
    };
    let mut payload = vec![0xa5u8; size];
    let check_every: u64 = if size <= 4096 { 256 } else { 1 };
    let start = Instant::now();
    let deadline = start + dur;
    let mut n = 0u64;
    loop {
        payload[..8].copy_from_slice(&n.to_le_bytes());
        payload[size - 1] = n as u8;
        match &mut w {
            TputWriter::Single(w) => {
                w.write_bytes(META, &payload).unwrap();
            }
            TputWriter::Shared(w) => {
                let mut claim = w.claim(size, META).unwrap();
                claim.payload_mut().copy_from_slice(&payload);
                claim.commit();
            }
        }
        n += 1;
        if n % check_every == 0 && Instant::now() >= deadline {
            break;
        }
    }
    let prod_secs = start.elapsed().as_secs_f64();
    match w {
        TputWriter::Single(mut w) => {
            w.close();
            w.ring();
        }
        TputWriter::Shared(w) => w.close(),
    }
    let r = consumer.finish();
    tput_from(&r, size, n, prod_secs)
}

/// UDS throughput of 64-byte messages: one `write` each, or through a 64 KiB `BufWriter`.
pub(crate) fn uds_tput(buffered: bool, dur: Duration) -> Tput {
    let (mine, theirs) = UnixStream::pair().unwrap();
    let consumer = Consumer::spawn("uds-tput", None, None, Stdio::from(OwnedFd::from(theirs)));
    let mut msg = [0x5au8; SMALL];
    let start = Instant::now();
    let deadline = start + dur;
    let mut n = 0u64;
    let mut sink: Box<dyn Write> = if buffered {
        Box::new(BufWriter::with_capacity(64 << 10, mine))
    } else {
        Box::new(mine)
    };
    loop {
        msg[..8].copy_from_slice(&n.to_le_bytes());
        sink.write_all(&msg).unwrap();
        n += 1;
        if n % 256 == 0 && Instant::now() >= deadline {
            break;
        }
    }
    sink.flush().unwrap();
    let prod_secs = start.elapsed().as_secs_f64();
    drop(sink);
    let r = consumer.finish();
    tput_from(&r, SMALL, n, prod_secs)
}

/// In-process reference: copy a 1 MiB buffer into a rotating destination of `dst_len` bytes.
pub(crate) fn memcpy_ref(dst_len: usize, dur: Duration) -> f64 {
    let src = vec![0xa5u8; LARGE];
    let mut dst = vec![0u8; dst_len];
    let slots = dst_len / LARGE;
    let start = Instant::now();
    let mut n = 0usize;
    while start.elapsed() < dur {
        let off = (n % slots) * LARGE;
        dst[off..off + LARGE].copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
        n += 1;
    }
    (n * LARGE) as f64 / start.elapsed().as_secs_f64()
}

fn lat_from(r: &BTreeMap<String, String>) -> Lat {
    let mut v: Vec<u64> = r
        .get("lat")
        .map(|s| s.split(',').filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_default();
    // Drop the first 2 % (warm-up: first laps, caches, frequency).
    let skip = v.len() / 50;
    v.drain(..skip);
    v.sort_unstable();
    let pct = |p: f64| -> u64 {
        if v.is_empty() {
            return 0;
        }
        let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
        v[i]
    };
    let delivered = num(r, "delivered").max(1.0);
    assert_eq!(num(r, "bad"), 0.0, "corrupt latency records");
    Lat {
        n: v.len(),
        p50: pct(0.50),
        p90: pct(0.90),
        p99: pct(0.99),
        p999: pct(0.999),
        max: v.last().copied().unwrap_or(0),
        lost: num(r, "lost") as u64,
        sleeps_per_rec: num(r, "sleeps") / delivered,
    }
}

/// Busy-waits until `deadline` (CLOCK_MONOTONIC ns).
fn pace(deadline: u64) {
    while mono_ns() < deadline {
        spin_loop();
    }
}

/// Lane latency: a 64-byte record with a CLOCK_MONOTONIC stamp every `LAT_INTERVAL_NS`.
pub(crate) fn lane_latency(role: &str, with_bell: bool, dur: Duration) -> Lat {
    let lane = ShmLane::create("bench-lat", &LaneConfig::default()).unwrap();
    let bells = Arc::new(DoorbellPage::create("bench-bells").unwrap());
    let consumer = Consumer::spawn(role, Some(&lane), Some(&bells), Stdio::null());
    let mut w = lane.lane().writer().unwrap();
    if with_bell {
        w.set_doorbells(Some((Arc::clone(&bells), 1)));
    }
    send_paced(dur, |payload| {
        w.write_bytes(META, payload).unwrap();
    });
    w.close();
    w.ring();
    lat_from(&consumer.finish())
}

/// Sends `dur`'s worth of latency messages through `send`, one every `LAT_INTERVAL_NS`, each
/// stamped just before it goes: the send time in bytes 0..8, its index in 8..16.
fn send_paced(dur: Duration, mut send: impl FnMut(&[u8; SMALL])) {
    let count = dur.as_nanos() as u64 / LAT_INTERVAL_NS;
    let mut msg = [0u8; SMALL];
    let mut next = mono_ns() + LAT_INTERVAL_NS;
    for i in 0..count {
        pace(next);
        next += LAT_INTERVAL_NS;
        msg[..8].copy_from_slice(&mono_ns().to_le_bytes());
        msg[8..16].copy_from_slice(&i.to_le_bytes());
        send(&msg);
    }
}

/// UDS latency: the same records over a socket, one `write` each; blocking reads.
pub(crate) fn uds_latency(dur: Duration) -> Lat {
    let (mut mine, theirs) = UnixStream::pair().unwrap();
    let consumer = Consumer::spawn("uds-lat", None, None, Stdio::from(OwnedFd::from(theirs)));
    send_paced(dur, |msg| mine.write_all(msg).unwrap());
    drop(mine);
    lat_from(&consumer.finish())
}

/// Idle consumer CPU: % of one CPU over `window`, and wakeups/s.
pub(crate) fn idle_cpu(role: &str, window: Duration) -> (f64, f64) {
    let lane = ShmLane::create("bench-idle", &LaneConfig::default()).unwrap();
    let bells = Arc::new(DoorbellPage::create("bench-bells").unwrap());
    let consumer = Consumer::spawn(role, Some(&lane), Some(&bells), Stdio::null());
    let mut w = lane.lane().writer().unwrap();
    w.set_doorbells(Some((Arc::clone(&bells), 1)));
    std::thread::sleep(Duration::from_millis(100));
    let pid = consumer.pid();
    let (c0, t0) = (cpu_ns(pid).unwrap(), Instant::now());
    std::thread::sleep(window);
    let (c1, wall) = (cpu_ns(pid).unwrap(), t0.elapsed());
    w.close();
    w.ring();
    let r = consumer.finish();
    let secs = wall.as_secs_f64();
    (
        100.0 * (c1 - c0) as f64 / 1e9 / secs,
        num(&r, "wakeups") / num(&r, "secs").max(1e-9),
    )
}
