//! The consumers the broker can supervise, in one registry, [`KINDS`]: the built-in ones and
//! `python` (a Python consumer class or script, `command/python.rs`, whose command line is its
//! own: [`BuiltinConsumer::argv`]).
//!
//! Each consumer defines its flags once, as a clap `Args` struct in its verb's file
//! (`command/record.rs`, `command/plot.rs`, `command/aggregate.rs`) that implements
//! [`BuiltinConsumer`]. From that one definition come the foreground verb (`snapbus record`),
//! `snapbus attach recorder` (the same flags, plus `--foreground` and `--restart`) and, for a
//! consumer that splits its work between workers, `snapbus spawn KIND -n N`.
//!
//! `attach` parses the arguments with the consumer's own parser in the caller, so that bad
//! arguments fail before anything starts, with clap's message; runs the consumer's own checks
//! against the bus and the file system ([`BuiltinConsumer::check`]); then forwards the
//! arguments the user gave ([`forward`](kind::forward)): each as `--flag=VALUE` (a value is never read as an
//! option), with `--bus=NAME`, path values made absolute, and for `spawn` the worker's
//! `--worker=I/N`.
//!
//! Adding a consumer kind: a file with its `Args` struct and its [`BuiltinConsumer`] impl, and
//! a line in [`KINDS`].
//!
//! The trait, [`forward`](kind::forward) and [`restart_count`](kind::restart_count) live in the leaf [`kind`], and what `attach`
//! prints in `crate::announce`: the verbs import those, and only [`KINDS`] imports the verbs.

use std::fmt;
use std::marker::PhantomData;

use clap::{ArgMatches, Args, FromArgMatches};
use snapbus_bus::runtime::BusDir;

#[cfg(feature = "aggregator")]
use crate::command::aggregate::AggregateArgs;
#[cfg(feature = "bridge")]
use crate::command::bridge::BridgeArgs;
#[cfg(feature = "foxglove")]
use crate::command::foxglove::FoxgloveArgs;
use crate::command::monty::MontyArgs;
#[cfg(feature = "otlp")]
use crate::command::otlp::OtlpArgs;
#[cfg(feature = "plotter")]
use crate::command::plot::PlotArgs;
#[cfg(feature = "prometheus")]
use crate::command::prometheus::PrometheusArgs;
use crate::command::python::PythonArgs;
use crate::command::record::RecordArgs;
use crate::command::rerun::RerunArgs;
use crate::command::{attach, spawn};

pub(crate) mod kind;

use kind::BuiltinConsumer;

/// The built-in consumers, in the order `attach --help` lists them.
pub(crate) const KINDS: &[ConsumerKind] = &[
    ConsumerKind::of::<RecordArgs>(),
    #[cfg(feature = "plotter")]
    ConsumerKind::of::<PlotArgs>(),
    #[cfg(feature = "aggregator")]
    ConsumerKind::of::<AggregateArgs>(),
    ConsumerKind::of::<PythonArgs>(),
    #[cfg(feature = "prometheus")]
    ConsumerKind::of::<PrometheusArgs>(),
    #[cfg(feature = "otlp")]
    ConsumerKind::of::<OtlpArgs>(),
    #[cfg(feature = "foxglove")]
    ConsumerKind::of::<FoxgloveArgs>(),
    ConsumerKind::of::<RerunArgs>(),
    ConsumerKind::of::<MontyArgs>(),
    #[cfg(feature = "bridge")]
    ConsumerKind::of::<BridgeArgs>(),
];

/// One entry of [`KINDS`]: a consumer's names, descriptions and clap command, and its verbs.
pub(crate) struct ConsumerKind {
    /// The name after `attach`.
    pub(crate) name: &'static str,
    /// The foreground verb.
    pub(crate) verb: &'static str,
    /// The description under `attach --help`.
    pub(crate) about: &'static str,
    verb_about: &'static str,
    spawn_about: Option<&'static str>,
    args: fn(clap::Command) -> clap::Command,
    run: fn(&ArgMatches) -> anyhow::Result<()>,
    attach: fn(&ArgMatches) -> anyhow::Result<()>,
    spawn: fn(&ArgMatches) -> anyhow::Result<()>,
    #[cfg_attr(
        not(test),
        expect(
            dead_code,
            reason = "only the tests forward knowing the kind but not its type"
        )
    )]
    forward: fn(&ArgMatches, &BusDir, &[&str]) -> anyhow::Result<Vec<String>>,
}

