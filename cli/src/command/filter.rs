//! `snapbus filter DIRECTIVES` / `snapbus filter --reset`: set or remove the bus filter.
//!
//! The rule: while the bus has a filter, it is in force in every producer on the bus, running
//! or started later, in place of the producer's own `SNAPBUS_FILTER`; `--reset` removes it and
//! every producer goes back to its own. `snapbus ls` shows both. A filter holds at most 256
//! directives in 16 KiB (`snapbus_bus::level::MAX_FILTER_*`; the broker holds to the same).

use anyhow::{Context, bail};
use snapbus::Filter;

use crate::bus::{bus_dir, connect};
use crate::cli::FilterArgs;

pub(crate) fn run(args: &FilterArgs) -> anyhow::Result<()> {
    // Empty directives are the protocol's reset; a user's empty string is more likely a
    // mistake (an unset shell variable) than a wish to reset, so it is refused.
    let canonical = match (&args.directives, args.reset) {
        (_, true) => String::new(),
        (Some(d), false) if d.trim().is_empty() => bail!(
            "empty filter directives: give a level or TARGET=LEVEL items (e.g. 'info'), or \
             use `snapbus filter --reset` to give producers back their own SNAPBUS_FILTER"
        ),
        (Some(d), false) => d
            .parse::<Filter>()
            .context("invalid filter directives")?
            .to_string(),
        (None, false) => bail!("give filter directives, or --reset"),
    };
    let dir = bus_dir(&args.bus)?;
    connect(&dir)?.set_filter(&canonical)?;
    if canonical.is_empty() {
        crate::stdout::line(format_args!(
            "bus filter of '{}' removed: every producer uses its own SNAPBUS_FILTER",
            dir.name()
        ))?;
    } else {
        crate::stdout::line(format_args!(
            "filter '{canonical}' set on bus '{}': in force in every producer, now and later, \
             until `snapbus filter --reset`",
            dir.name()
        ))?;
    }
    Ok(())
}
