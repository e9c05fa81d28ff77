//! The consumer process: re-executed from the bench (`SNAPBUS_LANE_CHILD=<role>`), it opens
//! the producer's lane or socket, prints `ready`, reads, and prints one line of results.

use super::*;

/// Opens the producer's lane (`/proc/<ppid>/fd/<fd>`, read-only) and faults in every page of
/// the mapping, so the first lap does not pay for the consumer's page faults.
fn open_lane() -> ShmLane {
    let path = format!(
        "/proc/{}/fd/{}",
        env_u64("SNAPBUS_LANE_PID"),
        env_u64("SNAPBUS_LANE_FD")
    );
    let lane = ShmLane::open(OwnedFd::from(File::open(path).unwrap())).unwrap();
    let mem: &ShmMem = lane.lane().mem();
    let mut sum = 0u64;
    for i in (0..mem.len_words()).step_by(512) {
        sum = sum.wrapping_add(
            mem.get(i)
                .map_or(0, |w| w.load(std::sync::atomic::Ordering::Relaxed)),
        );
    }
    std::hint::black_box(sum);
    lane
}

fn open_bells() -> DoorbellPage {
    let path = format!(
        "/proc/{}/fd/{}",
        env_u64("SNAPBUS_LANE_PID"),
        env_u64("SNAPBUS_BELL_FD")
    );
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    DoorbellPage::open(OwnedFd::from(file)).unwrap()
}

fn ready() {
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready").unwrap();
    out.flush().unwrap();
}

fn report(kv: &[(&str, String)]) {
    let line: Vec<String> = kv.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", line.join(" ")).unwrap();
    out.flush().unwrap();
}

fn reader_report(
    reader: &LaneReader<ShmMem>,
    window: Duration,
    bad: u64,
    extra: &[(&str, String)],
) {
    let s = reader.stats();
    let mut kv = vec![
        ("delivered", s.delivered.to_string()),
        ("lost", s.lost.to_string()),
        ("lapped", s.lapped.to_string()),
        ("torn", s.torn.to_string()),
        ("garbage", s.garbage.to_string()),
        ("holes", s.holes.to_string()),
        ("bad", bad.to_string()),
        ("secs", window.as_secs_f64().to_string()),
    ];
    kv.extend_from_slice(extra);
    report(&kv);
}

/// A consumer's measuring window (from its first record to the end of the stream) and its
/// records whose payload did not match their sequence number.
#[derive(Default)]
struct Tally {
    first: Option<Instant>,
    bad: u64,
}

impl Tally {
    /// Notes a record (the first one opens the window); `ok`: its payload matched.
    fn saw(&mut self, ok: bool) {
        self.first.get_or_insert_with(Instant::now);
        self.bad += u64::from(!ok);
    }

    fn elapsed(&self) -> Duration {
        self.first.map_or(Duration::ZERO, |t| t.elapsed())
    }

    /// Prints the lane reader's results.
    fn report(&self, reader: &LaneReader<ShmMem>) {
        reader_report(reader, self.elapsed(), self.bad, &[]);
    }
}

/// A consumer of every record from the oldest: says `ready`, `read`s until the lane is closed
/// (counting into the tally), then reports.
fn consume_lane(read: impl FnOnce(&mut LaneReader<ShmMem>, &mut Tally)) {
    let lane = open_lane();
    let mut reader = lane.lane().reader(StartAt::Oldest);
    ready();
    let mut tally = Tally::default();
    read(&mut reader, &mut tally);
    tally.report(&reader);
}

/// Consumer: `poll()` every record (copies the payload), spinning when there is nothing.
fn child_lane_poll() {
    consume_lane(|reader, tally| {
        loop {
            match reader.poll() {
                Poll::Frame(f) => {
                    let p = f.payload;
                    let ok = p.len() >= 8
                        && p[..8] == f.meta.seq.to_le_bytes()
                        && p[p.len() - 1] == f.meta.seq as u8;
                    tally.saw(ok);
                }
                Poll::Lagged(_) => {}
                Poll::Empty | Poll::Pending => spin_loop(),
                Poll::Closed => break,
            }
        }
    });
}

/// Consumer: header + last byte of every record, in place.
fn child_lane_touch() {
    consume_lane(|reader, tally| {
        loop {
            match reader.read_in_place(|m, v| v.byte(m.payload_len.wrapping_sub(1))) {
                Ok((meta, last)) => tally.saw(last == Some(meta.seq as u8)),
                Err(NoFrame::Closed) => break,
                Err(_) => spin_loop(),
            }
        }
    });
}

