//! CSV: a file per schema and version, nested fields flattened into columns, and short fixed
//! arrays split into a column per element.

use snapbus_schemas::Snapshot;

use super::{
    Direct, Phase, assert_ok, columns, dir_files, export, export_mixed, obs, read_csv, tmp,
};

#[test]
fn csv_has_a_file_per_schema_and_version_with_flattened_columns() {
    let (rec, out, o) = export_mixed("mixed-c.mcap", "csv", "mixed-csv");
    assert_eq!(
        dir_files(&out),
        [
            "exp.obs.csv",
            "exp.tick.v1.csv",
            "exp.tick.v2.csv",
            "snapbus.loss.csv"
        ]
    );
    o.assert_stderr_has("4 files in");

    let (header, rows) = read_csv(&out.join("exp.obs.csv"));
    assert_eq!(
        header,
        columns(&[
            "step",
            "pos.x",
            "pos.y",
            "reward",
            "hist",
            "image",
            "image.shape",
            "label",
            "note",
            "phase",
            "phase.Run.speed",
            "phase.Done",
        ])
    );
    assert_eq!(rows.len(), 30);
    for (i, row) in rows.iter().enumerate() {
        let o = obs(i as u64);
        assert_eq!(row["t_nanos"], (1000 + i).to_string());
        assert_eq!(row["producer_id"], "7");
        assert_eq!(row["producer"], "alpha");
        assert_eq!(row["step"], i.to_string());
        assert_eq!(row["pos.x"].parse::<f64>().expect("pos.x"), o.pos.x);
        assert_eq!(row["pos.y"].parse::<f64>().expect("pos.y"), o.pos.y);
        assert_eq!(row["reward"].parse::<f64>().expect("reward"), o.reward);
        let hist: Vec<f32> = serde_json::from_str(&row["hist"]).expect("hist is JSON");
        assert_eq!(hist, o.hist);
        let image: Vec<u8> = serde_json::from_str(&row["image"]).expect("image is JSON");
        assert_eq!(image, o.image.data());
        assert_eq!(row["image.shape"], "[2,3]");
        assert_eq!(row["label"], o.label.clone().unwrap_or_default());
        assert_eq!(row["note"], o.note, "quoting round-trips");
        match o.phase {
            Phase::Warmup => {
                assert_eq!(row["phase"], "Warmup");
                assert_eq!(row["phase.Run.speed"], "");
                assert_eq!(row["phase.Done"], "");
            }
            Phase::Run { speed } => {
                assert_eq!(row["phase"], "Run");
                assert_eq!(row["phase.Run.speed"].parse::<f32>().expect("speed"), speed);
                assert_eq!(row["phase.Done"], "");
            }
            Phase::Done(n) => {
                assert_eq!(row["phase"], "Done");
                assert_eq!(row["phase.Run.speed"], "");
                assert_eq!(row["phase.Done"], n.to_string());
            }
        }
    }
    assert_eq!(rows[1]["pos.x"], "0.5", "shortest round-trip floats");

    let (header, rows) = read_csv(&out.join("exp.tick.v2.csv"));
    assert_eq!(header, columns(&["i", "unit"]));
    assert_eq!(rows.len(), 4);
    assert_eq!(rows[2]["unit"], "ms");
    assert_eq!(rows[2]["producer"], "beta");
    let (header, rows) = read_csv(&out.join("exp.tick.v1.csv"));
    assert_eq!(header, columns(&["i"]));
    assert_eq!(rows.len(), 5);
    let (header, rows) = read_csv(&out.join("snapbus.loss.csv"));
    assert_eq!(
        header,
        columns(&["payload.producer_id", "producer_pid", "lost", "damaged"])
    );
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["lost"], "42");
    assert_eq!(rows[0]["producer_pid"], "200");

    // A glob keeps only its schemas (and loss records, which may concern any schema).
    let out2 = tmp("mixed-csv-obs");
    let o = export(&rec, "csv", &out2, &["--schema", "exp.obs"]);
    assert_ok(&o);
    assert_eq!(dir_files(&out2), ["exp.obs.csv", "snapbus.loss.csv"]);
}

/// A pose with fixed arrays: short ones are split into a column per element in CSV.
#[derive(Snapshot, Debug, Clone, PartialEq)]
#[snapshot(id = "exp.pose", version = 1)]
struct Pose3 {
    position: [f32; 3],
    counts: [u16; 2],
    long: [f64; 17],
}

fn pose(i: u32) -> Pose3 {
    let f = i as f32;
    Pose3 {
        position: [f * 0.5, -f, f + 0.25],
        counts: [i as u16, 1000 + i as u16],
        long: std::array::from_fn(|k| f64::from(i) + k as f64),
    }
}

/// Issue 20, item 2: `position.0…2` in CSV (values exact, integers as integers); arrays longer
/// than 16 stay one JSON-array cell; Parquet keeps each array as one list column.
#[test]
fn csv_splits_short_fixed_arrays_into_a_column_per_element() {
    let rec = tmp("pose.mcap");
    let mut d = Direct::create(&rec, 1 << 20);
    for i in 0..4 {
        d.write(0, 1000 + u64::from(i), &pose(i));
    }
    d.finish();
    let out = tmp("pose-csv");
    assert_ok(&export(&rec, "csv", &out, &[]));
    let (header, rows) = read_csv(&out.join("exp.pose.csv"));
    assert_eq!(
        header[7..],
        [
            "position.0",
            "position.1",
            "position.2",
            "counts.0",
            "counts.1",
            "long"
        ]
    );
    assert_eq!(rows.len(), 4);
    for (i, row) in rows.iter().enumerate() {
        let p = pose(i as u32);
        for k in 0..3 {
            let got: f32 = row[&format!("position.{k}")].parse().expect("a float");
            assert_eq!(got, p.position[k], "row {i} position.{k}");
        }
        assert_eq!(row["counts.0"], i.to_string());
        assert_eq!(row["counts.1"], (1000 + i).to_string());
        let long: Vec<f64> = serde_json::from_str(&row["long"]).expect("a JSON array");
        assert_eq!(long, p.long.to_vec());
    }
    #[cfg(feature = "parquet")]
    {
        use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
        let out = tmp("pose-parquet");
        assert_ok(&export(&rec, "parquet", &out, &[]));
        let file = std::fs::File::open(out.join("exp.pose.parquet")).expect("open");
        let builder = ParquetRecordBatchReaderBuilder::try_new(file).expect("a parquet file");
        let types: Vec<String> = builder.schema().fields()[7..]
            .iter()
            .map(|f| format!("{}:{}", f.name(), f.data_type()))
            .collect();
        assert_eq!(
            types,
            [
                "position:List(Float32)",
                "counts:List(UInt16)",
                "long:List(Float64)"
            ]
        );
    }
}
