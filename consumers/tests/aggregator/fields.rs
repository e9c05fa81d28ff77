//! What is summarized: the fields chosen, groups by enum variant name, and numbers inside
//! dynamic fields.

use super::*;
use snapbus_bus::subscriber::Glob;
use snapbus_consumers::aggregator::{Aggregator, AggregatorOptions, Window};

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
