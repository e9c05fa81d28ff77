//! `snapbus demo`: a simulated experiment with deterministic values (see `--help`), emitting
//! onto a bus through the `snapbus` producer API. It starts a bus if none is running (and
//! stops it at the end), and unless `--no-echo` it attaches an aggregator (per-episode and
//! experiment summaries of `demo.step`, emitted back onto the bus) and starts `snapbus echo`
//! as a separate process that prints every event and summary it receives as a JSON line.

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use snapbus::Level;
use snapbus_bus::orphan::{Signal, die_with_parent};

use crate::bus::{bus_dir, interrupted, state};
use crate::cli::DemoArgs;
use crate::command::{attach, detach, down, up};
use crate::demo::{episode_end, step_event};

/// How long the demo waits for its producer to join the bus.
const JOIN_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) fn run(args: &DemoArgs) -> anyhow::Result<()> {
    if !(args.rate.is_finite() && args.rate >= 0.0) {
        bail!(
            "--rate must be a finite number >= 0 (0: as fast as possible), got {}",
            args.rate
        );
    }
    check_record_size(args)?;
    let dir = bus_dir(&args.bus)?;
    let started_bus = state(&dir).is_err();
    if started_bus {
        snapbus_bus::say!("snapbus demo: {}", up::start_detached(&dir, 300, None)?);
    }
    // Ctrl-C stops the experiment cleanly (and the bus, if the demo started it).
    let stop = interrupted()?;
    let result = run_on_bus(args, dir.name().as_str(), &stop);
    if started_bus {
        match down::stop(&dir, false) {
            Ok(msg) => snapbus_bus::say!("snapbus demo: {msg}"),
            Err(e) => snapbus_bus::say!(
                "snapbus demo: stopping the bus: {}",
                crate::bus::error_chain(&e)
            ),
        }
    }
    result
}

/// Refuses, before any work starts, a lane size the producer would not take
/// (`SNAPBUS_LANE_BYTES`) and an image whose `demo.step` records the lane cannot hold.
fn check_record_size(args: &DemoArgs) -> anyhow::Result<()> {
    let lane_bytes = snapbus::lane_bytes_from_env()?;
    let max_payload = snapbus::max_payload_bytes(lane_bytes)? as u64;
    let (width, height) = (args.image.width, args.image.height);
    let pixels = u64::from(width) * u64::from(height);
    let record = step_record_bytes(width, height).context("building the observation")?;
    if record > max_payload {
        let lane = lane_bytes.unwrap_or(snapbus::DEFAULT_LANE_BYTES);
        let fixed = record - pixels;
        bail!(
            "--image {width}x{height}: a demo.step record would be {record} bytes, more than the \
             largest record a lane of {lane} bytes takes ({max_payload} bytes); use an image of \
             at most {} pixels",
            max_payload.saturating_sub(fixed)
        );
    }
    Ok(())
}

/// The encoded size of a `demo.step` record with a `width` × `height` image, without
/// building the image (one byte per pixel after a fixed part).
fn step_record_bytes(width: u32, height: u32) -> anyhow::Result<u64> {
    use snapbus::schemas::Wire;
    let one_pixel = step_event(0, 0, 1, 1)?.encoded_len() as u64;
    Ok(one_pixel - 1 + u64::from(width) * u64::from(height))
}

fn run_on_bus(args: &DemoArgs, bus: &str, stop: &AtomicBool) -> anyhow::Result<()> {
    let total = u64::from(args.episodes) * (u64::from(args.steps) + 1);
    // One summary per episode and one for the experiment (episodes without steps have none).
    let aggregate = cfg!(feature = "aggregator")
        && !args.no_echo
        && !args.no_aggregator
        && args.episodes > 0
        && args.steps > 0;
    let aggregator = if aggregate {
        Some(attach_aggregator(bus)?)
    } else {
        None
    };
    let summaries = if aggregate {
        u64::from(args.episodes) + 1
    } else {
        0
    };
    let result = emit(args, bus, stop, total, summaries);
    if let Some((dir, id)) = aggregator {
        if let Err(e) = detach::stop(&dir, id) {
            snapbus_bus::say!(
                "snapbus demo: stopping the aggregator: {}",
                crate::bus::error_chain(&e)
            );
        }
    }
    result
}

/// Attaches `snapbus aggregate --schema demo.step` under the broker (not restarted).
fn attach_aggregator(bus: &str) -> anyhow::Result<(snapbus_bus::runtime::BusDir, u64)> {
    let dir = bus_dir(&crate::cli::BusArgs {
        bus: Some(bus.to_owned()),
    })?;
    // `--bus=NAME`: a name can never be read as an option.
    let argv = vec![
        "aggregate".to_owned(),
        format!("--bus={bus}"),
        "--schema".to_owned(),
        "demo.step".to_owned(),
    ];
    let snapbus_bus::client::Attached { id, pid, .. } =
        attach::start(&dir, "aggregator", argv, false).context("attaching the aggregator")?;
    snapbus_bus::say!(
        "snapbus demo: aggregator {id} (pid {pid}) summarizes demo.step per episode into \
         demo.step.summary"
    );
    Ok((dir, id))
}

