//! The aggregator: summaries checked against statistics computed here from the same values
//! (per window, per group, per experiment), windows of every kind, workers splitting groups,
//! restarts that do not emit twice, loss, bad payloads, CSV, and summaries on a live bus.
//! This file holds the helpers the topic files (and `combine`) share.

mod fields;
mod loss_and_bad_input;
mod output;
mod statistics;
mod windows;
mod workers;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use snapbus_bus::ProducerInfo;
use snapbus_consumers::Record;
use snapbus_consumers::{Consumer, ProducerChange};
use snapbus_schemas::{SchemaDescriptor, Snapshot, Tensor, Value, Wire, decode};

use crate::common::{Info, Mode};

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
        relayed: false,
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
