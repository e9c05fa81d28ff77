//! What makes a consumer one of [`KINDS`](super::KINDS): [`BuiltinConsumer`], the clap `Args`
//! struct of its verb with its names and hooks; [`forward`], the command line `attach` hands
//! the broker; [`restart_count`]. A leaf: the verbs implement it without importing the
//! registry.

use anyhow::Context;
use clap::parser::ValueSource;
use clap::{ArgMatches, Args, FromArgMatches};
use snapbus_bus::client::Attached;
use snapbus_bus::runtime::BusDir;

use crate::announce::announce;
use crate::cli::BusArgs;

/// A built-in consumer: its flags (this clap `Args` struct), its foreground verb, and what
/// `attach` checks and says about it.
pub(crate) trait BuiltinConsumer: Args + FromArgMatches {
    /// The name after `attach`: `recorder`.
    const KIND: &'static str;
    /// The foreground verb: `record`.
    const VERB: &'static str;
    /// The verb's description in `snapbus --help` (no final period, as clap prints it).
    const VERB_ABOUT: &'static str;
    /// The kind's description in `snapbus attach --help`.
    const ATTACH_ABOUT: &'static str;
    /// For a consumer that splits its work between workers (it then has a `--worker I/N` flag,
    /// id `worker`): its description in `snapbus spawn --help`.
    const SPAWN_ABOUT: Option<&'static str> = None;
    /// Ids of the flags whose values are paths: forwarded made absolute (relative to the
    /// caller's working directory, which is also the supervised consumer's).
    const PATH_FLAGS: &'static [&'static str] = &[];

    /// Which bus it reads.
    fn bus(&self) -> &BusArgs;

    /// Runs it in this terminal (the foreground verb, and `attach --foreground`).
    fn run(&self) -> anyhow::Result<()>;

    /// What `attach` and `spawn` check before starting it (its arguments beyond clap's parse,
    /// the file system, the bus); `who` names the verb in warnings.
    fn check(&self, dir: &BusDir, who: &'static str) -> anyhow::Result<()> {
        let _ = (dir, who);
        Ok(())
    }

    /// What it reads the bus into, for `attach`'s message.
    fn what(&self) -> String;

    /// Prints what `attach` prints once the broker has started it: its id on stdout and a line
    /// on stderr.
    fn announce(&self, dir: &BusDir, started: &Attached) -> anyhow::Result<()> {
        announce(dir, Self::KIND, started, &self.what())
    }

    /// The command line the broker runs for it (after `snapbus`), from its parsed arguments `m`
    /// without the flags in `skip`: by default what the user gave ([`forward`]).
    fn argv(&self, m: &ArgMatches, dir: &BusDir, skip: &[&str]) -> anyhow::Result<Vec<String>> {
        forward::<Self>(m, dir, skip)
    }
}

/// The command line a supervised consumer `T` runs: its verb, `--bus=NAME`, then every flag of
/// `T` the user gave in `m` (not `--bus`, nor those in `skip`), each occurrence as
/// `--flag=VALUE` (a bare `--flag` for a flag without a value), in the order `T` declares
/// them; the values of [`BuiltinConsumer::PATH_FLAGS`] made absolute. `T`'s defaults are not
/// repeated: the consumer parses with the same parser.
pub(crate) fn forward<T: BuiltinConsumer>(
    m: &ArgMatches,
    dir: &BusDir,
    skip: &[&str],
) -> anyhow::Result<Vec<String>> {
    // `--bus=NAME`: a name can never be read as an option.
    let mut argv = vec![T::VERB.to_owned(), format!("--bus={}", dir.name())];
    let cmd = T::augment_args(clap::Command::new(T::VERB));
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        if id == "bus" || skip.contains(&id) || m.value_source(id) != Some(ValueSource::CommandLine)
        {
            continue;
        }
        let flag = match (arg.get_long(), arg.get_short()) {
            (Some(long), _) => format!("--{long}"),
            (None, Some(short)) => format!("-{short}"),
            (None, None) => anyhow::bail!("{id}: a positional argument cannot be forwarded"),
        };
        if !arg.get_action().takes_values() {
            let times = match arg.get_action() {
                clap::ArgAction::Count => m.get_count(id),
                _ => 1,
            };
            argv.extend((0..times).map(|_| flag.clone()));
            continue;
        }
        for value in m.get_raw_occurrences(id).into_iter().flatten().flatten() {
            let value = if T::PATH_FLAGS.contains(&id) {
                std::path::absolute(value)
                    .with_context(|| format!("resolving {}", value.to_string_lossy()))?
                    .display()
                    .to_string()
            } else {
                value.to_string_lossy().into_owned()
            };
            argv.push(format!("{flag}={value}"));
        }
    }
    Ok(argv)
}

/// How many times the broker has restarted this consumer (`SNAPBUS_RESTART`; 0: a first start,
/// or not supervised).
pub(crate) fn restart_count() -> u32 {
    std::env::var("SNAPBUS_RESTART")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// `bus` and `run` as most consumers write them: their options hold `bus: BusArgs`, and their
/// verb is the `run(&Args)` of the module the `impl` is in.
macro_rules! bus_and_run {
    () => {
        fn bus(&self) -> &crate::cli::BusArgs {
            &self.bus
        }

        fn run(&self) -> anyhow::Result<()> {
            run(self)
        }
    };
}
pub(crate) use bus_and_run;