impl ConsumerKind {
    /// The entry of consumer `T`.
    pub(crate) const fn of<T: BuiltinConsumer>() -> Self {
        ConsumerKind {
            name: T::KIND,
            verb: T::VERB,
            about: T::ATTACH_ABOUT,
            verb_about: T::VERB_ABOUT,
            spawn_about: T::SPAWN_ABOUT,
            args: T::augment_args,
            run: run_verb::<T>,
            attach: attach::attach_kind::<T>,
            spawn: spawn::spawn_kind::<T>,
            forward: argv_of::<T>,
        }
    }

    /// The foreground verb's command: `snapbus record …`, with `--wait`.
    //
    // The `about` goes last: an `Args` struct's doc comment sets one too.
    pub(crate) fn verb_command(&self) -> clap::Command {
        crate::cli::WaitArgs::augment_args((self.args)(clap::Command::new(self.verb)))
            .about(self.verb_about)
            .long_about(None)
    }

    /// `snapbus attach KIND …`: the verb's flags and how to supervise it.
    pub(crate) fn attach_command(&self) -> clap::Command {
        let cmd = (self.args)(clap::Command::new(self.name));
        crate::cli::SuperviseArgs::augment_args(cmd)
            .about(self.about)
            .long_about(None)
    }

    /// `snapbus spawn KIND -n N …`, for a consumer that splits its work between workers.
    pub(crate) fn spawn_command(&self) -> Option<clap::Command> {
        let about = self.spawn_about?;
        let cmd = crate::cli::SpawnWorkers::augment_args(clap::Command::new(self.name));
        let cmd = crate::cli::SpawnRestart::augment_args((self.args)(cmd));
        Some(cmd.about(about).long_about(None))
    }
}

impl fmt::Debug for ConsumerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

fn run_verb<T: BuiltinConsumer>(m: &ArgMatches) -> anyhow::Result<()> {
    let args = T::from_arg_matches(m)?;
    let wait = crate::cli::WaitArgs::from_arg_matches(m)?;
    let dir = crate::bus::bus_dir(args.bus())?;
    crate::bus::wait_for_bus(&dir, &wait, &format!("snapbus {}", T::VERB))?;
    args.run()
}

fn argv_of<T: BuiltinConsumer>(
    m: &ArgMatches,
    dir: &BusDir,
    skip: &[&str],
) -> anyhow::Result<Vec<String>> {
    T::from_arg_matches(m)?.argv(m, dir, skip)
}

/// A consumer kind and the arguments clap parsed for it: a foreground verb (`snapbus record
/// …`), `attach KIND …` or `spawn KIND …`.
#[derive(Debug, Clone)]
pub(crate) struct KindArgs {
    /// Which consumer.
    pub(crate) kind: &'static ConsumerKind,
    /// Its parsed arguments (with `attach`'s or `spawn`'s own).
    pub(crate) matches: ArgMatches,
}

impl KindArgs {
    /// The kind of the subcommand of `m` whose name `name_of` gives.
    fn from_subcommand(
        m: &ArgMatches,
        name_of: fn(&ConsumerKind) -> &'static str,
    ) -> Result<Self, clap::Error> {
        let missing = || clap::Error::new(clap::error::ErrorKind::MissingSubcommand);
        let (name, sub) = m.subcommand().ok_or_else(missing)?;
        let kind = KINDS
            .iter()
            .find(|k| name_of(k) == name)
            .ok_or_else(|| clap::Error::new(clap::error::ErrorKind::InvalidSubcommand))?;
        Ok(KindArgs {
            kind,
            matches: sub.clone(),
        })
    }
}