fn emit(
    args: &DemoArgs,
    bus: &str,
    stop: &AtomicBool,
    total: u64,
    summaries: u64,
) -> anyhow::Result<()> {
    let mut echo = if args.no_echo || total == 0 {
        None
    } else {
        Some(spawn_echo(bus, total + summaries)?)
    };
    snapbus::init(snapbus::Config {
        bus: Some(bus.to_owned()),
        name: Some("demo".into()),
        ..snapbus::Config::default()
    });
    if !snapbus::wait_for_bus(JOIN_TIMEOUT) {
        kill(&mut echo);
        bail!("could not join bus '{bus}' within {JOIN_TIMEOUT:?}");
    }
    let telemetry = snapbus::get_telemetry("demo");
    let period = (args.rate > 0.0).then(|| Duration::from_secs_f64(1.0 / args.rate));
    let start = Instant::now();
    let mut ticks: u32 = 0;
    let mut count = Count::default();
    'run: for episode in 0..args.episodes {
        for step in 0..args.steps {
            // The echo stops early when its stdout closes (`snapbus demo | head`): then so do we.
            if stop.load(Ordering::Relaxed)
                || (count.made % 1024 == 1023 && echo_finished(&mut echo)?)
            {
                break 'run;
            }
            if let Some(period) = period {
                let due = start + period.saturating_mul(ticks);
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
                ticks = ticks.saturating_add(1);
            }
            let event = step_event(episode, step, args.image.width, args.image.height)
                .context("building the observation")?;
            count.add("demo.step", telemetry.try_snapshot(Level::INFO, &event));
        }
        count.add(
            "demo.episode_end",
            telemetry.try_snapshot(Level::INFO, &episode_end(episode, args.steps)),
        );
    }
    // Consumers see the stream end, not a dead producer.
    snapbus::shutdown();
    let Count {
        written,
        filtered,
        dropped,
        ..
    } = count;
    let mut not_written = String::new();
    if filtered > 0 {
        not_written += &format!("; {filtered} filtered out by the level filter");
    }
    if let Some((schema, e)) = &count.first_error {
        not_written += &format!("; {dropped} not written (first: {schema}: {e})");
    }
    snapbus_bus::say!(
        "snapbus demo: emitted {written} of {total} events on bus '{bus}' in {:.2?}{not_written}",
        start.elapsed()
    );
    if dropped > 0 {
        kill(&mut echo);
        bail!("{dropped} of {total} events were not written (see above)");
    }
    if stop.load(Ordering::Relaxed) || written < total {
        // Interrupted, the echo ended early (`| head`), or events were filtered out: the echo
        // will not get them all.
        kill(&mut echo);
        return Ok(());
    }
    if let Some(mut child) = echo.take() {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait()? {
                if !status.success() {
                    bail!("snapbus echo exited with {status}");
                }
                break;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "snapbus echo did not receive all {total} events and {summaries} summaries \
                     within 30 s"
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    Ok(())
}

/// What became of the events the demo made.
#[derive(Default)]
struct Count {
    /// Events made (written or not).
    made: u64,
    /// Written to the lane.
    written: u64,
    /// Filtered out by the level filter (`SNAPBUS_FILTER`, `snapbus filter`).
    filtered: u64,
    /// Not written (counted by the producer too: `snapbus::stats()`).
    dropped: u64,
    first_error: Option<(&'static str, snapbus::EmitError)>,
}

impl Count {
    fn add(&mut self, schema: &'static str, result: Result<Option<u64>, snapbus::EmitError>) {
        self.made += 1;
        match result {
            Ok(Some(_)) => self.written += 1,
            Ok(None) => self.filtered += 1,
            Err(e) => {
                self.dropped += 1;
                self.first_error.get_or_insert((schema, e));
            }
        }
    }
}

/// `snapbus echo --from oldest --count TOTAL 'demo.*'` in its own process, printing to our
/// stdout (the summaries are `demo.step.summary`: `demo.*` matches them). It dies with the demo
/// (SIGTERM when the demo ends, even by `kill -9`); spawned from the main thread, which is the
/// demo's life.
fn spawn_echo(bus: &str, total: u64) -> anyhow::Result<Child> {
    let exe = std::env::current_exe().context("finding the snapbus executable")?;
    let mut cmd = Command::new(exe);
    die_with_parent(&mut cmd, Signal::TERM)
        .arg("echo")
        .arg(format!("--bus={bus}"))
        .args(["--from", "oldest", "--count"])
        .arg(total.to_string())
        .arg("demo.*")
        .stdin(Stdio::null())
        .spawn()
        .context("starting snapbus echo")
}

/// Whether the echo child has exited (successfully: an error exit is an error here).
fn echo_finished(echo: &mut Option<Child>) -> anyhow::Result<bool> {
    let Some(child) = echo.as_mut() else {
        return Ok(false);
    };
    match child.try_wait()? {
        None => Ok(false),
        Some(status) if status.success() => Ok(true),
        Some(status) => bail!("snapbus echo exited with {status}"),
    }
}

fn kill(child: &mut Option<Child>) {
    if let Some(c) = child.as_mut() {
        let _ = c.kill();
        let _ = c.wait();
    }
}
