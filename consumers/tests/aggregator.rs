//! The aggregator: summaries checked against statistics computed here from the same values
//! (per window, per group, per experiment), windows of every kind, workers splitting groups,
//! restarts that do not emit twice, loss, bad payloads, CSV, and summaries on a live bus.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use snapbus_bus::Level;
use snapbus_bus::ProducerInfo;
use snapbus_bus::lane::StartAt;
use snapbus_bus::subscriber::Glob;
use snapbus_consumers::Record;
use snapbus_consumers::aggregator::{
    Aggregator, AggregatorOptions, EXPERIMENT, PublisherSink, Resume, Window,
};
use snapbus_consumers::{Consumer, ProducerChange, RunOptions, run};
use snapbus_schemas::{SchemaDescriptor, Snapshot, Tensor, Value, Wire, decode};

use crate::common::{Info, Mode, lag};
use crate::runtime::Bus;

#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "agg.step", version = 1)]
pub(crate) struct Step {
    episode: u32,
    step: u32,
    env: String,
    mode: Mode,
    reward: f64,
    pos: [f32; 2],
    bonus: Option<f32>,
    info: Info,
    hist: Vec<f32>,
    obs: Tensor<u8>,
}

/// A step with values that differ per producer, env, episode and step.
pub(crate) fn step(lane: u64, env: u32, episode: u32, s: u32) -> Step {
    let x = f64::from(s * 7 + episode * 3 + env) + lane as f64 * 0.25;
    Step {
        episode,
        step: s,
        env: format!("env{env}"),
        mode: if episode % 2 == 0 {
            Mode::Train
        } else {
            Mode::Eval
        },
        reward: (x * 0.37).sin() * 10.0,
        pos: [x as f32 * 0.5, -(s as f32)],
        bonus: (s % 2 == 0).then_some(x as f32),
        info: Info {
            loss: 1.0 / (1.0 + x),
            note: "n".repeat(s as usize % 3),
        },
        hist: (0..(s % 4)).map(|k| k as f32 + x as f32).collect(),
        obs: Tensor::new(vec![2, 2], vec![s as u8, 3, episode as u8, 200]).expect("tensor"),
    }
}

/// The numbers the aggregator should summarize from a step, by leaf name (None: absent).
fn leaves(st: &Step) -> Vec<(&'static str, Option<f64>)> {
    let hist = |f: fn(&[f32]) -> f32| (!st.hist.is_empty()).then(|| f64::from(f(&st.hist)));
    let obs: Vec<f64> = st.obs.data().iter().map(|v| f64::from(*v)).collect();
    vec![
        ("step", Some(f64::from(st.step))),
        ("reward", Some(st.reward)),
        ("pos.0", Some(f64::from(st.pos[0]))),
        ("pos.1", Some(f64::from(st.pos[1]))),
        ("bonus", st.bonus.map(f64::from)),
        ("info.loss", Some(st.info.loss)),
        (
            "hist.mean",
            hist(|h| h.iter().sum::<f32>() / h.len() as f32),
        ),
        (
            "hist.min",
            hist(|h| h.iter().copied().fold(f32::INFINITY, f32::min)),
        ),
        (
            "hist.max",
            hist(|h| h.iter().copied().fold(f32::NEG_INFINITY, f32::max)),
        ),
        ("obs.mean", Some(obs.iter().sum::<f64>() / obs.len() as f64)),
        (
            "obs.min",
            Some(obs.iter().copied().fold(f64::INFINITY, f64::min)),
        ),
        (
            "obs.max",
            Some(obs.iter().copied().fold(f64::NEG_INFINITY, f64::max)),
        ),
    ]
}

/// count, mean, std, min, max, last, p50, p95, p99 of `v` (population std; quantiles at rank
/// ⌊p·(n−1)⌋ of the sorted values).
fn reference(v: &[f64]) -> [f64; 9] {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let std = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let q = |p: f64| s[(p * (s.len() - 1) as f64) as usize];
    [
        n,
        mean,
        std,
        s[0],
        s[s.len() - 1],
        v[v.len() - 1],
        q(0.5),
        q(0.95),
        q(0.99),
    ]
}

const STATS: [&str; 9] = [
    "count", "mean", "std", "min", "max", "last", "p50", "p95", "p99",
];

