//! The aggregator with `combine_producers`: the workers of one run (same name and session
//! tag) give one experiment summary per group, checked against statistics computed here over
//! all their records; the grace period, a worker that joins late, runs kept apart, workers
//! that split the groups, and a restart that does not emit it again.

use std::time::Duration;

use snapbus_consumers::aggregator::{Aggregator, AggregatorOptions, EXPERIMENT, Resume, Window};
use snapbus_consumers::{Consumer, ProducerChange};
use snapbus_schemas::{Value, decode};

use crate::aggregator::{Feed, Sink, Step, Summary, check, step, summaries};

/// A feed of `lanes`, every producer named `name` (one run), unless renamed after.
fn run_of(lanes: &[u64], name: &str) -> Feed {
    let mut feed = Feed::new(lanes);
    for p in feed.producers.values_mut() {
        p.name = name.to_owned();
    }
    feed
}

fn join<C: Consumer>(feed: &Feed, c: &mut C, lane: u64) {
    c.on_producer(ProducerChange::Joined(snapbus_consumers::Producer::from(
        &feed.producers[&lane],
    )))
    .expect("join");
}

/// `episodes` episodes of 3 steps in envs 0 and 1 from producer `lane`: joined, sent, ended.
/// Returns what it sent, per env.
fn work<C: Consumer>(feed: &mut Feed, c: &mut C, lane: u64, episodes: u32) -> [Vec<Step>; 2] {
    join(feed, c, lane);
    let mut sent = [Vec::new(), Vec::new()];
    for episode in 0..episodes {
        for s in 0..3 {
            for env in 0..2 {
                let st = step(lane, env, episode, s);
                feed.send(c, lane, &st, 1_000 * lane + u64::from(s));
                sent[env as usize].push(st);
            }
        }
    }
    feed.end(c, lane);
    sent
}

fn options(grace: Duration) -> AggregatorOptions {
    let mut opts = AggregatorOptions::new(Window::Episode);
    opts.group_by = vec!["env".into()];
    opts.combine_producers = true;
    opts.combine_grace = grace;
    opts
}

fn experiments(sink: &Sink) -> Vec<Summary> {
    summaries(sink)
        .into_iter()
        .filter(|s| s.window == EXPERIMENT)
        .collect()
}

/// `producer_pid` and `producer_lane` of every summary in `sink`.
fn pids_and_lanes(sink: &Sink) -> Vec<(u64, u64)> {
    sink.iter()
        .map(|(desc, payload)| {
            let v = decode(desc.root(), payload).expect("decodes");
            let n = |f: &str| match v.field(f) {
                Some(Value::U32(x)) => u64::from(*x),
                Some(Value::U64(x)) => *x,
                other => panic!("{f}: {other:?}"),
            };
            (n("producer_pid"), n("producer_lane"))
        })
        .collect()
}

#[test]
fn four_workers_of_a_run_give_one_experiment_summary_per_group_over_all_their_records() {
    let mut agg = Aggregator::new(options(Duration::ZERO), Sink::new());
    let mut feed = run_of(&[1, 2, 3, 4], "worker");
    // Four workers running together (their records interleaved), ending one after another.
    let mut all: [Vec<Step>; 2] = [Vec::new(), Vec::new()];
    (1..=4).for_each(|lane| join(&feed, &mut agg, lane));
    for episode in 0..5 {
        for s in 0..3 {
            for lane in 1..=4 {
                for env in 0..2 {
                    let st = step(lane, env, episode, s);
                    feed.send(&mut agg, lane, &st, 1_000 * u64::from(episode) + lane);
                    all[env as usize].push(st);
                }
            }
        }
    }
    for lane in 1..=4 {
        feed.end(&mut agg, lane);
        // Until the last worker ends, no experiment summary (windows only, per worker).
        agg.flush().expect("flush");
        if lane < 4 {
            assert!(experiments(agg.sink()).is_empty(), "after worker {lane}");
        }
    }
    let got = summaries(agg.sink());
    let windows: Vec<&Summary> = got.iter().filter(|s| s.window == "episode").collect();
    assert_eq!(windows.len(), 4 * 2 * 5, "episode windows stay per worker");
    assert!(
        windows
            .iter()
            .all(|w| w.producer == "worker" && w.last_seq > 0),
        "{windows:?}"
    );
    let exp = experiments(agg.sink());
    assert_eq!(exp.len(), 2, "one per env: {exp:?}");
    for e in &exp {
        let env: usize = e.group[0].trim_start_matches("env").parse().expect("env");
        assert_eq!(e.producer, "worker");
        assert_eq!(e.index, 4 * 5, "the windows of every worker");
        assert_eq!((e.first_seq, e.last_seq), (0, 0));
        check(e, &all[env]);
    }
    let (pid, lane) = *pids_and_lanes(agg.sink()).last().expect("a summary");
    assert_eq!(pid, 0, "a combined summary names no process");
    assert!(
        ![1, 2, 3, 4].contains(&lane),
        "its lane is the run's id, not a worker's"
    );
    assert_eq!(agg.stats().experiments, 2);
    // Nothing new: flushing again or finishing emits nothing more.
    agg.flush().expect("flush");
    agg.finish().expect("finish");
    assert_eq!(experiments(agg.sink()).len(), 2);
}

