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
    let dir = bus_dir(&args.bus)?;
    let started_bus = state(&dir).is_err();
    if started_bus {
        eprintln!("snapbus demo: {}", up::start_detached(&dir, 300)?);
    }
    // Ctrl-C stops the experiment cleanly (and the bus, if the demo started it).
    let stop = interrupted()?;
    let result = run_on_bus(args, dir.name().as_str(), &stop);
    if started_bus {
        match down::stop(&dir, false) {
            Ok(msg) => eprintln!("snapbus demo: {msg}"),
            Err(e) => eprintln!("snapbus demo: stopping the bus: {e:#}"),
        }
    }
    result
}

fn run_on_bus(args: &DemoArgs, bus: &str, stop: &AtomicBool) -> anyhow::Result<()> {
    let total = u64::from(args.episodes) * (u64::from(args.steps) + 1);
    // One summary per episode and one for the experiment (episodes without steps have none).
    let aggregate = !args.no_echo && !args.no_aggregator && args.episodes > 0 && args.steps > 0;
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
            eprintln!("snapbus demo: stopping the aggregator: {e:#}");
        }
    }
    result
}

/// Attaches `snapbus aggregate --schema demo.step` under the broker (not restarted).
fn attach_aggregator(bus: &str) -> anyhow::Result<(snapbus_bus::runtime::BusDir, u64)> {
    let dir = bus_dir(&crate::cli::BusArgs {
        bus: Some(bus.to_owned()),
    })?;
    let argv = ["aggregate", "--bus", bus, "--schema", "demo.step"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    let (id, pid, _) =
        attach::start(&dir, "aggregator", argv, false).context("attaching the aggregator")?;
    eprintln!(
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
    let mut emitted = 0u64;
    'run: for episode in 0..args.episodes {
        for step in 0..args.steps {
            // The echo stops early when its stdout closes (`snapbus demo | head`): then so do we.
            if stop.load(Ordering::Relaxed) || (emitted % 1024 == 1023 && echo_finished(&mut echo)?)
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
            telemetry
                .try_snapshot(Level::INFO, &event)
                .context("emitting demo.step")?;
            emitted += 1;
        }
        telemetry
            .try_snapshot(Level::INFO, &episode_end(episode, args.steps))
            .context("emitting demo.episode_end")?;
        emitted += 1;
    }
    // Consumers see the stream end, not a dead producer.
    snapbus::shutdown();
    eprintln!(
        "snapbus demo: emitted {emitted} of {total} events on bus '{bus}' in {:.2?}",
        start.elapsed()
    );
    if stop.load(Ordering::Relaxed) {
        // Interrupted: the echo will not get the rest.
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

/// `snapbus echo --from oldest --count TOTAL 'demo.*'` in its own process, printing to our
/// stdout (the summaries are `demo.step.summary`: `demo.*` matches them).
fn spawn_echo(bus: &str, total: u64) -> anyhow::Result<Child> {
    let exe = std::env::current_exe().context("finding the snapbus executable")?;
    Command::new(exe)
        .args(["echo", "--bus", bus, "--from", "oldest", "--count"])
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
