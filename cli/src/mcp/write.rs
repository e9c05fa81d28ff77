//! The tools that write files or start consumers (refused unless `--allow-write`), run as
//! child processes of this binary, and the resources: recordings and schemas.

use std::process::Command;

use anyhow::Context;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use snapbus_bus::client::Census;

use super::{Config, resource};
use crate::bus::{bus_dir, connect};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct SnapshotIn {
    /// The recording to write (relative: in the first recordings directory).
    pub(crate) path: String,
    /// Only the last DURATION (e.g. 30s, 2m; default everything the rings hold).
    pub(crate) last: Option<String>,
    /// Schema-id globs (default all).
    pub(crate) schemas: Option<Vec<String>>,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct AttachIn {
    /// The consumer kind: recorder, aggregator, plotter, prometheus, otlp, rerun, monty, …
    pub(crate) kind: String,
    /// Its arguments, as on the command line (e.g. ["-o", "run.mcap"]).
    pub(crate) args: Option<Vec<String>>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct CommandOut {
    /// The command run.
    pub(crate) command: Vec<String>,
    /// What it printed (the consumer's id, …).
    pub(crate) stdout: String,
    /// Its log.
    pub(crate) stderr: String,
}

fn refuse(cfg: &Config, what: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        cfg.allow_write,
        "refused: `{what}` writes files or starts processes, and this server is read-only; \
         start it with `snapbus mcp --allow-write` to allow it"
    );
    Ok(())
}

/// Runs this binary with `args` (and the server's bus); its failure is the tool's error.
fn run(cfg: &Config, mut args: Vec<String>) -> anyhow::Result<CommandOut> {
    if let Some(bus) = &cfg.bus.bus {
        args.push(format!("--bus={bus}"));
    }
    let out = Command::new(&cfg.exe)
        .args(&args)
        .stdin(std::process::Stdio::null())
        .output()
        .with_context(|| format!("running {}", cfg.exe.display()))?;
    let mut command = vec!["snapbus".to_owned()];
    command.extend(args);
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    anyhow::ensure!(
        out.status.success(),
        "`{}` failed ({}): {stderr}",
        command.join(" "),
        out.status
    );
    Ok(CommandOut {
        command,
        stdout: String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        stderr,
    })
}

pub(crate) fn snapshot(cfg: &Config, p: SnapshotIn) -> anyhow::Result<CommandOut> {
    refuse(cfg, "snapshot")?;
    let path = std::path::Path::new(&p.path);
    let path = match (path.is_absolute(), cfg.recordings.first()) {
        (false, Some(dir)) => dir.join(path),
        _ => path.to_owned(),
    };
    let mut args = vec![
        "snapshot".to_owned(),
        "-o".to_owned(),
        path.display().to_string(),
    ];
    if let Some(last) = p.last {
        args.extend(["--last".to_owned(), last]);
    }
    for s in p.schemas.unwrap_or_default() {
        args.extend(["--schema".to_owned(), s]);
    }
    run(cfg, args)
}

pub(crate) fn attach(cfg: &Config, p: AttachIn) -> anyhow::Result<CommandOut> {
    refuse(cfg, "attach")?;
    let mut args = vec!["attach".to_owned(), p.kind];
    args.extend(p.args.unwrap_or_default());
    run(cfg, args)
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct RecordingsOut {
    /// Path, bytes, and when it was last written (UTC).
    pub(crate) recordings: Vec<serde_json::Value>,
}

pub(crate) fn list_recordings(cfg: &Config) -> anyhow::Result<RecordingsOut> {
    let recordings = super::query::recordings(cfg)
        .into_iter()
        .map(|(path, meta)| {
            let modified = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| crate::bus::utc(d.as_nanos() as u64));
            serde_json::json!({
                "path": path.display().to_string(), "bytes": meta.len(), "modified": modified,
            })
        })
        .collect();
    Ok(RecordingsOut { recordings })
}

/// The schemas on the bus (if it is up) and the recordings.
pub(crate) fn resources(cfg: &Config) -> Vec<rmcp::model::Resource> {
    let mut out = Vec::new();
    let state = bus_dir(&cfg.bus).and_then(|d| Ok(connect(&d)?.state_with(Census::Recent)?));
    if let Ok(s) = state {
        for x in &s.schemas {
            out.push(resource(
                format!("snapbus://schema/{}", x.id),
                x.id.clone(),
                format!(
                    "schema {} v{} on bus '{}': {}",
                    x.id, x.version, s.bus, x.descriptor
                ),
            ));
        }
    }
    for (path, meta) in super::query::recordings(cfg) {
        out.push(resource(
            format!("file://{}", path.display()),
            path.file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
            format!(
                "a snapbus recording ({} bytes): what `snapbus inspect` says",
                meta.len()
            ),
        ));
    }
    out
}

pub(crate) fn read_resource(cfg: &Config, uri: &str) -> anyhow::Result<String> {
    if let Some(id) = uri.strip_prefix("snapbus://schema/") {
        let d = super::live::describe(
            cfg,
            super::live::DescribeIn {
                schema: id.to_owned(),
            },
        )?;
        return Ok(serde_json::to_string(&d)?);
    }
    let path = super::resolve_recording(cfg, uri)?;
    let out = Command::new(&cfg.exe)
        .args(["inspect", "--json"])
        .arg(&path)
        .stdin(std::process::Stdio::null())
        .output()
        .with_context(|| format!("running {}", cfg.exe.display()))?;
    // A damaged file is described, then reported: the description is what is asked for.
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    anyhow::ensure!(
        !text.is_empty(),
        "{}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(text)
}