/// Consumer: one-way latency. `bell_spins = None`: spin on `poll()`; `Some(n)`: sleep on the
/// doorbell (`wait_until` with `n` spins) whenever the lane is empty.
fn child_lane_latency(bell_spins: Option<u32>) {
    let lane = open_lane();
    let bells = bell_spins.map(|_| open_bells());
    let bell = bells.as_ref().map(|p| p.bell(0).unwrap());
    let mut reader = lane.lane().reader(StartAt::Oldest);
    let mut lat: Vec<u64> = Vec::with_capacity(1 << 20);
    let mut bad = 0u64;
    let me = std::process::id();
    let sw0 = voluntary_switches(me);
    ready();
    let t0 = Instant::now();
    'outer: loop {
        if let (Some(bell), Some(spins)) = (&bell, bell_spins) {
            bell.wait_until(|| reader.has_pending_bytes(), spins, BELL_TIMEOUT);
        }
        loop {
            match reader.poll() {
                Poll::Frame(f) => {
                    let now = mono_ns();
                    let p = f.payload;
                    if p.len() >= 16 && p[8..16] == f.meta.seq.to_le_bytes() {
                        let stamp = u64::from_le_bytes(p[..8].try_into().unwrap());
                        lat.push(now.saturating_sub(stamp));
                    } else {
                        bad += 1;
                    }
                }
                Poll::Lagged(_) | Poll::Pending => {}
                Poll::Empty if bell.is_some() => break,
                Poll::Empty => spin_loop(),
                Poll::Closed => break 'outer,
            }
        }
    }
    let sleeps = voluntary_switches(me) - sw0;
    reader_report(
        &reader,
        t0.elapsed(),
        bad,
        &[
            ("lat", encode_samples(&lat)),
            ("sleeps", sleeps.to_string()),
        ],
    );
}

/// Consumer: waits on its doorbell (or spins, `spins = None`) until the lane closes; counts
/// how often it woke up.
fn child_idle(bell_spins: Option<u32>) {
    let lane = open_lane();
    let bells = open_bells();
    let bell = bells.bell(0).unwrap();
    let mut reader = lane.lane().reader(StartAt::Latest);
    ready();
    let t0 = Instant::now();
    let mut wakeups = 0u64;
    'outer: loop {
        match bell_spins {
            Some(spins) => {
                bell.wait_until(|| reader.has_pending_bytes(), spins, BELL_TIMEOUT);
                wakeups += 1;
            }
            None => spin_loop(),
        }
        loop {
            match reader.poll() {
                Poll::Frame(_) | Poll::Lagged(_) | Poll::Pending => {}
                Poll::Empty => break,
                Poll::Closed => break 'outer,
            }
        }
    }
    report(&[
        ("wakeups", wakeups.to_string()),
        ("secs", t0.elapsed().as_secs_f64().to_string()),
    ]);
}

/// Consumer of the socket (stdin): counts bytes until EOF.
fn child_uds_tput() {
    let mut sock = std::io::stdin().lock();
    let mut buf = vec![0u8; 256 << 10];
    ready();
    let mut tally = Tally::default();
    let mut total = 0u64;
    loop {
        let n = sock.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        // Spot check: every message is 64 bytes and starts with its index.
        let mut ok = true;
        if total % SMALL as u64 == 0 && n >= 8 {
            let idx = u64::from_le_bytes(buf[..8].try_into().unwrap());
            ok = idx == total / SMALL as u64;
        }
        tally.saw(ok);
        total += n as u64;
    }
    report(&[
        ("delivered", (total / SMALL as u64).to_string()),
        ("lost", "0".into()),
        ("bad", tally.bad.to_string()),
        ("secs", tally.elapsed().as_secs_f64().to_string()),
    ]);
}

/// Socket latency consumer: blocking 64-byte reads.
fn child_uds_latency() {
    let mut sock = std::io::stdin().lock();
    let mut msg = [0u8; SMALL];
    let mut lat: Vec<u64> = Vec::with_capacity(1 << 20);
    let me = std::process::id();
    let sw0 = voluntary_switches(me);
    ready();
    let mut delivered = 0u64;
    while sock.read_exact(&mut msg).is_ok() {
        let now = mono_ns();
        let stamp = u64::from_le_bytes(msg[..8].try_into().unwrap());
        lat.push(now.saturating_sub(stamp));
        delivered += 1;
    }
    let sleeps = voluntary_switches(me) - sw0;
    report(&[
        ("delivered", delivered.to_string()),
        ("lost", "0".into()),
        ("bad", "0".into()),
        ("lat", encode_samples(&lat)),
        ("sleeps", sleeps.to_string()),
    ]);
}

/// Latency samples travel back as one comma-separated field.
fn encode_samples(v: &[u64]) -> String {
    let s: Vec<String> = v.iter().map(u64::to_string).collect();
    s.join(",")
}

pub(crate) fn child_main(role: &str) {
    if let Ok(cpu) = std::env::var("SNAPBUS_LANE_CPU") {
        if !pin(cpu.parse().unwrap()) {
            eprintln!("lane_crossprocess: could not pin the consumer to CPU {cpu}");
        }
    }
    match role {
        "lane-poll" => child_lane_poll(),
        "lane-touch" => child_lane_touch(),
        "lane-lat-spin" => child_lane_latency(None),
        "lane-lat-bell0" => child_lane_latency(Some(0)),
        "lane-lat-bell100" => child_lane_latency(Some(100)),
        "idle-bell" => child_idle(Some(100)),
        "idle-spin" => child_idle(None),
        "uds-tput" => child_uds_tput(),
        "uds-lat" => child_uds_latency(),
        other => panic!("unknown child role {other}"),
    }
}
