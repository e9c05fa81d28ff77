//! Summaries equal the statistics computed here from the same steps: per episode, group and
//! experiment, fed by hand or read in place from a real lane.

use super::*;
use snapbus_bus::Level;
use snapbus_bus::lane::StartAt;
use snapbus_consumers::aggregator::{Aggregator, AggregatorOptions, EXPERIMENT, Window};
use snapbus_consumers::{RunOptions, run};

use crate::runtime::Bus;

/// The steps of `episode` among `(episode, step)` pairs.
fn of_episode(steps: &[(u32, Step)], episode: u32) -> Vec<Step> {
    steps
        .iter()
        .filter(|(e, _)| *e == episode)
        .map(|(_, s)| s.clone())
        .collect()
}

#[test]
fn episode_summaries_per_group_and_experiment_equal_statistics_computed_here() {
    let mut opts = AggregatorOptions::new(Window::Episode);
    opts.group_by = vec!["env".into()];
    let mut agg = Aggregator::new(opts, Sink::new());
    let mut feed = Feed::new(&[1, 2]);
    // Two producers, two envs each, interleaved; episodes of 3 to 6 steps.
    let mut sent: BTreeMap<(u64, u32), Vec<(u32, Step)>> = BTreeMap::new();
    let mut t = 0;
    for episode in 0..4u32 {
        for s in 0..(3 + episode) {
            for lane in [1, 2] {
                for env in [0, 1] {
                    let st = step(lane, env, episode, s);
                    t += 1_000;
                    feed.send(&mut agg, lane, &st, t);
                    sent.entry((lane, env)).or_default().push((episode, st));
                }
            }
        }
    }
    // Nothing is emitted for the last episode until the producer ends.
    let before = summaries(agg.sink()).len();
    assert_eq!(before, 2 * 2 * 3, "three closed episodes per group");
    feed.end(&mut agg, 1);
    feed.end(&mut agg, 2);
    let all = summaries(agg.sink());
    assert_eq!(all.len(), 2 * 2 * (4 + 1));
    for ((lane, env), steps) in &sent {
        let mine: Vec<&Summary> = all
            .iter()
            .filter(|s| s.producer == format!("trainer{lane}") && s.group == [format!("env{env}")])
            .collect();
        for episode in 0..4u32 {
            let w = mine
                .iter()
                .find(|s| s.window == "episode" && s.index == u64::from(episode))
                .expect("episode summary");
            check(w, &of_episode(steps, episode));
            assert_eq!(w.lost, 0);
            assert!(!w.stats.keys().any(|k| k.starts_with("episode.")));
        }
        let exp = mine
            .iter()
            .find(|s| s.window == EXPERIMENT)
            .expect("experiment summary");
        assert_eq!(exp.index, 4, "the number of windows");
        let every: Vec<Step> = steps.iter().map(|(_, s)| s.clone()).collect();
        check(exp, &every);
        assert_eq!(exp.schema, "agg.step.by_env.summary");
    }
    assert_eq!(
        agg.stats().summarized,
        sent.values().map(Vec::len).sum::<usize>() as u64
    );
}

/// Steps of 1 KiB and more are read in place (`fields::IN_PLACE_MIN_BYTES`): the summaries of a
/// run over a real lane are the statistics computed here from the steps emitted.
#[test]
fn summaries_of_steps_read_in_place_equal_statistics_computed_here() {
    let bus = Bus::start("agg-inplace");
    let p = bus.publisher();
    let mut opts = AggregatorOptions::new(Window::Episode);
    opts.group_by = vec!["env".into()];
    let mut agg = Aggregator::new(opts, Sink::new());
    let mut sent: BTreeMap<u32, Vec<(u32, Step)>> = BTreeMap::new();
    for episode in 0..3u32 {
        for s in 0..5u32 {
            for env in [0, 1] {
                let mut st = step(1, env, episode, s);
                st.hist = (0..300).map(|k| (k as f32 * 0.5) - s as f32).collect();
                let len = st.encode_to_vec().expect("encode").len();
                assert!(
                    len >= snapbus_consumers::fields::IN_PLACE_MIN_BYTES,
                    "{len}"
                );
                p.emit(Level::INFO, 0, &st).expect("emit");
                sent.entry(env).or_default().push((episode, st));
            }
        }
    }
    p.close();
    let mut o = RunOptions::new("aggregator");
    o.subscribe.start = StartAt::Oldest;
    o.until_end = true;
    o.handle_signals = false;
    let summary = run(bus.dir(), &o, &mut agg, None).expect("run");
    assert_eq!((summary.delivered, summary.lost), (30, 0));
    // All but the first (copied, after `on_schema`).
    assert_eq!(summary.read_in_place, 29);
    let all = summaries(agg.sink());
    for (env, steps) in &sent {
        for episode in 0..3u32 {
            let w = all
                .iter()
                .find(|s| {
                    s.group == [format!("env{env}")]
                        && s.window == "episode"
                        && s.index == u64::from(episode)
                })
                .expect("episode summary");
            check(w, &of_episode(steps, episode));
        }
    }
    assert_eq!(agg.stats().summarized, 30);
}
