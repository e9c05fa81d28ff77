//! `snapbus spawn aggregator -n N …`: starts N supervised aggregator workers (`--worker 1/N` …
//! `N/N`) that split the groups between them, and prints their ids, one per line, once all
//! are subscribed. If one fails to start, the ones already started are detached again.

use anyhow::bail;

use crate::cli::{DetachArgs, Restart, SpawnArgs, SpawnKind};
use crate::command::{aggregate, attach, detach};

pub(crate) fn run(args: SpawnArgs) -> anyhow::Result<()> {
    let SpawnKind::Aggregator {
        workers,
        aggregate: args,
        restart,
    } = args.kind;
    if args.worker != (1, 1) {
        bail!("--worker is set by spawn itself (workers 1/{workers} … {workers}/{workers})");
    }
    // Check everything before starting anything.
    let argvs = (1..=workers)
        .map(|i| aggregate::argv(&args, (i, workers)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let dir = crate::bus::bus_dir(&args.bus)?;
    aggregate::check_schemas(&args, &dir, "snapbus spawn")?;
    aggregate::warn_field_mismatches(&args, &dir, "snapbus spawn")?;
    let mut started = Vec::new();
    for (i, argv) in argvs.into_iter().enumerate() {
        let what = format!("<schema>.summary snapshots (worker {}/{workers})", i + 1);
        match attach::attach(
            "aggregator",
            argv,
            &args.bus,
            restart == Restart::OnFailure,
            &what,
        ) {
            Ok(id) => started.push(id),
            Err(e) => {
                for id in started {
                    let _ = detach::run(&DetachArgs {
                        id,
                        bus: args.bus.clone(),
                    });
                }
                return Err(e.context(format!("starting worker {}/{workers}", i + 1)));
            }
        }
    }
    Ok(())
}
