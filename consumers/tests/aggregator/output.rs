//! Where summaries go: CSV files (a restart appends to them) and the bus, for any consumer.

use std::path::PathBuf;

use super::*;
use snapbus_bus::Level;
use snapbus_bus::lane::StartAt;
use snapbus_bus::subscriber::Glob;
use snapbus_consumers::aggregator::{Aggregator, AggregatorOptions, PublisherSink, Resume, Window};
use snapbus_consumers::{RunOptions, run};

use crate::runtime::Bus;

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