fn producer(lane: u64) -> ProducerInfo {
    ProducerInfo {
        pid: 1000 + lane as u32,
        name: format!("trainer{lane}"),
        cmdline: Vec::new(),
        session_tag: None,
        perf_tag: None,
        lane_id: lane,
        started_nanos: 0,
    }
}

/// Records of several producers, as the subscriber delivers them.
pub(crate) struct Feed {
    pub(crate) producers: BTreeMap<u64, ProducerInfo>,
    seq: BTreeMap<u64, u64>,
    schema: Arc<SchemaDescriptor>,
}

pub(crate) type Sink = Vec<(Arc<SchemaDescriptor>, Vec<u8>)>;

impl Feed {
    pub(crate) fn new(lanes: &[u64]) -> Feed {
        Feed {
            producers: lanes.iter().map(|l| (*l, producer(*l))).collect(),
            seq: lanes.iter().map(|l| (*l, 0)).collect(),
            schema: Arc::new(Step::descriptor().clone()),
        }
    }

    /// Feeds one step of `lane` at time `t_nanos` (the lane's next sequence number).
    pub(crate) fn send<C: Consumer>(&mut self, c: &mut C, lane: u64, st: &Step, t_nanos: u64) {
        let seq = self.seq[&lane];
        self.send_at(c, lane, st, t_nanos, seq);
        self.seq.insert(lane, seq + 1);
    }

    pub(crate) fn send_at<C: Consumer>(
        &self,
        c: &mut C,
        lane: u64,
        st: &Step,
        t_nanos: u64,
        seq: u64,
    ) {
        let payload = st.encode_to_vec().expect("encode");
        self.send_raw(c, lane, &payload, t_nanos, seq, &Arc::clone(&self.schema));
    }

    fn send_raw<C: Consumer>(
        &self,
        c: &mut C,
        lane: u64,
        payload: &[u8],
        t_nanos: u64,
        seq: u64,
        schema: &Arc<SchemaDescriptor>,
    ) {
        let r = Record {
            producer_id: lane,
            producer: snapbus_consumers::Producer::from(&self.producers[&lane]),
            schema,
            emitter: None,
            header: crate::common::header(seq, t_nanos, payload.len()),
            payload,
            extracted: None,
        };
        c.on_event(&r).expect("on_event");
    }

    pub(crate) fn end<C: Consumer>(&self, c: &mut C, lane: u64) {
        c.on_producer(ProducerChange::Ended(snapbus_consumers::Producer::from(
            &self.producers[&lane],
        )))
        .expect("end");
    }
}

/// A decoded summary, flattened: `stats.reward.mean` → value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Summary {
    pub(crate) schema: String,
    pub(crate) producer: String,
    pub(crate) group: Vec<String>,
    pub(crate) window: String,
    pub(crate) index: u64,
    pub(crate) count: u64,
    pub(crate) lost: u64,
    pub(crate) first_seq: u64,
    pub(crate) last_seq: u64,
    pub(crate) stats: BTreeMap<String, f64>,
}

impl Summary {
    fn key(&self) -> (String, String, Vec<String>, String, u64) {
        (
            self.schema.clone(),
            self.producer.clone(),
            self.group.clone(),
            self.window.clone(),
            self.index,
        )
    }
}

fn flatten(prefix: &str, v: &Value<'_>, out: &mut BTreeMap<String, f64>) {
    match v {
        Value::Struct(fields) => {
            for (n, f) in fields {
                let p = if prefix.is_empty() {
                    n.to_string()
                } else {
                    format!("{prefix}.{n}")
                };
                flatten(&p, f, out);
            }
        }
        v => {
            out.insert(prefix.to_owned(), v.as_f64().expect("a number"));
        }
    }
}

pub(crate) fn summaries(sink: &Sink) -> Vec<Summary> {
    sink.iter()
        .map(|(desc, payload)| {
            let v = decode(desc.root(), payload).expect("summary decodes");
            let u = |n: &str| match v.field(n) {
                Some(Value::U64(x)) => *x,
                other => panic!("{n}: {other:?}"),
            };
            let s = |n: &str| match v.field(n) {
                Some(Value::Str(x)) => x.to_string(),
                other => panic!("{n}: {other:?}"),
            };
            let group = match v.field("group") {
                Some(Value::Struct(f)) => f
                    .iter()
                    .map(|(_, v)| match v {
                        Value::Str(s) => s.to_string(),
                        v => format!("{}", v.as_f64().expect("number")),
                    })
                    .collect(),
                _ => Vec::new(),
            };
            let mut stats = BTreeMap::new();
            flatten("", v.field("stats").expect("stats"), &mut stats);
            Summary {
                schema: desc.id().to_owned(),
                producer: s("producer"),
                group,
                window: s("window"),
                index: u("index"),
                count: u("count"),
                lost: u("lost"),
                first_seq: u("first_seq"),
                last_seq: u("last_seq"),
                stats,
            }
        })
        .collect()
}

