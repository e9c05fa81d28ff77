//! What several verbs share: finding a bus and its broker's client, and printing records.

use anyhow::Context;
use serde_json::json;
use snapbus_bus::Level;
use snapbus_bus::client::{BusClient, BusState, Census, ClientError};
use snapbus_bus::runtime::{BusDir, BusName};
use snapbus_bus::subscriber::{Glob, Record};
use snapbus_schemas::SchemaDescriptor;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use crate::cli::{BusArgs, WaitArgs};

/// The directory of the bus named by `--bus`, `$SNAPBUS_BUS` or the default.
pub(crate) fn bus_dir(args: &BusArgs) -> anyhow::Result<BusDir> {
    let name = BusName::resolve(args.bus.as_deref())?;
    Ok(BusDir::locate(&name))
}

/// The client of the broker of `dir`, or the error users should see (no bus running).
pub(crate) fn connect(dir: &BusDir) -> anyhow::Result<BusClient> {
    Ok(BusClient::connect(dir)?)
}

/// With `--wait`: waits until the broker of `dir` accepts connections, saying once on stderr
/// that `who` waits; past the `--wait` limit, the error users see when no bus runs. Without
/// it, returns at once (the caller's own connection fails as usual).
pub(crate) fn wait_for_bus(dir: &BusDir, wait: &WaitArgs, who: &str) -> anyhow::Result<()> {
    let Some(limit) = wait.wait else {
        return Ok(());
    };
    let t0 = std::time::Instant::now();
    let mut said = false;
    loop {
        let err = match BusClient::connect(dir) {
            Ok(_) => return Ok(()),
            Err(e @ ClientError::NotRunning { .. }) => e,
            Err(e) => return Err(e.into()),
        };
        if let Some(limit) = limit.filter(|l| t0.elapsed() >= *l) {
            return Err(anyhow::Error::new(err).context(format!(
                "{who}: no bus appeared within --wait {}",
                humantime::format_duration(limit)
            )));
        }
        if !said {
            said = true;
            snapbus_bus::say!(
                "{who}: waiting for the bus '{}' at {} (start it with `snapbus up{}`)…",
                dir.name(),
                dir.path().display(),
                match dir.name().as_str() {
                    "default" => String::new(),
                    name => format!(" --bus {name}"),
                }
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The bus's state (`ls`), each ring's census at most a few seconds old.
pub(crate) fn state(dir: &BusDir) -> anyhow::Result<BusState> {
    Ok(connect(dir)?.state()?)
}

/// Parses globs, failing with the first bad one.
pub(crate) fn globs(texts: &[String]) -> anyhow::Result<Vec<Glob>> {
    texts
        .iter()
        .map(|t| Glob::new(t).map_err(anyhow::Error::from))
        .collect()
}

/// The ids of the schemas on the bus now (of live and recently dead producers), sorted.
pub(crate) fn schema_ids(dir: &BusDir) -> anyhow::Result<Vec<String>> {
    let state = connect(dir)?.state_with(Census::Skip)?;
    let mut ids: Vec<String> = state.schemas.into_iter().map(|s| s.id).collect();
    ids.sort();
    ids.dedup();
    Ok(ids)
}

/// The globs that match none of `ids`.
pub(crate) fn unmatched_globs<'a>(globs: &'a [Glob], ids: &[String]) -> Vec<&'a str> {
    globs
        .iter()
        .filter(|g| !ids.iter().any(|id| g.matches(id)))
        .map(Glob::as_str)
        .collect()
}

/// "--schema 'a', 'b' matches none of the schemas in WHERE (x, y)", for a warning or an error.
pub(crate) fn no_schema_matches(unmatched: &[&str], ids: &[String], place: &str) -> String {
    let globs = unmatched
        .iter()
        .map(|g| format!("'{g}'"))
        .collect::<Vec<_>>()
        .join(", ");
    if ids.is_empty() {
        format!("--schema {globs} matches nothing: {place} holds no schemas")
    } else {
        format!(
            "--schema {globs} matches none of the schemas {place} holds: {}",
            ids.join(", ")
        )
    }
}

/// A flag set by SIGINT or SIGTERM.
pub(crate) fn interrupted() -> anyhow::Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&flag))
            .context("installing a signal handler")?;
    }
    Ok(flag)
}

/// A lane's level byte by name (lowercase), or its number if it is not one of the five.
pub(crate) fn level_name(level: u8) -> String {
    Level::from_u8(level).map_or_else(|| level.to_string(), |l| l.to_string().to_lowercase())
}

/// The wire bytes as lowercase hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// One event as the JSON object `echo` prints, serialized field by field: the payload is
/// written as it is decoded, so a 16 MiB record costs its bytes and a write buffer, not a
/// JSON tree of millions of nodes.
#[derive(serde::Serialize)]
struct EventJson<'a> {
    schema: &'a str,
    version: u32,
    level: String,
    t_nanos: u64,
    producer: serde_json::Value,
    target: serde_json::Value,
    seq: u64,
    payload: PayloadJson<'a>,
}

/// A payload as `echo` prints it: decoded (or the decode error), or with `raw` its hex.
enum PayloadJson<'a> {
    Decoded(snapbus_schemas::Value<'a>),
    Hex(String),
    Error(String),
}

