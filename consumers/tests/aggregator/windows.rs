//! Windows: of steps and of seconds, closed where they should be, by the wall clock when quiet,
//! and the experiment alone when there is no episode field.

use std::time::Duration;

use super::*;
use snapbus_consumers::aggregator::{Aggregator, AggregatorOptions, EXPERIMENT, Window};

#[test]
fn step_and_time_windows_close_where_they_should() {
    let mut agg = Aggregator::new(AggregatorOptions::new(Window::Steps(3)), Sink::new());
    let mut feed = Feed::new(&[1]);
    let steps: Vec<Step> = (0..10).map(|s| step(1, 0, s / 4, s)).collect();
    for (i, st) in steps.iter().enumerate() {
        feed.send(&mut agg, 1, st, i as u64);
    }
    feed.end(&mut agg, 1);
    let all = summaries(agg.sink());
    let windows: Vec<(u64, u64, u64)> = all
        .iter()
        .filter(|s| s.window == "steps:3")
        .map(|s| (s.index, s.first_seq, s.last_seq))
        .collect();
    assert_eq!(windows, [(0, 0, 2), (1, 3, 5), (2, 6, 8), (3, 9, 9)]);
    for s in all.iter().filter(|s| s.window == "steps:3") {
        check(s, &steps[s.first_seq as usize..=s.last_seq as usize]);
    }
    let exp = all
        .iter()
        .find(|s| s.window == EXPERIMENT)
        .expect("experiment");
    check(exp, &steps);
    // The episode field is summarized like any other when windows are not episodes.
    assert!(exp.stats.contains_key("episode.mean"));

    // 1-second windows of record time: 0.4 s apart → buckets 0,0,0,1,1,2,2,2,3,3.
    let mut agg = Aggregator::new(
        AggregatorOptions::new(Window::Secs(Duration::from_secs(1))),
        Sink::new(),
    );
    let mut feed = Feed::new(&[1]);
    let base = 1_700_000_000 * 1_000_000_000u64;
    for (i, st) in steps.iter().enumerate() {
        feed.send(&mut agg, 1, st, base + i as u64 * 400_000_000);
    }
    feed.end(&mut agg, 1);
    let all = summaries(agg.sink());
    let windows: Vec<(u64, u64)> = all
        .iter()
        .filter(|s| s.window == "secs:1")
        .map(|s| (s.index - 1_700_000_000, s.count))
        .collect();
    assert_eq!(windows, [(0, 3), (1, 2), (2, 3), (3, 2)]);
}

#[test]
fn a_schema_without_the_episode_field_is_summarized_per_experiment() {
    let mut opts = AggregatorOptions::new(Window::Episode);
    opts.episode_field = "round".into();
    let mut agg = Aggregator::new(opts, Sink::new());
    let mut feed = Feed::new(&[1]);
    let steps: Vec<Step> = (0..5).map(|s| step(1, 0, 0, s)).collect();
    steps.iter().for_each(|st| feed.send(&mut agg, 1, st, 1));
    feed.end(&mut agg, 1);
    let all = summaries(agg.sink());
    assert_eq!(all.len(), 1);
    assert_eq!((all[0].window.as_str(), all[0].index), (EXPERIMENT, 0));
    assert_eq!(all[0].count, 5);
}

#[test]
fn a_quiet_time_window_is_closed_by_the_wall_clock_a_second_after_its_end() {
    let mut agg = Aggregator::new(
        AggregatorOptions::new(Window::Secs(Duration::from_secs(1))),
        Sink::new(),
    );
    let mut feed = Feed::new(&[1]);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64;
    // A window that ended 9 s ago, and one far in the future (its end has not come).
    feed.send(&mut agg, 1, &step(1, 0, 0, 0), now - 10_000_000_000);
    agg.flush().expect("flush");
    assert_eq!(summaries(agg.sink()).len(), 1, "closed by the clock");
    // A late record of the closed window: counted by the experiment, no second window.
    feed.send(&mut agg, 1, &step(1, 0, 0, 2), now - 10_000_000_000);
    assert_eq!(summaries(agg.sink()).len(), 1);
    feed.send(&mut agg, 1, &step(1, 0, 0, 1), now + 3_600_000_000_000);
    agg.flush().expect("flush");
    assert_eq!(summaries(agg.sink()).len(), 1, "not before its end");
    assert_eq!(agg.open_windows(), 1);
    feed.end(&mut agg, 1);
    let all = summaries(agg.sink());
    let got: Vec<(&str, u64)> = all.iter().map(|s| (s.window.as_str(), s.count)).collect();
    assert_eq!(got, [("secs:1", 1), ("secs:1", 1), (EXPERIMENT, 3)]);
}
