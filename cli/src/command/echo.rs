//! `snapbus echo`: decoded events as JSON lines, one object per event (schema, version, level,
//! t_nanos, producer, target, seq, payload). Losses and producer deaths go to stderr.

use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::Duration;

use snapbus_bus::subscriber::{Event, SubscribeOptions, Subscriber};

use crate::bus::{bus_dir, globs, interrupted, wait_for_bus, write_record_json};
use crate::cli::EchoArgs;

pub(crate) fn run(args: &EchoArgs) -> anyhow::Result<()> {
    let globs = globs(&args.globs)?;
    let dir = bus_dir(&args.bus)?;
    // Before the signal handlers: Ctrl-C ends a wait at once.
    wait_for_bus(&dir, &args.wait, "snapbus echo")?;
    let stop = interrupted()?;
    let opts = SubscribeOptions {
        kind: "echo".into(),
        globs,
        start: args.from.start(),
        cut: false,
        skip_lanes: Vec::new(),
        count_history_as_lost: false,
    };
    let mut sub = Subscriber::connect(&dir, opts)?;
    snapbus_bus::say!(
        "snapbus echo: subscribed to bus '{}' ({} producers)",
        dir.name(),
        sub.producers().count()
    );
    for glob in sub.unmatched_globs() {
        snapbus_bus::say!(
            "snapbus echo: warning: no schema on bus '{}' matches '{glob}' yet; waiting for one",
            dir.name()
        );
    }
    let mut out = std::io::stdout().lock();
    let mut printed = 0u64;
    if args.count == Some(0) {
        return Ok(());
    }
    while !stop.load(Ordering::Relaxed) {
        match sub.next(Duration::from_millis(100))? {
            None => {}
            Some(Event::Record(r)) => {
                write_record_json(&mut out, &r, args.raw)?;
                printed += 1;
                if args.count.is_some_and(|n| printed >= n) {
                    break;
                }
            }
            Some(Event::Lagged {
                producer_id,
                lost,
                damaged,
                ..
            }) => {
                out.flush()?;
                if lost > 0 {
                    snapbus_bus::say!(
                        "snapbus echo: lost {lost} records of producer {producer_id} (overwritten before they were read)"
                    );
                }
                if damaged > 0 {
                    snapbus_bus::say!(
                        "snapbus echo: lost {damaged} records of producer {producer_id} (garbage in its ring where they were)"
                    );
                }
            }
            Some(Event::Joined(_)) => {}
            Some(Event::Died(p)) => {
                out.flush()?;
                snapbus_bus::say!(
                    "snapbus echo: producer '{}' (pid {}) died; reading what it wrote",
                    p.name,
                    p.pid
                );
            }
            Some(Event::Ended(p)) => {
                out.flush()?;
                snapbus_bus::say!("snapbus echo: producer '{}' (pid {}) ended", p.name, p.pid);
            }
        }
        if args.until_end && sub.all_ended() {
            break;
        }
    }
    out.flush()?;
    Ok(())
}
