//! A background thread that emits this process's resource use as
//! [`ResourceSample`](snapbus_schemas::builtin::ResourceSample)s.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use snapbus_schemas::builtin::ResourceSample;

use crate::level::Level;
use crate::telemetry::get_telemetry;

/// The target resource samples are emitted under.
pub const RESOURCE_TARGET: &str = "snapbus.resources";

/// Stops the sampler thread when dropped.
#[derive(Debug)]
pub struct ResourceSampler {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for ResourceSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// Emits a resource sample every `period` (at `INFO`, target `snapbus.resources`) until the
/// returned guard is dropped.
pub fn sample_resources(period: Duration) -> std::io::Result<ResourceSampler> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let thread = std::thread::Builder::new()
        .name("snapbus-resources".into())
        .spawn(move || {
            let telemetry = get_telemetry(RESOURCE_TARGET);
            while !flag.load(Ordering::Relaxed) {
                if telemetry.enabled(Level::INFO) {
                    if let Some(sample) = read_sample() {
                        telemetry.snapshot(Level::INFO, &sample);
                    }
                }
                std::thread::park_timeout(period);
            }
        })?;
    Ok(ResourceSampler {
        stop,
        thread: Some(thread),
    })
}

/// This process's resource use now, from `/proc/self/stat` (`None` if unreadable).
pub fn read_sample() -> Option<ResourceSample> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
    // Indices into `rest` (field 3 of stat(5) is rest[0]).
    let minor = num(7)?;
    let major = num(9)?;
    let utime = num(11)?;
    let stime = num(12)?;
    let threads = num(17)?;
    let rss_pages = num(21)?;
    let tick = rustix::param::clock_ticks_per_second();
    let page = rustix::param::page_size() as u64;
    let to_nanos = |ticks: u64| ticks.saturating_mul(1_000_000_000) / tick.max(1);
    Some(ResourceSample {
        rss_bytes: rss_pages.saturating_mul(page),
        cpu_user_nanos: to_nanos(utime),
        cpu_sys_nanos: to_nanos(stime),
        minor_faults: minor,
        major_faults: major,
        threads: u32::try_from(threads).unwrap_or(u32::MAX),
    })
}