/// The steps of `episode` among `(episode, step)` pairs.
fn of_episode(steps: &[(u32, Step)], episode: u32) -> Vec<Step> {
    steps
        .iter()
        .filter(|(e, _)| *e == episode)
        .map(|(_, s)| s.clone())
        .collect()
}

/// Checks one summary's statistics against the reference over `steps`.
pub(crate) fn check(s: &Summary, steps: &[Step]) {
    assert_eq!(s.count, steps.len() as u64, "{:?}", s.key());
    let mut names = BTreeSet::new();
    for (leaf, _) in leaves(&steps[0]) {
        names.insert(leaf);
        let values: Vec<f64> = steps
            .iter()
            .filter_map(|st| leaves(st).into_iter().find(|(n, _)| *n == leaf)?.1)
            .collect();
        for (i, stat) in STATS.iter().enumerate() {
            let got = s.stats[&format!("{leaf}.{stat}")];
            if values.is_empty() {
                let want = if *stat == "count" { 0.0 } else { f64::NAN };
                assert!(
                    got == want || (got.is_nan() && want.is_nan()),
                    "{leaf}.{stat}"
                );
                continue;
            }
            let want = reference(&values)[i];
            let tol = 1e-9 * want.abs().max(1.0);
            assert!(
                (got - want).abs() <= tol,
                "{:?} {leaf}.{stat}: got {got}, want {want}",
                s.key()
            );
        }
    }
    // Exactly the numeric leaves: not strings or enums (`episode` is checked by the callers:
    // it is summarized unless it is the window field).
    let got: BTreeSet<&str> = s
        .stats
        .keys()
        .filter_map(|k| k.rsplit_once('.'))
        .map(|(l, _)| l)
        .filter(|l| *l != "episode")
        .collect();
    assert_eq!(got, names);
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

#[test]
fn fields_select_what_is_summarized_and_enums_group_by_variant_name() {
    // Group-by fields in payload order and reversed: the summary's group follows the option.
    for reversed in [false, true] {
        let mut group_by = vec!["mode".to_owned(), "info.note".to_owned()];
        if reversed {
            group_by.reverse();
        }
        let mut opts = AggregatorOptions::new(Window::Episode);
        opts.group_by = group_by;
        opts.fields = vec![
            Glob::new("reward").expect("glob"),
            Glob::new("pos").expect("glob"),
        ];
        let mut agg = Aggregator::new(opts, Sink::new());
        let mut feed = Feed::new(&[1]);
        for s in 0..6 {
            feed.send(&mut agg, 1, &step(1, 0, 1, s), 1);
        }
        feed.end(&mut agg, 1);
        let all = summaries(agg.sink());
        let groups: BTreeSet<Vec<String>> = all.iter().map(|s| s.group.clone()).collect();
        let want: BTreeSet<Vec<String>> = ["", "n", "nn"]
            .iter()
            .map(|n| {
                let mut g = vec!["Eval".to_owned(), (*n).to_owned()];
                if reversed {
                    g.reverse();
                }
                g
            })
            .collect();
        assert_eq!(groups, want);
        let leaves: BTreeSet<&str> = all[0]
            .stats
            .keys()
            .filter_map(|k| k.rsplit_once('.'))
            .map(|(l, _)| l)
            .collect();
        assert_eq!(leaves, BTreeSet::from(["reward", "pos.0", "pos.1"]));
    }
}

fn tmp_dir(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("agg-{}", std::process::id()))
        .join(name);
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn csv_rows_are_the_summaries_and_a_restart_appends_under_the_same_header() {
    let dir = tmp_dir("csv");
    let mut opts = AggregatorOptions::new(Window::Episode);
    opts.csv_dir = Some(dir.clone());
    let steps: Vec<Step> = (0..9).map(|i| step(1, 0, i / 3, i % 3)).collect();
    let mut a = Aggregator::new(opts.clone(), Sink::new());
    let mut feed = Feed::new(&[1]);
    steps[..4].iter().for_each(|st| feed.send(&mut a, 1, st, 1));
    a.flush().expect("flush");
    let emitted = a.sink().clone();
    drop(a);
    let mut resume = Resume::default();
    emitted
        .iter()
        .for_each(|(d, p)| resume.add_summary(d, p, Window::Episode));
    let mut b = Aggregator::new(opts.clone(), Sink::new());
    b.resume_from(resume);
    let mut feed = Feed::new(&[1]);
    steps.iter().for_each(|st| feed.send(&mut b, 1, st, 1));
    feed.end(&mut b, 1);
    b.flush().expect("flush");
    let mut all = summaries(&emitted);
    all.extend(summaries(b.sink()));

    let path = dir.join("agg.step.summary.csv");
    let mut r = csv::Reader::from_path(&path).expect("csv");
    let header: Vec<String> = r
        .headers()
        .expect("header")
        .iter()
        .map(str::to_owned)
        .collect();
    let rows: Vec<csv::StringRecord> = r.records().map(|x| x.expect("row")).collect();
    assert_eq!(
        rows.len(),
        all.len(),
        "one row per summary, the header once"
    );
    assert_eq!(all.len(), 4, "3 episodes + the experiment, none twice");
    let col = |n: &str| {
        header
            .iter()
            .position(|h| h == n)
            .unwrap_or_else(|| panic!("{n}"))
    };
    for (row, s) in rows.iter().zip(&all) {
        assert_eq!(row[col("window")], s.window);
        assert_eq!(row[col("index")].parse::<u64>().expect("index"), s.index);
        assert_eq!(row[col("count")].parse::<u64>().expect("count"), s.count);
        for (k, v) in &s.stats {
            let cell = &row[col(k)];
            if v.is_nan() {
                assert_eq!(cell, "", "{k}");
            } else {
                assert_eq!(cell.parse::<f64>().expect("float"), *v, "{k}");
            }
        }
    }

    // Other columns in an existing file: a clear error, the file untouched.
    let before = std::fs::read(&path).expect("read");
    let mut other = opts;
    other.fields = vec![Glob::new("reward").expect("glob")];
    let mut c = Aggregator::new(other, Sink::new());
    let feed = Feed::new(&[1]);
    let schema = Arc::clone(&feed.schema);
    for (i, st) in steps[..3].iter().enumerate() {
        let payload = st.encode_to_vec().expect("encode");
        feed.send_raw(&mut c, 1, &payload, 1, i as u64, &schema);
    }
    // The fourth record closes the first window, and the CSV is opened.
    let err = c
        .on_event(&Record {
            producer_id: 1,
            producer: snapbus_consumers::Producer::from(&feed.producers[&1]),
            schema: &schema,
            emitter: None,
            header: crate::common::header(3, 1, 0),
            payload: &steps[3].encode_to_vec().expect("encode"),
            extracted: None,
        })
        .expect_err("other columns");
    assert!(
        err.to_string().contains("exists with other columns"),
        "{err}"
    );
    assert_eq!(std::fs::read(&path).expect("read"), before);
}

#[test]
fn summaries_are_published_on_the_bus_for_any_consumer() {
    let bus = Bus::start("agg-live");
    let p = bus.publisher();
    let steps: Vec<Step> = (0..12).map(|i| step(1, 0, i / 4, i % 4)).collect();
    for st in &steps {
        p.emit(Level::INFO, 0, st).expect("emit");
    }
    p.close();
    let sink = PublisherSink::start(bus.dir(), "aggregator").expect("publisher");
    let own = sink.publisher().info().lane_id;
    let mut agg = Aggregator::new(AggregatorOptions::new(Window::Episode), sink);
    let mut opts = RunOptions::new("aggregator");
    opts.subscribe.start = StartAt::Oldest;
    opts.until_end = true;
    opts.handle_signals = false;
    opts.subscribe.skip_lanes = vec![own];
    let summary = run(bus.dir(), &opts, &mut agg, None).expect("run");
    assert_eq!(summary.delivered, 12);
    assert_eq!(agg.stats().windows, 3);
    assert_eq!(agg.stats().experiments, 1);

    // Any consumer reads them back: here, the restart path's reader.
    let resume = snapbus_consumers::aggregator::previous_summaries(
        bus.dir(),
        "aggregator",
        &AggregatorOptions::new(Window::Episode),
    )
    .expect("read back");
    assert_eq!((resume.summaries, resume.groups()), (4, 1));
    // A collector of decoded summaries.
    struct Collect(Sink);
    impl Consumer for Collect {
        fn on_event(
            &mut self,
            r: &Record<'_>,
        ) -> Result<snapbus_consumers::Flow, snapbus_consumers::HookError> {
            self.0.push((Arc::clone(r.schema), r.payload.to_vec()));
            Ok(snapbus_consumers::Flow::Continue)
        }
    }
    let mut c = Collect(Sink::new());
    let mut o = RunOptions::new("collect");
    o.subscribe.globs = vec![Glob::new("agg.step.summary").expect("glob")];
    o.subscribe.start = StartAt::Oldest;
    o.subscribe.cut = true;
    o.until_end = true;
    o.handle_signals = false;
    run(bus.dir(), &o, &mut c, None).expect("collect");
    let got = summaries(&c.0);
    assert_eq!(got.len(), 4);
    check(&got[3], &steps);
    drop(agg);
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

#[test]
fn numbers_inside_dynamic_fields_are_summarized_by_leaf_path() {
    use std::borrow::Cow;

    use snapbus_schemas::{Field, TypeDesc, encode_value};

    let desc = Arc::new(
        SchemaDescriptor::new(
            "agg.event",
            1,
            TypeDesc::Struct {
                fields: vec![
                    Field::new("episode", TypeDesc::U32),
                    Field::new("extra", TypeDesc::Dynamic),
                ],
            },
        )
        .expect("descriptor"),
    );
    let key = |k: &str| Value::Str(Cow::Owned(k.to_owned()));
    // Episode 0: `steps` in every record, `is_done` in one; episode 1: a plain number.
    let extras = [
        (0, Value::Map(vec![(key("steps"), Value::I64(2))])),
        (
            0,
            Value::Map(vec![
                (key("steps"), Value::I64(4)),
                (key("is_done"), Value::Bool(true)),
            ]),
        ),
        (1, Value::F64(0.5)),
    ];
    let mut agg = Aggregator::new(AggregatorOptions::new(Window::Episode), Sink::new());
    let feed = Feed::new(&[1]);
    for (seq, (episode, extra)) in extras.into_iter().enumerate() {
        let v = Value::Struct(vec![
            (Cow::Borrowed("episode"), Value::U32(episode)),
            (Cow::Borrowed("extra"), extra),
        ]);
        let mut payload = Vec::new();
        encode_value(desc.root(), &v, &mut payload).expect("encode");
        feed.send_raw(&mut agg, 1, &payload, 1, seq as u64, &desc);
    }
    feed.end(&mut agg, 1);
    let dynamic: Vec<(String, BTreeMap<String, f64>)> = agg
        .sink()
        .iter()
        .map(|(d, payload)| {
            let v = decode(d.root(), payload).expect("summary decodes");
            let Some(Value::Map(leaves)) = v.field("dynamic_stats") else {
                panic!("dynamic_stats: {v:?}");
            };
            let mut stats = BTreeMap::new();
            for (leaf, stat) in leaves {
                let Value::Str(leaf) = leaf else {
                    panic!("{leaf:?}")
                };
                let Value::Map(stat) = stat else {
                    panic!("{stat:?}")
                };
                for (name, x) in stat {
                    let Value::Str(name) = name else {
                        panic!("{name:?}")
                    };
                    stats.insert(format!("{leaf}.{name}"), x.as_f64().expect("a number"));
                }
            }
            let window = format!("{:?}/{:?}", v.field("window"), v.field("index"));
            (window, stats)
        })
        .collect();
    assert_eq!(dynamic.len(), 3, "{dynamic:?}");
    let get = |i: usize, k: &str| dynamic[i].1.get(k).copied();
    assert_eq!(get(0, "extra.steps.mean"), Some(3.0));
    assert_eq!(get(0, "extra.steps.count"), Some(2.0));
    assert_eq!(get(0, "extra.is_done.count"), Some(1.0));
    assert_eq!(get(0, "extra.mean"), None);
    assert_eq!(get(1, "extra.mean"), Some(0.5));
    assert_eq!(get(1, "extra.steps.count"), None);
    // The experiment holds every leaf of every window.
    assert_eq!(get(2, "extra.steps.max"), Some(4.0));
    assert_eq!(get(2, "extra.mean"), Some(0.5));
    assert_eq!(get(2, "extra.is_done.last"), Some(1.0));
}
