//! Workers: they split the groups between them, and a restarted one does not emit a window
//! twice.

use super::*;
use snapbus_consumers::aggregator::{Aggregator, AggregatorOptions, EXPERIMENT, Resume, Window};

use crate::common::lag;

#[test]
fn workers_split_the_groups_with_nothing_counted_twice_and_nothing_missed() {
    let run = |worker: u32, workers: u32| {
        let mut opts = AggregatorOptions::new(Window::Episode);
        opts.group_by = vec!["step".into()];
        (opts.worker, opts.workers) = (worker, workers);
        let mut agg = Aggregator::new(opts, Sink::new());
        let mut feed = Feed::new(&[1, 2]);
        for episode in 0..3 {
            for s in 0..12 {
                for lane in [1, 2] {
                    feed.send(&mut agg, lane, &step(lane, 0, episode, s), 5);
                }
            }
        }
        feed.end(&mut agg, 1);
        feed.end(&mut agg, 2);
        (summaries(agg.sink()), agg.stats())
    };
    let (one, _) = run(0, 1);
    assert_eq!(one.len(), 2 * 12 * (3 + 1));
    let mut union = Vec::new();
    let mut busy = 0;
    let mut total = 0;
    for w in 0..3 {
        let (mine, stats) = run(w, 3);
        busy += usize::from(!mine.is_empty());
        total += stats.summarized;
        assert_eq!(stats.summarized + stats.other_workers, 2 * 12 * 3);
        union.extend(mine);
    }
    assert!(busy >= 2, "24 groups all hashed to one worker");
    assert_eq!(
        total,
        2 * 12 * 3,
        "every record summarized by exactly one worker"
    );
    // Debug strings: NaN (an empty statistic) equals NaN there.
    let key = |v: &[Summary]| -> BTreeMap<_, _> {
        v.iter().map(|s| (s.key(), format!("{s:?}"))).collect()
    };
    assert_eq!(union.len(), one.len(), "no summary twice");
    assert_eq!(key(&union), key(&one));
}

#[test]
fn a_restarted_worker_does_not_emit_a_window_twice_yet_its_experiment_counts_everything() {
    let steps: Vec<Step> = (0..20).map(|i| step(1, 0, i / 5, i % 5)).collect();
    // First run: sees 13 records (episodes 0 and 1 closed, episode 2 open), then crashes.
    let mut first = Aggregator::new(AggregatorOptions::new(Window::Episode), Sink::new());
    let mut feed = Feed::new(&[1]);
    steps[..13]
        .iter()
        .for_each(|st| feed.send(&mut first, 1, st, 7));
    let emitted = first.sink().clone();
    assert_eq!(summaries(&emitted).len(), 2);
    drop(first);

    let mut resume = Resume::default();
    for (d, p) in &emitted {
        resume.add_summary(d, p, Window::Episode);
    }
    assert_eq!((resume.summaries, resume.groups()), (2, 1));

    // Second run, the ring still holding everything: re-reads from record 0.
    let mut second = Aggregator::new(AggregatorOptions::new(Window::Episode), Sink::new());
    second.resume_from(resume.clone());
    let mut feed = Feed::new(&[1]);
    steps.iter().for_each(|st| feed.send(&mut second, 1, st, 7));
    feed.end(&mut second, 1);
    let again = summaries(second.sink());
    let indices: Vec<(String, u64)> = again.iter().map(|s| (s.window.clone(), s.index)).collect();
    assert_eq!(
        indices,
        [
            ("episode".into(), 2),
            ("episode".into(), 3),
            (EXPERIMENT.into(), 4)
        ]
    );
    assert_eq!(second.stats().already_emitted, 2);
    check(&again[2], &steps);
    check(&again[0], &steps[10..15]);

    // Third case: the ring lost records 0..=11 before the restart. The loss is reported, the
    // window already emitted is not emitted again, and nothing is double counted.
    let mut third = Aggregator::new(AggregatorOptions::new(Window::Episode), Sink::new());
    third.resume_from(resume);
    let feed = Feed::new(&[1]);
    third.on_lag(lag(1, &feed.producers[&1], 12)).expect("lag");
    for (i, st) in steps.iter().enumerate().skip(12) {
        feed.send_at(&mut third, 1, st, 7, i as u64);
    }
    feed.end(&mut third, 1);
    let got = summaries(third.sink());
    let indices: Vec<(u64, u64, u64)> = got.iter().map(|s| (s.index, s.count, s.lost)).collect();
    // Episode 2 (records 10..15) is re-formed from 12..15 only: 3 records, 12 lost.
    // The experiment merges the two windows this run saw (its `index`), with the loss.
    assert_eq!(indices, [(2, 3, 12), (3, 5, 0), (2, 8, 12)]);
    assert_eq!(got[2].window, EXPERIMENT);
}
