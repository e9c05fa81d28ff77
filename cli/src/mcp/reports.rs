//! `episode_reports`: the per-episode files `snapbus attach monty` writes (tbp.monty's
//! `{mode}_stats.csv`, `detailed_run_stats.json`, `{mode}_overall_stats.json`; the generic
//! layout's `{mode}_episodes.csv`), read back as rows.

use std::path::Path;

use anyhow::Context;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value as Json, json};

use super::Config;
use super::json::{cursor, page};

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct ReportsIn {
    /// The report consumer's output directory (`--output-dir`).
    pub(crate) dir: String,
    /// `train` or `eval` (default: every mode found).
    pub(crate) mode: Option<String>,
    /// Only the rows of these episodes (`episode` of the row: the episode column if the file
    /// has one, else the episode's position in the file, from 0).
    pub(crate) episodes: Option<Vec<u64>>,
    /// Only these columns (default all).
    pub(crate) columns: Option<Vec<String>>,
    /// A cursor from an earlier call, to continue a cut result.
    pub(crate) cursor: Option<String>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct ReportsOut {
    /// The rows: file, mode, episode, and the columns (numbers as numbers).
    pub(crate) rows: Vec<Json>,
    /// `{mode}_overall_stats.json` of each mode found, if written.
    pub(crate) overall: Map<String, Json>,
    /// The files read.
    pub(crate) files: Vec<String>,
    /// Give it back as `cursor` for the rest of the rows.
    pub(crate) next_cursor: Option<String>,
}

pub(crate) fn reports(cfg: &Config, p: ReportsIn) -> anyhow::Result<ReportsOut> {
    let start = cursor(p.cursor.as_deref()).map_err(anyhow::Error::msg)?;
    let dir = Path::new(&p.dir);
    anyhow::ensure!(dir.is_dir(), "{}: not a directory", dir.display());
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| {
            (n.ends_with("_stats.csv") || n.ends_with("episodes.csv")) && !n.contains("_old")
        })
        .collect();
    names.sort();
    anyhow::ensure!(
        !names.is_empty(),
        "{} holds no report ({{mode}}_stats.csv or {{mode}}_episodes.csv)",
        dir.display()
    );
    let mut rows = Vec::new();
    let mut overall = Map::new();
    let mut files = Vec::new();
    for name in names {
        let mode = name
            .trim_end_matches("_stats.csv")
            .trim_end_matches(".csv")
            .trim_end_matches("episodes")
            .trim_end_matches('_')
            .to_owned();
        if p.mode.as_ref().is_some_and(|m| *m != mode) {
            continue;
        }
        let path = dir.join(&name);
        read_csv(&path, &name, &mode, &p, &mut rows)?;
        files.push(path.display().to_string());
        let summary = dir.join(format!("{mode}_overall_stats.json"));
        if let Ok(text) = std::fs::read_to_string(&summary) {
            let v: Json = serde_json::from_str(&text)
                .with_context(|| format!("{} is not JSON", summary.display()))?;
            overall.insert(mode.clone(), v);
            files.push(summary.display().to_string());
        }
    }
    let (rows, next_cursor) = page(rows, start, cfg.max_result_bytes);
    Ok(ReportsOut {
        rows,
        overall,
        files,
        next_cursor,
    })
}

/// The rows of one CSV file. tbp.monty's has one row per learning module, its id (`LM_0`) in
/// an unnamed first column and no episode column: an episode starts at each `LM_0`.
fn read_csv(
    path: &Path,
    file: &str,
    mode: &str,
    p: &ReportsIn,
    rows: &mut Vec<Json>,
) -> anyhow::Result<()> {
    let mut r =
        csv::Reader::from_path(path).with_context(|| format!("opening {}", path.display()))?;
    let header: Vec<String> = r
        .headers()
        .with_context(|| format!("reading {}", path.display()))?
        .iter()
        .map(|h| {
            if h.is_empty() {
                "lm".to_owned()
            } else {
                h.to_owned()
            }
        })
        .collect();
    let episode_col = header.iter().position(|h| h == "episode");
    let mut ordinal: Option<u64> = None;
    for rec in r.records() {
        let rec = rec.with_context(|| format!("reading {}", path.display()))?;
        let episode = match episode_col.and_then(|i| rec.get(i)?.parse::<u64>().ok()) {
            Some(e) => e,
            None => {
                if ordinal.is_none() || rec.get(0) == Some("LM_0") {
                    ordinal = Some(ordinal.map_or(0, |o| o + 1));
                }
                ordinal.unwrap_or(0)
            }
        };
        if p.episodes.as_ref().is_some_and(|e| !e.contains(&episode)) {
            continue;
        }
        let mut row = Map::new();
        row.insert("file".into(), json!(file));
        row.insert("mode".into(), json!(mode));
        row.insert("episode".into(), json!(episode));
        for (h, v) in header.iter().zip(rec.iter()) {
            if p.columns.as_ref().is_some_and(|c| !c.contains(h)) || h == "episode" {
                continue;
            }
            let value = match v.parse::<f64>() {
                Ok(x) if x.is_finite() => json!(x),
                _ => json!(v),
            };
            row.insert(h.clone(), value);
        }
        rows.push(Json::Object(row));
    }
    Ok(())
}
