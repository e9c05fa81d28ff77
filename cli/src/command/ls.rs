//! `snapbus ls`: producers, consumers and schemas on a bus, with rates, lag and losses.

use std::io::Write;

use anyhow::Context;

use crate::bus::{bus_dir, state};
use crate::cli::LsArgs;

pub(crate) fn run(args: &LsArgs) -> anyhow::Result<()> {
    let dir = bus_dir(&args.bus)?;
    let s = state(&dir)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let line = serde_json::to_string(&s).context("rendering the state as JSON")?;
        writeln!(out, "{line}")?;
        return Ok(());
    }
    writeln!(
        out,
        "bus '{}' (broker pid {}){}",
        s.bus,
        s.broker_pid,
        if s.filter.is_empty() {
            String::new()
        } else {
            format!(", filter '{}'", s.filter)
        }
    )?;
    writeln!(out, "\nPRODUCERS")?;
    writeln!(
        out,
        "{:>4}  {:<20} {:>8}  {:<12} {:>12} {:>10} {:>8}  TAGS",
        "ID", "NAME", "PID", "STATUS", "RECORDS", "RATE/s", "DROPPED"
    )?;
    for p in &s.producers {
        let tags = [&p.info.session_tag, &p.info.perf_tag]
            .iter()
            .filter_map(|t| t.as_deref())
            .collect::<Vec<_>>()
            .join(",");
        writeln!(
            out,
            "{:>4}  {:<20} {:>8}  {:<12} {:>12} {:>10.1} {:>8}  {}",
            p.id, p.info.name, p.info.pid, p.status, p.frames, p.rate_hz, p.dropped, tags
        )?;
    }
    writeln!(out, "\nCONSUMERS")?;
    writeln!(
        out,
        "{:>4}  {:<12} {:>8} {:<30} {:>12} {:>10} {:>12}  SUBSCRIPTIONS",
        "ID", "KIND", "PID", "STATUS", "DELIVERED", "LOST", "LAG BYTES"
    )?;
    for c in &s.consumers {
        let subs = if c.info.subscriptions.is_empty() {
            "*".to_owned()
        } else {
            c.info.subscriptions.join(" ")
        };
        let status = if c.supervised || c.log.is_some() {
            format!("{} (attached)", c.status)
        } else {
            c.status.clone()
        };
        writeln!(
            out,
            "{:>4}  {:<12} {:>8} {:<30} {:>12} {:>10} {:>12}  {}",
            c.id, c.info.kind, c.info.pid, status, c.delivered, c.lost, c.lag_bytes, subs
        )?;
    }
    writeln!(out, "\nSCHEMAS")?;
    writeln!(
        out,
        "{:<32} {:>4}  {:<16} {:>10} {:>10}  PRODUCERS",
        "ID", "VER", "FINGERPRINT", "RATE/s", "IN RINGS"
    )?;
    for sc in &s.schemas {
        let producers: Vec<String> = sc.producers.iter().map(u64::to_string).collect();
        writeln!(
            out,
            "{:<32} {:>4}  {:<16} {:>10.1} {:>10}  {}{}",
            sc.id,
            sc.version,
            sc.fingerprint,
            sc.rate_hz,
            sc.in_rings,
            producers.join(","),
            if sc.conflict {
                "  CONFLICT: another descriptor has this id and version"
            } else {
                ""
            }
        )?;
    }
    out.flush()?;
    Ok(())
}
