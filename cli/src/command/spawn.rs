//! `snapbus spawn aggregator -n N …`: starts N supervised workers of a consumer that splits its
//! work between them (`--worker 1/N` … `N/N`; the aggregator splits the groups), and prints
//! their ids, one per line, once all are subscribed. The arguments are the consumer's own, as
//! for `attach`. If one fails to start, the ones already started are detached again.

use anyhow::bail;
use clap::{ArgMatches, FromArgMatches};

use crate::bus::bus_dir;
use crate::cli::{DetachArgs, Restart, SpawnRestart, SpawnWorkers};
use crate::command::{attach, detach};
use crate::consumer_kinds::kind::BuiltinConsumer;

/// `snapbus spawn KIND …` for consumer `T` (which has a `--worker I/N` flag), with `m` its
/// parsed arguments.
pub(crate) fn spawn_kind<T: BuiltinConsumer>(m: &ArgMatches) -> anyhow::Result<()> {
    let SpawnWorkers { workers } = SpawnWorkers::from_arg_matches(m)?;
    let SpawnRestart { restart, wait } = SpawnRestart::from_arg_matches(m)?;
    let args = T::from_arg_matches(m)?;
    crate::bus::wait_for_bus(&bus_dir(args.bus())?, &wait, "snapbus spawn")?;
    if m.get_one::<(u32, u32)>("worker") != Some(&(1, 1)) {
        bail!("--worker is set by spawn itself (workers 1/{workers} … {workers}/{workers})");
    }
    // Check everything before starting anything.
    let dir = bus_dir(args.bus())?;
    args.check(&dir, "snapbus spawn")?;
    let argvs = (1..=workers)
        .map(|i| {
            let mut argv = args.argv(m, &dir, &["worker"])?;
            argv.push(format!("--worker={i}/{workers}"));
            Ok(argv)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut started = Vec::new();
    // An id a closed stdout lost: said once every worker runs.
    let mut lost = None;
    for (i, argv) in argvs.into_iter().enumerate() {
        let what = format!("{} (worker {}/{workers})", args.what(), i + 1);
        let result = attach::start(&dir, T::KIND, argv, restart == Restart::OnFailure);
        match result {
            Ok(s) => {
                if let Err(e) = crate::announce::announce(&dir, T::KIND, &s, &what) {
                    lost.get_or_insert(e);
                }
                started.push(s.id);
            }
            Err(e) => {
                for id in started {
                    let _ = detach::run(&DetachArgs {
                        id,
                        bus: args.bus().clone(),
                    });
                }
                return Err(e.context(format!("starting worker {}/{workers}", i + 1)));
            }
        }
    }
    lost.map_or(Ok(()), Err)
}
