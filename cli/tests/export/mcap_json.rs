//! MCAP with JSON messages: read back with the Rust `mcap` crate.

use serde_json::{Value as Json, json};

use super::{export_mixed, obs, payload_json, read_mcap};

#[test]
fn mcap_json_reads_back_with_the_mcap_crate() {
    let (_, out, _) = export_mixed("mixed-m.mcap", "mcap-json", "mixed-json.mcap");
    let bytes = std::fs::read(&out).expect("read");
    let (summary, messages) = read_mcap(&bytes);
    // exp.obs, exp.tick v1, exp.tick v2, snapbus.loss.
    assert_eq!(summary.schemas.len(), 4);
    for s in summary.schemas.values() {
        assert_eq!(s.encoding, "jsonschema");
        let js: Json = serde_json::from_slice(&s.data).expect("a JSON Schema");
        assert_eq!(js["title"], s.name.as_str());
        assert_eq!(js["type"], "object");
    }
    // obs (alpha), tick v1 (beta), loss (beta), tick v2 (beta).
    assert_eq!(summary.channels.len(), 4);
    for c in summary.channels.values() {
        assert_eq!(c.message_encoding, "json");
        let schema = c.schema.as_ref().expect("channel schema");
        assert_eq!(schema.name, c.topic);
    }
    assert_eq!(messages.len(), 30 + 5 + 1 + 4);
    let stats = summary.stats.expect("statistics");
    assert_eq!(stats.message_count, 40);
    assert!(
        stats.metadata_count >= 3,
        "the recording's metadata is kept"
    );

    let obs_msgs: Vec<&mcap::Message<'_>> = messages
        .iter()
        .filter(|m| m.channel.topic == "exp.obs")
        .collect();
    assert_eq!(obs_msgs.len(), 30);
    for (i, m) in obs_msgs.iter().enumerate() {
        assert_eq!(m.log_time, 1000 + i as u64);
        assert_eq!(m.publish_time, m.log_time);
        let v: Json = serde_json::from_slice(&m.data).expect("JSON message");
        assert_eq!(v, payload_json(&obs(i as u64)));
    }
    assert_eq!(obs_msgs[0].channel.metadata["producer"], "alpha");
    let loss = messages
        .iter()
        .find(|m| m.channel.topic == "snapbus.loss")
        .expect("loss message");
    assert_eq!(
        serde_json::from_slice::<Json>(&loss.data).expect("JSON"),
        json!({"producer_id": 8, "producer_pid": 200, "lost": 42, "damaged": 0})
    );
    let v2 = messages
        .iter()
        .filter(|m| m.channel.topic == "exp.tick")
        .filter(|m| {
            m.channel.schema.as_ref().is_some_and(|s| {
                serde_json::from_slice::<Json>(&s.data).expect("schema")["properties"]
                    .get("unit")
                    .is_some()
            })
        })
        .count();
    assert_eq!(v2, 4, "version 2 has its own schema");
}
