//! What `export` writes: never over an existing output without `--force` nor over its input,
//! private files and directories, and nothing at all when `--schema` matches nothing.

use snapbus_consumers::recording::RecordingReader;

use super::{assert_ok, dir_files, export, mixed, mode, read_lines, tmp};

#[test]
fn existing_output_is_refused_without_force() {
    let rec = mixed("mixed-f.mcap");
    let out = tmp("exists.jsonl");
    std::fs::write(&out, "keep me").expect("write");
    let o = export(&rec, "jsonl", &out, &[]);
    assert!(!o.status.success());
    o.assert_stderr_has("exists");
    o.assert_stderr_has("--force");
    assert_eq!(
        std::fs::read_to_string(&out).expect("read"),
        "keep me",
        "untouched"
    );
    let o = export(&rec, "jsonl", &out, &["--force"]);
    assert_ok(&o);
    assert_eq!(read_lines(&out).len(), 40);

    let dir = tmp("exists-dir");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let o = export(&rec, "csv", &dir, &[]);
    assert!(!o.status.success());
    o.assert_stderr_has("--force");
    assert!(dir_files(&dir).is_empty());
    let o = export(&rec, "csv", &dir, &["--force"]);
    assert_ok(&o);
    assert_eq!(dir_files(&dir).len(), 4);

    // Never over the input, even with --force.
    let o = export(&rec, "mcap-json", &rec, &["--force"]);
    assert!(!o.status.success());
    o.assert_stderr_has("being exported");
    assert!(RecordingReader::new(std::fs::read(&rec).expect("read").as_slice()).all(|r| r.is_ok()));
}

/// Issue 15, item 12: every file and directory `export` creates is private (0600 / 0700), in
/// every format, whatever the umask lets through.
#[test]
fn every_export_file_and_directory_is_private() {
    let rec = mixed("modes.mcap");
    let mut formats = vec![("jsonl", false), ("mcap-json", false), ("csv", true)];
    if cfg!(feature = "parquet") {
        formats.push(("parquet", true));
    }
    for (format, is_dir) in formats {
        let out = tmp(&format!("modes-{format}"));
        let o = export(&rec, format, &out, &[]);
        assert_ok(&o);
        if is_dir {
            assert_eq!(mode(&out), 0o700, "{format}: the directory");
            let files = dir_files(&out);
            assert!(files.len() >= 3, "{format}: {files:?}");
            for f in files {
                assert_eq!(mode(&out.join(&f)), 0o600, "{format}: {f}");
            }
        } else {
            assert_eq!(mode(&out), 0o600, "{format}");
        }
    }
}

/// Issue 15, item 16: a `--schema` that matches nothing in the recording is an error naming
/// the schemas that are there, in every format, and leaves no empty output behind; one glob
/// among several that matches nothing is a warning.
#[test]
fn a_schema_glob_that_matches_nothing_is_an_error_naming_the_schemas() {
    let rec = mixed("nomatch.mcap");
    let mut formats = vec!["jsonl", "csv", "mcap-json"];
    if cfg!(feature = "parquet") {
        formats.push("parquet");
    }
    for format in formats {
        let out = tmp(&format!("nomatch-{format}"));
        let o = export(&rec, format, &out, &["--schema", "nomatch.*"]);
        assert!(!o.status.success(), "{format}: {}", o.stderr);
        assert!(
            o.stderr.contains("'nomatch.*'")
                && o.stderr.contains("exp.obs")
                && o.stderr.contains("exp.tick"),
            "{format}: {}",
            o.stderr
        );
        assert!(!out.exists(), "{format}: no output is left behind");
    }
    let out = tmp("partmatch.jsonl");
    let o = export(
        &rec,
        "jsonl",
        &out,
        &["--schema", "exp.tick", "--schema", "nomatch.*"],
    );
    assert_ok(&o);
    assert!(
        o.stderr.contains("warning") && o.stderr.contains("'nomatch.*'"),
        "{}",
        o.stderr
    );
    // The 9 ticks (v1 and v2) and the loss record.
    assert_eq!(read_lines(&out).len(), 10);
}
