//! `snapbus hz`: per-schema rate and bandwidth over each period, like `ros2 topic hz`.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::bail;
use snapbus_bus::lane::StartAt;
use snapbus_bus::subscriber::{Event, SubscribeOptions, Subscriber};

use crate::bus::{bus_dir, globs, interrupted};
use crate::cli::HzArgs;

pub(crate) fn run(args: &HzArgs) -> anyhow::Result<()> {
    if !(args.period_secs.is_finite() && args.period_secs >= 0.05) {
        bail!(
            "--period-secs must be at least 0.05, got {}",
            args.period_secs
        );
    }
    let period = Duration::from_secs_f64(args.period_secs);
    let dir = bus_dir(&args.bus)?;
    let stop = interrupted()?;
    let opts = SubscribeOptions {
        kind: "hz".into(),
        globs: globs(&args.globs)?,
        start: StartAt::Latest,
        cut: false,
        skip_lanes: Vec::new(),
        count_history_as_lost: false,
    };
    let mut sub = Subscriber::connect(&dir, opts)?;
    snapbus_bus::say!("snapbus hz: subscribed to bus '{}'", dir.name());
    for glob in sub.unmatched_globs() {
        snapbus_bus::say!(
            "snapbus hz: warning: no schema on bus '{}' matches '{glob}' yet; waiting for one",
            dir.name()
        );
    }
    let mut out = std::io::stdout().lock();
    // schema id -> (records, payload bytes) in this period.
    let mut counts: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut lost = 0u64;
    let mut window_start = Instant::now();
    let mut reports = 0u64;
    while !stop.load(Ordering::Relaxed) {
        match sub.next(Duration::from_millis(20))? {
            Some(Event::Record(r)) => {
                let e = counts.entry(r.schema.id().to_owned()).or_default();
                e.0 += 1;
                e.1 += r.payload.len() as u64;
            }
            Some(Event::Lagged {
                lost: n, damaged, ..
            }) => lost += n + damaged,
            _ => {}
        }
        let elapsed = window_start.elapsed();
        if elapsed >= period {
            let secs = elapsed.as_secs_f64();
            writeln!(
                out,
                "{:<32} {:>12} {:>14} {:>10}",
                "SCHEMA", "RATE/s", "BANDWIDTH", "RECORDS"
            )?;
            for (id, (n, bytes)) in &counts {
                writeln!(
                    out,
                    "{:<32} {:>12.1} {:>14} {:>10}",
                    id,
                    *n as f64 / secs,
                    human_rate(*bytes as f64 / secs),
                    n
                )?;
            }
            if lost > 0 {
                writeln!(out, "(lost {lost} records to overwrites in this period)")?;
            }
            writeln!(out)?;
            out.flush()?;
            counts.clear();
            lost = 0;
            window_start = Instant::now();
            reports += 1;
            if args.reports.is_some_and(|n| reports >= n) {
                break;
            }
        }
    }
    Ok(())
}

fn human_rate(bytes_per_sec: f64) -> String {
    let units = ["B/s", "KiB/s", "MiB/s", "GiB/s"];
    let mut v = bytes_per_sec;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", units[u])
}
