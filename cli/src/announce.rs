//! What `attach` (and `spawn`, and a consumer serving a URL in the foreground) print about a
//! consumer the broker started: its id on stdout, how to stop it on stderr. A leaf the verbs
//! share.

use anyhow::Context;
use snapbus_bus::client::Attached;
use snapbus_bus::runtime::BusDir;

/// Prints what `attach` prints for a started consumer of `kind` reading the bus into `what`:
/// its id on stdout, and how to stop it on stderr.
pub(crate) fn announce(
    dir: &BusDir,
    kind: &str,
    started: &Attached,
    what: &str,
) -> anyhow::Result<()> {
    let Attached { id, pid, log } = started;
    crate::stdout::vital(
        id,
        &format!("the id of {kind} {id} (it runs: `snapbus ls` lists it)"),
    )?;
    snapbus_bus::say!(
        "snapbus attach: {kind} {id} (pid {pid}) is reading bus '{}' into {what}; log {log}; \
         stop it with `snapbus detach {id}{}`",
        dir.name(),
        bus_flag(dir)
    );
    Ok(())
}

/// For a consumer that serves a URL, run in the foreground or by `attach`: writes it to
/// `url_file` (for `attach`, which prints the URL of the process it started: [`announce_url`]),
/// prints it on stdout and says so on stderr.
#[cfg_attr(
    not(any(feature = "plotter", feature = "prometheus", feature = "foxglove")),
    allow(dead_code)
)]
pub(crate) fn publish_url(
    dir: &BusDir,
    verb: &str,
    url: &str,
    url_file: &std::path::Path,
) -> anyhow::Result<()> {
    if let Ok(mut f) = crate::bus::create_file(url_file) {
        use std::io::Write;
        let _ = f.write_all(url.as_bytes());
    }
    crate::stdout::vital(url, "the URL it serves")?;
    snapbus_bus::say!(
        "snapbus {verb}: serving {url} for bus '{}' (Ctrl-C to stop)",
        dir.name()
    );
    Ok(())
}

/// Prints what `attach` prints for a started consumer that serves a URL: the URL (which it
/// wrote to `url_file` before it subscribed, and it has subscribed) on stdout, and how to stop
/// it on stderr.
#[cfg_attr(
    not(any(feature = "plotter", feature = "prometheus", feature = "foxglove")),
    allow(dead_code)
)]
pub(crate) fn announce_url(
    dir: &BusDir,
    kind: &str,
    started: &Attached,
    url_file: &std::path::Path,
) -> anyhow::Result<()> {
    let Attached { id, pid, log } = started;
    let url = std::fs::read_to_string(url_file)
        .with_context(|| format!("reading the URL of {kind} {id} (log {log})"))?;
    crate::stdout::vital(
        url.trim(),
        &format!("the URL of {kind} {id} (it runs: `snapbus ls` lists it)"),
    )?;
    snapbus_bus::say!(
        "snapbus attach: {kind} {id} (pid {pid}) serves {} for bus '{}'; log {log}; stop it \
         with `snapbus detach {id}{}`",
        url.trim(),
        dir.name(),
        bus_flag(dir)
    );
    Ok(())
}

/// ` --bus NAME` to add to a command for the bus of `dir`, or nothing for the default bus.
pub(crate) fn bus_flag(dir: &BusDir) -> String {
    if dir.name().as_str() == snapbus_bus::runtime::DEFAULT_BUS {
        String::new()
    } else {
        format!(" --bus {}", dir.name())
    }
}