/// The foreground verbs of [`KINDS`] (`record`, `plot`, `aggregate`), flattened into the
/// top-level commands.
#[derive(Debug, Clone)]
pub(crate) struct ConsumerVerb(pub(crate) KindArgs);

impl ConsumerVerb {
    /// Runs the verb in this terminal.
    pub(crate) fn run(&self) -> anyhow::Result<()> {
        (self.0.kind.run)(&self.0.matches)
    }
}

impl FromArgMatches for ConsumerVerb {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        KindArgs::from_subcommand(m, |k| k.verb).map(ConsumerVerb)
    }
    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl clap::Subcommand for ConsumerVerb {
    fn augment_subcommands(cmd: clap::Command) -> clap::Command {
        cmd.subcommands(KINDS.iter().map(ConsumerKind::verb_command))
    }
    fn augment_subcommands_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_subcommands(cmd)
    }
    fn has_subcommand(name: &str) -> bool {
        KINDS.iter().any(|k| k.verb == name)
    }
}

/// `attach` or `spawn`: a verb that starts consumers of [`KINDS`] under the broker.
pub(crate) trait Supervisor: fmt::Debug + Clone {
    /// The subcommand of `kind` under this verb (none: `kind` cannot be started so).
    fn command(kind: &ConsumerKind) -> Option<clap::Command>;
    /// Runs this verb for `kind` with the arguments `m`.
    fn run(kind: &ConsumerKind, m: &ArgMatches) -> anyhow::Result<()>;
}

/// `snapbus attach`: starts one consumer (or runs it in this terminal).
#[derive(Debug, Clone)]
pub(crate) struct Attach;

impl Supervisor for Attach {
    fn command(kind: &ConsumerKind) -> Option<clap::Command> {
        Some(kind.attach_command())
    }
    fn run(kind: &ConsumerKind, m: &ArgMatches) -> anyhow::Result<()> {
        (kind.attach)(m)
    }
}

/// `snapbus spawn`: starts N workers of a consumer that splits its work between them.
#[derive(Debug, Clone)]
pub(crate) struct Spawn;

impl Supervisor for Spawn {
    fn command(kind: &ConsumerKind) -> Option<clap::Command> {
        kind.spawn_command()
    }
    fn run(kind: &ConsumerKind, m: &ArgMatches) -> anyhow::Result<()> {
        (kind.spawn)(m)
    }
}

/// Options of `snapbus attach` or `spawn` (`S`): a kind of [`KINDS`] and its arguments.
#[derive(Debug, Clone)]
pub(crate) struct SupervisedArgs<S: Supervisor>(pub(crate) KindArgs, PhantomData<S>);

/// Options of `snapbus attach`.
pub(crate) type AttachArgs = SupervisedArgs<Attach>;

/// Options of `snapbus spawn`.
pub(crate) type SpawnArgs = SupervisedArgs<Spawn>;

impl<S: Supervisor> SupervisedArgs<S> {
    /// Starts the consumer(s) under the broker (or in this terminal, `attach --foreground`).
    pub(crate) fn run(&self) -> anyhow::Result<()> {
        S::run(self.0.kind, &self.0.matches)
    }
}

impl<S: Supervisor> FromArgMatches for SupervisedArgs<S> {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let args = KindArgs::from_subcommand(m, |k| k.name)?;
        Ok(SupervisedArgs(args, PhantomData))
    }
    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl<S: Supervisor> Args for SupervisedArgs<S> {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        cmd.subcommand_required(true)
            .arg_required_else_help(true)
            .subcommands(KINDS.iter().filter_map(S::command))
    }
    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

#[cfg(test)]
mod tests {
    use clap::parser::ValueSource;
    use clap::{Arg, CommandFactory};

    use super::*;
    use crate::cli::BusArgs;
    use crate::command::Cli;