impl<'a> PayloadJson<'a> {
    fn new(schema: &'a SchemaDescriptor, bytes: &'a [u8], raw: bool) -> PayloadJson<'a> {
        if raw {
            return PayloadJson::Hex(hex(bytes));
        }
        match schema.decode(bytes) {
            Ok(v) => PayloadJson::Decoded(v),
            Err(e) => PayloadJson::Error(e.to_string()),
        }
    }
}

impl serde::Serialize for PayloadJson<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            PayloadJson::Decoded(v) => v.as_json().serialize(s),
            PayloadJson::Hex(h) => s.serialize_str(h),
            PayloadJson::Error(e) => json!({ "decode_error": e }).serialize(s),
        }
    }
}

/// Writes one record as the JSON line `echo` prints (`raw`: the payload as hex).
pub(crate) fn write_record_json(
    out: &mut impl std::io::Write,
    r: &Record<'_>,
    raw: bool,
) -> std::io::Result<()> {
    let event = EventJson {
        schema: r.schema.id(),
        version: u32::from(r.meta.schema_version),
        level: level_name(r.meta.level),
        t_nanos: r.meta.t_nanos,
        producer: json!({ "id": r.producer_id, "name": r.producer.name, "pid": r.producer.pid }),
        target: json!(r.emitter),
        seq: r.meta.seq,
        payload: PayloadJson::new(r.schema, r.payload, raw),
    };
    serde_json::to_writer(&mut *out, &event)?;
    out.write_all(b"\n")
}

/// One recorded message as the JSON object `echo` prints for a live record.
pub(crate) fn message_json(m: &snapbus_consumers::recording::Message) -> serde_json::Value {
    let c = &m.channel;
    let event = EventJson {
        schema: c.schema.id(),
        version: c.schema.version(),
        level: level_name(c.level.as_u8()),
        t_nanos: m.t_nanos,
        producer: json!({ "id": c.producer_id, "name": c.producer, "pid": c.pid }),
        target: json!(c.emitter),
        seq: u64::from(m.sequence),
        payload: PayloadJson::new(&c.schema, &m.data, false),
    };
    serde_json::to_value(event).unwrap_or_default()
}

/// An error and its causes on one line, `outer: cause: root cause` (what `{:#}` prints), but
/// without repeating a cause whose text the message before it already contains: many library
/// errors print their source in their own message (`creating x: {source}`) and also return it
/// from `source()`, and `{:#}` would print it twice ("No such file or directory (os error 2):
/// No such file or directory (os error 2)"). Every error the CLI prints goes through this.
pub(crate) fn error_chain(err: &anyhow::Error) -> String {
    let mut line = String::new();
    let mut previous: Option<String> = None;
    for cause in err.chain() {
        let text = cause.to_string();
        let shown = previous.as_deref().is_some_and(|p| p.contains(&text));
        if !shown && !text.is_empty() {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
        previous = Some(text);
    }
    line
}

/// The mode of every directory the CLI creates (csv and parquet exports).
pub(crate) const DIR_MODE: u32 = 0o700;

/// Creates `path` for writing, 0600, replacing a file of ours there by rename; never through
/// a symlink, never another user's file (the one helper every output goes through:
/// [`snapbus_consumers::output`]). The caller has refused an existing path without `--force`.
pub(crate) fn create_file(path: &std::path::Path) -> anyhow::Result<std::fs::File> {
    Ok(snapbus_consumers::output::create(path, true)?)
}

/// Creates `dir` and its missing parents, [`DIR_MODE`].
pub(crate) fn create_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
}

/// Checks that files can be created in the existing directory `dir` (by creating and removing
/// one), so that a consumer fails before it reads anything rather than after.
pub(crate) fn check_writable_dir(dir: &std::path::Path) -> anyhow::Result<()> {
    let probe = dir.join(format!(".snapbus-probe-{}", std::process::id()));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
    {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => Err(e).with_context(|| format!("cannot create files in {}", dir.display())),
    }
}

/// CLOCK_REALTIME nanoseconds as UTC, RFC 3339 with milliseconds (`2026-11-23T09:00:00.123Z`).
pub(crate) fn utc(t_nanos: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_nanos(t_nanos);
    humantime::format_rfc3339_millis(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::error_chain;

    /// What `#[error("creating {path}: {source}")]` with `#[source]` derives.
    #[derive(Debug)]
    struct Create {
        path: &'static str,
        source: std::io::Error,
    }

    impl std::fmt::Display for Create {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "creating {}: {}", self.path, self.source)
        }
    }

    impl std::error::Error for Create {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.source)
        }
    }

    #[test]
    fn a_cause_already_in_the_message_is_printed_once() {
        let io = || std::io::Error::from(std::io::ErrorKind::NotFound);
        let err = anyhow::Error::new(Create {
            path: "/nodir/r.mcap",
            source: io(),
        })
        .context("starting the recorder");
        let line = error_chain(&err);
        assert_eq!(
            line,
            format!("starting the recorder: creating /nodir/r.mcap: {}", io())
        );
        // Causes that are not repeated are all printed, as `{:#}` does.
        let err = anyhow::Error::new(io())
            .context("opening x")
            .context("replaying");
        assert_eq!(error_chain(&err), format!("{err:#}"));
    }
}
