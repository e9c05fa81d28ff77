//! Python readers: the `mcap` package reads a recording and its MCAP JSON export; pyarrow and
//! pandas read the Parquet export.

use std::path::Path;

#[cfg(feature = "parquet")]
use serde_json::Value as Json;
use serde_json::json;

#[cfg(feature = "parquet")]
use super::columns;
use super::{export_mixed, obs, path_str, payload_json, python_json, python_with};

#[test]
fn python_mcap_reads_the_recording_and_the_mcap_json_export() {
    // The recording is LZ4-compressed: the `mcap` package decodes it with `lz4`.
    if !python_with("mcap, lz4") {
        return;
    }
    let (rec, out, _) = export_mixed("mixed-py.mcap", "mcap-json", "mixed-py-json.mcap");
    let topics = json!({"exp.obs": 30, "exp.tick": 9, "snapbus.loss": 1});
    for mode in [None, Some("--stream")] {
        // The recording, then its export: the same messages, encoded their own way.
        let check = |file: &Path, schema_encoding: &str, message_encoding: &str| {
            let mut args = vec![path_str(file)];
            args.extend(mode);
            let r = python_json("check_mcap.py", &args);
            assert_eq!(r["messages"], 40, "{r}");
            assert_eq!(r["topics"], topics, "{r}");
            assert_eq!(r["schemas"], 4, "{r}");
            assert_eq!(r["channels"], 4, "{r}");
            assert_eq!(r["schema_encodings"], json!([schema_encoding]), "{r}");
            assert_eq!(r["message_encodings"], json!([message_encoding]), "{r}");
            r
        };
        check(&rec, "snapbus.descriptor", "snapbus");
        let j = check(&out, "jsonschema", "json");
        assert_eq!(j["json_messages"], 40, "every message parses as JSON: {j}");
        assert_eq!(j["json_schemas"], 4, "every schema parses as JSON: {j}");
        assert_eq!(
            j["first"]["exp.obs"],
            payload_json(&obs(0)),
            "the first observation: {j}"
        );
    }
}

#[cfg(feature = "parquet")]
#[test]
fn pyarrow_and_pandas_read_the_parquet_export() {
    if !python_with("pyarrow, pandas") {
        return;
    }
    let (_, out, _) = export_mixed("mixed-pq-py.mcap", "parquet", "mixed-pq-py");
    let r = python_json("check_parquet.py", &[path_str(&out)]);
    let obs_table = &r["exp.obs.parquet"];
    assert_eq!(obs_table["rows"], 30, "{r}");
    assert_eq!(obs_table["columns"].as_array().expect("columns").len(), 19);
    assert_eq!(obs_table["columns"][8], "pos.x");
    assert_eq!(obs_table["arrow_types"]["t_nanos"], "timestamp[ns, tz=UTC]");
    assert_eq!(obs_table["arrow_types"]["image"], "list<item: uint8>");
    assert_eq!(obs_table["pandas_dtypes"]["t_nanos"], "datetime64[ns, UTC]");
    assert_eq!(obs_table["pandas_dtypes"]["step"], "uint64");
    assert_eq!(obs_table["pandas_dtypes"]["reward"], "float64");
    assert_eq!(obs_table["first"]["hist"], json!([0.0, 0.25, -1.5]));
    assert_eq!(obs_table["first"]["image.shape"], json!([2, 3]));
    assert_eq!(obs_table["first"]["phase"], "Warmup");
    assert_eq!(obs_table["first"]["label"], Json::Null);
    assert_eq!(r["exp.tick.v1.parquet"]["rows"], 5);
    assert_eq!(r["exp.tick.v2.parquet"]["rows"], 4);
    assert_eq!(
        r["exp.tick.v2.parquet"]["columns"],
        json!(columns(&["i", "unit"]))
    );
    assert_eq!(r["snapbus.loss.parquet"]["rows"], 1);
}