#[test]
fn the_summary_waits_the_grace_period_and_a_late_worker_gives_a_summary_covering_it_too() {
    let mut agg = Aggregator::new(options(Duration::from_secs(3600)), Sink::new());
    let mut feed = run_of(&[1, 2, 3], "worker");
    work(&mut feed, &mut agg, 1, 2);
    agg.flush().expect("flush");
    assert!(
        experiments(agg.sink()).is_empty(),
        "within the grace period"
    );
    // A worker still running: finishing does not emit its run's summary (incomplete).
    join(&feed, &mut agg, 2);
    agg.finish().expect("finish");
    assert!(experiments(agg.sink()).is_empty(), "a worker is live");
    for episode in 0..2 {
        for s in 0..3 {
            for env in 0..2 {
                feed.send(&mut agg, 2, &step(2, env, episode, s), 5);
            }
        }
    }
    feed.end(&mut agg, 2);
    agg.finish().expect("finish");
    let first: Vec<(u64, u64)> = experiments(agg.sink())
        .iter()
        .map(|e| (e.index, e.count))
        .collect();
    assert_eq!(first, [(4, 12), (4, 12)], "two workers, two envs");
    // A worker of the same run started later: the next summary covers all three.
    work(&mut feed, &mut agg, 3, 1);
    agg.finish().expect("finish");
    let all: Vec<(u64, u64)> = experiments(agg.sink())
        .iter()
        .map(|e| (e.index, e.count))
        .collect();
    assert_eq!(all, [(4, 12), (4, 12), (5, 15), (5, 15)]);
}

#[test]
fn producers_of_another_name_or_session_tag_are_other_runs() {
    let mut agg = Aggregator::new(options(Duration::ZERO), Sink::new());
    let mut feed = run_of(&[1, 2, 3, 4], "worker");
    feed.producers.get_mut(&3).expect("lane 3").session_tag = Some("s1".into());
    feed.producers.get_mut(&4).expect("lane 4").name = "other".into();
    for lane in 1..=4 {
        work(&mut feed, &mut agg, lane, 1);
    }
    agg.flush().expect("flush");
    let mut runs: Vec<(String, u64)> = experiments(agg.sink())
        .iter()
        .filter(|e| e.group == ["env0"])
        .map(|e| (e.producer.clone(), e.count))
        .collect();
    runs.sort();
    assert_eq!(
        runs,
        [
            ("other".into(), 3),
            ("worker".into(), 3),
            ("worker".into(), 6)
        ]
    );
}

#[test]
fn workers_that_split_the_groups_give_each_run_one_summary_per_group() {
    let run = |worker: u32, workers: u32| {
        let mut opts = options(Duration::ZERO);
        opts.group_by = vec!["step".into()];
        (opts.worker, opts.workers) = (worker, workers);
        let mut agg = Aggregator::new(opts, Sink::new());
        let mut feed = run_of(&[1, 2, 3], "worker");
        for lane in 1..=3 {
            work(&mut feed, &mut agg, lane, 2);
        }
        agg.finish().expect("finish");
        experiments(agg.sink())
    };
    let one = run(0, 1);
    assert_eq!(one.len(), 3, "one per step value");
    let mut union: Vec<Summary> = (0..3).flat_map(|w| run(w, 3)).collect();
    assert_eq!(union.len(), 3, "no group twice, none missed: {union:?}");
    union.sort_by_key(|s| s.group.clone());
    let mut one = one;
    one.sort_by_key(|s| s.group.clone());
    assert_eq!(format!("{union:?}"), format!("{one:?}"));
}

#[test]
fn a_restarted_aggregator_does_not_emit_the_combined_summary_again_unless_it_grew() {
    let feed_all = |agg: &mut Aggregator<Sink>, lanes: &[u64]| {
        let mut feed = run_of(lanes, "worker");
        for lane in lanes {
            work(&mut feed, agg, *lane, 2);
        }
        agg.finish().expect("finish");
    };
    let mut first = Aggregator::new(options(Duration::ZERO), Sink::new());
    feed_all(&mut first, &[1, 2]);
    let mut resume = Resume::default();
    for (d, p) in first.sink() {
        resume.add_summary(d, p, Window::Episode);
    }
    // The same records read again from the rings: nothing emitted twice.
    let mut again = Aggregator::new(options(Duration::ZERO), Sink::new());
    again.resume_from(resume.clone());
    feed_all(&mut again, &[1, 2]);
    assert!(summaries(again.sink()).is_empty(), "emitted before");
    // A third worker's records besides: the summary covers more, so it is emitted.
    let mut more = Aggregator::new(options(Duration::ZERO), Sink::new());
    more.resume_from(resume);
    feed_all(&mut more, &[1, 2, 3]);
    let counts: Vec<u64> = experiments(more.sink()).iter().map(|e| e.count).collect();
    assert_eq!(counts, [18, 18]);
}

#[test]
fn a_producer_that_ends_while_another_runs_does_not_split_the_others_window() {
    // Without combining too: the groups of the producers still running keep their windows.
    for combine in [false, true] {
        let mut opts = options(Duration::ZERO);
        opts.combine_producers = combine;
        let mut agg = Aggregator::new(opts, Sink::new());
        let mut feed = run_of(&[1, 2], "worker");
        join(&feed, &mut agg, 1);
        join(&feed, &mut agg, 2);
        feed.send(&mut agg, 1, &step(1, 0, 0, 0), 1);
        feed.send(&mut agg, 2, &step(2, 0, 0, 0), 2);
        feed.end(&mut agg, 2);
        for s in 1..3 {
            feed.send(&mut agg, 1, &step(1, 0, 0, s), 3);
        }
        feed.end(&mut agg, 1);
        agg.finish().expect("finish");
        let lane1: Vec<(String, u64, u64)> = summaries(agg.sink())
            .iter()
            .filter(|s| s.window == "episode" && s.first_seq + s.last_seq > 0)
            .map(|s| (s.window.clone(), s.index, s.count))
            .collect();
        assert_eq!(lane1, [("episode".into(), 0, 3)], "combine: {combine}");
    }
}
