//! `snapbus schemas` lists the known schemas with descriptors that re-validate.

use snapbus_schemas::SchemaDescriptor;

use crate::util::run;

#[test]
fn schemas_json_lists_builtins_and_demo_with_valid_descriptors() {
    let out = run(&["schemas", "--json"]);
    assert!(out.status.success(), "{}", out.stderr);
    let mut ids = Vec::new();
    for line in out.stdout.lines() {
        let raw: serde_json::Value = serde_json::from_str(line).expect("JSON");
        // Deserializing validates the descriptor and recomputes the fingerprint.
        let desc: SchemaDescriptor = serde_json::from_str(line).expect("descriptor");
        assert_eq!(raw["fingerprint"].as_u64(), Some(desc.fingerprint()));
        ids.push(desc.id().to_owned());
    }
    assert_eq!(
        ids,
        [
            "snapbus.duration",
            "snapbus.resource",
            "snapbus.span.start",
            "snapbus.span.end",
            "snapbus.span.event",
            "demo.step",
            "demo.episode_end"
        ]
    );
}

#[test]
fn schemas_table_shows_id_version_fingerprint_and_type() {
    let out = run(&["schemas"]);
    assert!(out.status.success(), "{}", out.stderr);
    let step = out
        .stdout
        .lines()
        .find(|l| l.starts_with("demo.step"))
        .expect("demo.step row");
    assert!(step.contains(" v1 "), "{step}");
    assert!(step.contains("observation: tensor<u8>"), "{step}");
}
