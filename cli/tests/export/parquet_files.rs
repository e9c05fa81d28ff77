//! Parquet: typed columns and every row, recordings larger than a batch, and a clear error in a
//! build without the `parquet` feature.

#[cfg(not(feature = "parquet"))]
use super::mixed;
#[cfg(feature = "parquet")]
use super::{Direct, assert_ok, dir_files, export_mixed, parquet_rows};
use super::{export, tmp};

#[cfg(not(feature = "parquet"))]
#[test]
fn parquet_without_the_feature_is_a_clear_error() {
    let rec = mixed("mixed-p0.mcap");
    let out = tmp("no-parquet");
    let o = export(&rec, "parquet", &out, &[]);
    assert!(!o.status.success());
    o.assert_stderr_has("--no-default-features");
    assert!(!o.stderr.contains("panicked"), "{}", o.stderr);
    assert!(!out.exists(), "nothing is created");
}

#[cfg(feature = "parquet")]
#[test]
fn parquet_has_typed_columns_and_every_row() {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    let (_, out, _) = export_mixed("mixed-p.mcap", "parquet", "mixed-parquet");
    assert_eq!(
        dir_files(&out),
        [
            "exp.obs.parquet",
            "exp.tick.v1.parquet",
            "exp.tick.v2.parquet",
            "snapbus.loss.parquet"
        ]
    );
    let file = std::fs::File::open(out.join("exp.obs.parquet")).expect("open");
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).expect("a parquet file");
    let types: Vec<String> = builder
        .schema()
        .fields()
        .iter()
        .map(|f| format!("{}:{}", f.name(), f.data_type()))
        .collect();
    assert_eq!(
        types,
        [
            "t_nanos:Timestamp(ns, \"UTC\")",
            "producer_id:UInt64",
            "producer:Utf8",
            "pid:UInt32",
            "level:Utf8",
            "seq:UInt32",
            "version:UInt32",
            "step:UInt64",
            "pos.x:Float64",
            "pos.y:Float64",
            "reward:Float64",
            "hist:List(Float32)",
            "image:List(UInt8)",
            "image.shape:List(Int64)",
            "label:Utf8",
            "note:Utf8",
            "phase:Utf8",
            "phase.Run.speed:Float32",
            "phase.Done:UInt8",
        ]
    );
    assert_eq!(parquet_rows(&out.join("exp.obs.parquet")), 30);
    assert_eq!(parquet_rows(&out.join("snapbus.loss.parquet")), 1);
}

#[cfg(feature = "parquet")]
#[test]
fn parquet_holds_recordings_larger_than_a_batch() {
    let rec = tmp("many.mcap");
    let mut d = Direct::create(&rec, 1 << 20);
    d.ticks(0, 20_000, 0, 1);
    d.finish();
    let out = tmp("many-parquet");
    assert_ok(&export(&rec, "parquet", &out, &[]));
    assert_eq!(parquet_rows(&out.join("exp.tick.parquet")), 20_000);
}
