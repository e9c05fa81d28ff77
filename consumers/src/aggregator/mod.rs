//! The aggregator: step-level records turned into per-window and per-experiment statistics,
//! emitted back onto the bus as `<schema>.summary` snapshots (and, optionally, CSV rows).
//!
//! # What is summarized
//!
//! - **Groups.** Records are grouped by source producer (its lane) and by the values of the
//!   `group_by` fields (dotted paths to scalars, strings or enums; enums by variant name).
//! - **Fields.** Every numeric field (integers, floats, bools as 0/1, options of those) at any
//!   depth of structs and tuples, except the group-by and window fields; fixed arrays of up to
//!   16 numbers element by element (`position.0`); longer arrays, sequences and tensors by
//!   their per-record mean, minimum and maximum (`observation.mean`, …). `fields` narrows this
//!   to some dotted paths. Values inside enums, maps and sequences of structs are not
//!   summarized. NaN values are not counted. A `fields` glob that matches no field of a schema,
//!   and a schema without the episode field (`Window::Episode`), are warned about on stderr
//!   when the schema is first met; [`Aggregator::unmatched_options`] lists what matched no
//!   schema at all.
//! - **Statistics** per field: count, mean, std (population), min, max, last, and p50/p95/p99:
//!   the value at rank ⌊p·(n−1)⌋ of the sorted values, exact for up to
//!   [`EXACT_QUANTILES_UP_TO`] values, beyond that from a DDSketch (`sketches-ddsketch`),
//!   within [`QUANTILE_RELATIVE_ACCURACY`] of it.
//! - **Windows** ([`Window`]): per episode (the window closes when the episode field changes),
//!   every N records of a group, or per T seconds of record time (closed by a later record, or
//!   one second after its end by the wall clock; a record that arrives later still counts in
//!   the experiment, never in a second window of that bucket). Schemas without the episode
//!   field are summarized per experiment only.
//! - **Experiment**: when a producer ends (or dies and its lane has been read to the end), its
//!   open windows close and one `window = "experiment"` summary per group is emitted: the merge
//!   of all the windows this worker closed (`index` = their number).
//! - **Producers combined** (`combine_producers`): the producers with the same name and session
//!   tag are one run (the workers of a parallel experiment). Their windows stay per producer;
//!   their experiment summaries become one per group over all of them, emitted once every
//!   producer of the run has ended and none has joined for `combine_grace` (or by
//!   [`Aggregator::finish`] at the end, grace or not). Its `producer` is their name,
//!   `producer_pid` 0, `producer_lane` the run's id (a hash of name and session tag), `index` the
//!   windows of all of them, `lost` the sum of their losses, `first_seq`/`last_seq` 0 (record
//!   numbers are per lane). A producer of the run that joins after it was emitted gives a
//!   later summary covering it too (the latest supersedes the earlier).
//!
//! # The summary schema
//!
//! `<schema>.summary`, the source schema's version: `producer`, `producer_pid`,
//! `producer_lane`, `group { <group-by fields> }` (only with `group_by`), `window`
//! (`episode`, `steps:N`, `secs:T` or `experiment`), `index` (the episode number, the window's
//! number within the group, or the T-second bucket since the epoch), `count` (records),
//! `lost` (records of the producer — any schema — overwritten before they were read, since
//! the group's previous window closed; for the experiment: all of them; with
//! `count_history_as_lost` in the run options, as `snapbus aggregate` sets it, this includes
//! records already overwritten when the worker started), `first_t_nanos`,
//! `last_t_nanos`, `first_seq`, `last_seq` (the lane's record numbers), and `stats { <field>
//! { count, mean, std, min, max, last, p50, p95, p99 } }` with dotted fields as nested structs.
//! Summary schemas are never summarized again unless a subscription glob ends in `.summary`.
//!
//! # Workers
//!
//! With `workers = N`, worker `i` summarizes the groups whose hash of (schema id, producer
//! lane, group values) is `i` modulo N (XXH3-64), so N workers see every group exactly once
//! (with `combine_producers`, the run's id instead of the lane: a run's group is one worker's).
//!
//! # Restarts
//!
//! A restarted worker ([`Resume`]) reads what its earlier runs emitted (their summaries stay
//! in the ring), re-reads the rings from the oldest record, and does not emit again a window
//! that was emitted (known from each group's last emitted `last_seq`); the records of those
//! windows still count towards the experiment summary. What the rings no longer hold is
//! reported as `lost`. A combined experiment summary is emitted again only if it covers more
//! records than the one an earlier run emitted.
//!
//! # Example: summaries of every schema on a bus, per 100 records, into CSV files
//!
//! ```no_run
//! use snapbus_bus::runtime::{BusDir, BusName};
//! use snapbus_consumers::aggregator::{Aggregator, AggregatorOptions, PublisherSink, Window};
//! use snapbus_consumers::{RunOptions, run};
//!
//! let dir = BusDir::locate(&BusName::resolve(None)?);
//! let mut opts = AggregatorOptions::new(Window::Steps(100));
//! opts.csv_dir = Some("summaries".into());
//! let sink = PublisherSink::start(&dir, "aggregator")?;
//! let mut run_opts = RunOptions::new("aggregator");
//! run_opts.subscribe.skip_lanes = vec![sink.publisher().info().lane_id];
//! run(&dir, &run_opts, &mut Aggregator::new(opts, sink), None)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod combine;
mod consumer;
mod emit;
mod group;
mod matches;
mod options;
mod resume;
mod sink;
mod state;
mod stats;
mod summary;

pub use emit::AggregatorStats;
pub use matches::option_mismatches;
pub use options::{AggregatorOptions, Window};
pub use resume::{Resume, previous_summaries};
pub use sink::{PublisherSink, SummarySink};
pub use state::Aggregator;
pub use stats::{EXACT_QUANTILES_UP_TO, QUANTILE_RELATIVE_ACCURACY};
pub use summary::{EXPERIMENT, SUMMARY_SUFFIX};
