//! Lost records are reported by their windows. Bad payloads, summaries and missing group
//! fields are skipped, not fatal.

use super::*;
use snapbus_bus::subscriber::Glob;
use snapbus_consumers::aggregator::{Aggregator, AggregatorOptions, EXPERIMENT, Window};

use crate::common::lag;

#[test]
fn loss_is_reported_by_the_windows_it_fell_in_and_by_the_experiment() {
    let mut agg = Aggregator::new(AggregatorOptions::new(Window::Episode), Sink::new());
    let mut feed = Feed::new(&[1]);
    let info = feed.producers[&1].clone();
    for i in 0..4 {
        feed.send(&mut agg, 1, &step(1, 0, 0, i), 1);
    }
    agg.on_lag(lag(1, &info, 3)).expect("lag");
    for i in 0..4 {
        feed.send(&mut agg, 1, &step(1, 0, 1, i), 1);
    }
    agg.on_lag(lag(1, &info, 2)).expect("lag");
    feed.end(&mut agg, 1);
    let lost: Vec<(String, u64)> = summaries(agg.sink())
        .iter()
        .map(|s| (s.window.clone(), s.lost))
        .collect();
    assert_eq!(
        lost,
        [
            ("episode".into(), 3),
            ("episode".into(), 2),
            (EXPERIMENT.into(), 5)
        ]
    );
    assert_eq!(agg.stats().lost, 5);
}

#[test]
fn malformed_payloads_summary_schemas_and_missing_group_fields_are_skipped_not_fatal() {
    let mut agg = Aggregator::new(AggregatorOptions::new(Window::Episode), Sink::new());
    let mut feed = Feed::new(&[1]);
    let good = step(1, 0, 0, 1).encode_to_vec().expect("encode");
    let schema = Arc::clone(&feed.schema);
    for cut in [0, 1, 7, good.len() - 1] {
        feed.send_raw(&mut agg, 1, &good[..cut], 1, 0, &schema);
    }
    let mut bad_enum = good.clone();
    // The enum tag of `mode` (after episode, step and the 4-byte string "env0").
    let at = 4 + 4 + 8 + 4;
    bad_enum[at..at + 4].copy_from_slice(&9u32.to_le_bytes());
    feed.send_raw(&mut agg, 1, &bad_enum, 1, 0, &schema);
    assert_eq!(agg.stats().skipped, 5);
    feed.send(&mut agg, 1, &step(1, 0, 0, 1), 1);
    feed.end(&mut agg, 1);
    let all = summaries(agg.sink());
    assert_eq!(all.len(), 2);
    assert_eq!(all[0].count, 1);

    // Summaries are not summarized again…
    let summary_schema = Arc::clone(&agg.sink()[0].0);
    let summary_payload = agg.sink()[0].1.clone();
    let mut agg2 = Aggregator::new(AggregatorOptions::new(Window::Episode), Sink::new());
    let feed2 = Feed::new(&[1]);
    feed2.send_raw(&mut agg2, 1, &summary_payload, 1, 0, &summary_schema);
    assert_eq!((agg2.stats().skipped, agg2.stats().summarized), (1, 0));
    // …unless asked for by a glob ending in `.summary`.
    let mut opts = AggregatorOptions::new(Window::Steps(1));
    opts.globs = vec![Glob::new("agg.*.summary").expect("glob")];
    let mut agg3 = Aggregator::new(opts, Sink::new());
    feed2.send_raw(&mut agg3, 1, &summary_payload, 1, 0, &summary_schema);
    assert_eq!(agg3.stats().summarized, 1);
    assert_eq!(agg3.sink()[0].0.id(), "agg.step.summary.summary");

    // A group-by field the schema lacks (or that is not a scalar): the schema is skipped.
    for field in ["nope", "hist", "info"] {
        let mut opts = AggregatorOptions::new(Window::Episode);
        opts.group_by = vec![field.into()];
        let mut agg = Aggregator::new(opts, Sink::new());
        let mut feed = Feed::new(&[1]);
        feed.send(&mut agg, 1, &step(1, 0, 0, 0), 1);
        feed.end(&mut agg, 1);
        assert_eq!(agg.stats().skipped, 1, "{field}");
        assert!(agg.sink().is_empty());
    }
}