    /// A flag as the user sees it: names, action, values.
    fn shape(a: &Arg) -> String {
        format!(
            "{:?} {:?} {:?} {:?} {:?} {:?} {:?} {}",
            a.get_long(),
            a.get_short(),
            a.get_action(),
            a.get_num_args(),
            a.get_possible_values()
                .iter()
                .map(|v| v.get_name().to_owned())
                .collect::<Vec<_>>(),
            a.get_default_values(),
            a.get_value_names(),
            a.is_required_set(),
        )
    }

    fn sub<'a>(cmd: &'a clap::Command, path: &[&str]) -> &'a clap::Command {
        path.iter().fold(cmd, |c, name| {
            c.find_subcommand(name)
                .unwrap_or_else(|| panic!("no subcommand {name} in {}", c.get_name()))
        })
    }

    /// Every flag of each consumer's foreground verb is one of `attach KIND` (and of `spawn
    /// KIND`), the same flag; `attach` adds only its own.
    #[test]
    fn attach_and_spawn_accept_every_flag_of_the_foreground_verb() {
        let cli = Cli::command();
        for kind in KINDS {
            let verb = sub(&cli, &[kind.verb]);
            let mut users = vec![(vec!["attach", kind.name], vec!["foreground", "restart"])];
            if kind.spawn_about.is_some() {
                users.push((vec!["spawn", kind.name], vec!["workers", "restart"]));
            }
            for (path, own) in users {
                let user = sub(&cli, &path);
                for a in verb.get_arguments() {
                    let b = user
                        .get_arguments()
                        .find(|b| b.get_id() == a.get_id())
                        .unwrap_or_else(|| {
                            panic!("{path:?} lacks {} of {}", a.get_id(), kind.verb)
                        });
                    assert_eq!(shape(a), shape(b), "{path:?}: {}", a.get_id());
                }
                let extra: Vec<_> = user
                    .get_arguments()
                    .map(|b| b.get_id().as_str())
                    .filter(|id| verb.get_arguments().all(|a| a.get_id() != id))
                    .collect();
                assert_eq!(extra, own, "{path:?}");
            }
        }
    }

    /// Every flag, given a value other than its default, on each consumer's command lines
    /// (several where flags exclude each other).
    fn samples(kind: &str, dir: &str) -> Vec<Vec<String>> {
        let args = match kind {
            "recorder" => {
                "-o OUT/r.mcap --schema a.* --schema=-b --rotate-mb 3 --from oldest --force \
                 --compression none\n\
                 --dir OUT/runs --keep-bytes 5M --rotate-mb 2"
            }
            "plotter" => "--schema a.* --schema=-b --port 1234 --history 50 --from latest",
            "foxglove" => "--schema a.* --schema=-b --port 1234 --history 50 --from latest",
            "aggregator" => {
                "--schema a.* --group-by mode --group-by env.id --window steps:7 \
                 --episode-field ep --field r* --field=-x --csv OUT/csv --from latest \
                 --until-end --worker 2/3 --combine-producers --combine-grace-secs 1.5"
            }
            // An interpreter that resolves to itself; the target and its arguments.
            "python" => "--python /bin/sh --pythonpath OUT -- mod:Cls --glob a.* --start oldest",
            "prometheus" => {
                "--schema a.* --schema=-b --listen 127.0.0.1:1234 --port 99 --max-series 50 \
                 --series-ttl 90s --token-file OUT/token --from latest"
            }
            "otlp" => {
                "--endpoint http://127.0.0.1:1 --metrics-endpoint http://h:2/m \
                 --logs-endpoint http://h:3/l --traces-endpoint http://h:4/t --signals metrics,logs \
                 --schema a.* --interval 2s --max-queue-bytes 65536 --max-series 50 \
                 --metrics-listen 127.0.0.1:0 --from oldest"
            }
            "rerun" => {
                "--schema a.* --connect rerun+http://127.0.0.1:1/proxy --spawn --save OUT/r.rrd \
                 --timeline ep --from oldest --python /bin/sh"
            }
            "monty" => {
                "--output-dir OUT/res --layout generic --schema a.* --episode-field ep \
                 --mode-field m --run r1 --detailed-per-episode --detailed-episodes 0,2 --wandb proj --from latest --until-end --python /bin/sh"
            }
            "bridge" => {
                "--send --receive --schema a.* --host h1 --from oldest \
                 --zenoh-config OUT/z.json5 --mode client --connect tcp/127.0.0.1:1 \
                 --connect tls/h:2 --listen tcp/127.0.0.1:3"
            }
            other => panic!("add a sample command line for the new consumer kind {other}"),
        };
        args.lines()
            .map(|line| {
                line.split_whitespace()
                    .map(|a| a.replace("OUT", dir))
                    .collect()
            })
            .collect()
    }

    /// What `attach` forwards, parsed by the consumer's own verb, is what the user gave
    /// `attach` (flag by flag, raw values), with the bus named and nothing else added.
    #[test]
    fn forwarded_arguments_parse_back_to_the_given_ones() {
        let tmp = std::env::temp_dir();
        let tmp = tmp.to_str().expect("utf-8 temp dir");
        let bus = BusArgs {
            bus: Some("fwd-test".into()),
        };
        let dir = crate::bus::bus_dir(&bus).expect("bus dir");
        for kind in KINDS {
            let verb = kind.verb_command();
            // The verb's own `--wait` is not forwarded: the broker is up when it starts one.
            let own = |a: &&Arg| a.get_id() != "wait";
            let mut sampled = std::collections::BTreeSet::new();
            for sample in samples(kind.name, tmp) {
                let mut given = vec![kind.name.to_owned(), "--bus=fwd-test".into()];
                given.extend(sample);
                let m = kind
                    .attach_command()
                    .try_get_matches_from(&given)
                    .unwrap_or_else(|e| panic!("{given:?}: {e}"));
                let argv = (kind.forward)(&m, &dir, &[]).expect("forward");
                assert_eq!(argv[..2], [kind.verb.to_owned(), "--bus=fwd-test".into()]);
                let back = verb
                    .clone()
                    .try_get_matches_from(&argv)
                    .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
                for a in verb.get_arguments().filter(own) {
                    let id = a.get_id().as_str();
                    let given_here = |m: &ArgMatches| {
                        m.value_source(id)
                            .is_some_and(|s| s == ValueSource::CommandLine)
                    };
                    assert_eq!(
                        given_here(&m),
                        given_here(&back),
                        "{}: {id} in {argv:?}",
                        kind.name
                    );
                    let raw = |m: &ArgMatches| {
                        m.get_raw(id)
                            .map(|v| v.map(|v| v.to_owned()).collect::<Vec<_>>())
                    };
                    assert_eq!(raw(&m), raw(&back), "{}: {id} in {argv:?}", kind.name);
                    if given_here(&back) {
                        sampled.insert(id.to_owned());
                    }
                }
            }
            // Every flag was in a sample, so every flag was forwarded.
            assert_eq!(
                sampled.len(),
                verb.get_arguments().filter(own).count(),
                "{}: {sampled:?}",
                kind.name
            );
        }
    }

    /// A relative path is forwarded made absolute (the consumer may be restarted by a broker
    /// whose working directory is another).
    #[test]
    #[cfg_attr(not(feature = "aggregator"), allow(clippy::single_element_loop))]
    fn relative_paths_are_forwarded_absolute() {
        let dir = crate::bus::bus_dir(&BusArgs {
            bus: Some("fwd-test".into()),
        })
        .expect("bus dir");
        let cwd = std::env::current_dir().expect("cwd");
        for (kind, flag, given) in [
            ("recorder", "--output", ["recorder", "-o", "rel/r.mcap"]),
            #[cfg(feature = "aggregator")]
            ("aggregator", "--csv", ["aggregator", "--csv", "rel/csv"]),
        ] {
            let kind = KINDS.iter().find(|k| k.name == kind).expect("kind");
            let m = kind
                .attach_command()
                .try_get_matches_from(given)
                .expect("parse");
            let argv = (kind.forward)(&m, &dir, &[]).expect("forward");
            let want = format!("{flag}={}", cwd.join(given[2]).display());
            assert!(argv.contains(&want), "{argv:?} lacks {want}");
        }
    }
}
