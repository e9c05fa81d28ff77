//! `snapbus demo`: a simulated experiment with deterministic values (see `--help`).

use std::io::Write;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use serde_json::json;
use snapbus_schemas::{Snapshot, decode};

use crate::cli::DemoArgs;
use crate::demo::{episode_end, step_event};

pub(crate) fn run(args: &DemoArgs) -> anyhow::Result<()> {
    if !(args.rate.is_finite() && args.rate >= 0.0) {
        bail!(
            "--rate must be a finite number >= 0 (0: as fast as possible), got {}",
            args.rate
        );
    }
    eprintln!(
        "snapbus demo: the shared-memory bus is not built yet; printing each event after a \
         round trip through the wire format"
    );
    let period = (args.rate > 0.0).then(|| Duration::from_secs_f64(1.0 / args.rate));
    let start = Instant::now();
    let mut ticks: u32 = 0;
    let mut out = std::io::stdout().lock();
    let mut buf = Vec::new();
    for episode in 0..args.episodes {
        for step in 0..args.steps {
            if let Some(period) = period {
                let due = start + period.saturating_mul(ticks);
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
                ticks = ticks.saturating_add(1);
            }
            let event = step_event(episode, step, args.image.width, args.image.height)
                .context("building the observation")?;
            emit(&mut out, &mut buf, &event)?;
        }
        emit(&mut out, &mut buf, &episode_end(episode, args.steps))?;
    }
    out.flush()?;
    Ok(())
}

/// Encodes `event` into a reused buffer, decodes it from its descriptor and prints a JSON line.
fn emit<T: Snapshot>(out: &mut impl Write, buf: &mut Vec<u8>, event: &T) -> anyhow::Result<()> {
    buf.resize(event.encoded_len(), 0);
    event.encode_into(buf).context("encoding an event")?;
    let desc = T::descriptor();
    let payload = decode(desc.root(), buf).context("decoding an event")?;
    let t_nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let line = json!({
        "schema": desc.id(),
        "version": desc.version(),
        "t_nanos": u64::try_from(t_nanos).unwrap_or(u64::MAX),
        "payload": payload.to_json(),
    });
    writeln!(out, "{line}")?;
    Ok(())
}
