//! What the options name that a schema lacks: the warnings printed when a schema is first met,
//! and what `--until-end` turns into an error.

use snapbus_bus::subscriber::Glob;
use snapbus_schemas::SchemaDescriptor;

use super::options::{AggregatorOptions, Window};
use super::summary::SUMMARY_SUFFIX;
use crate::fields::{Plan, PlanError};

/// Which of the options that name fields matched a field of a summarized schema.
#[derive(Debug, Default)]
pub(super) struct OptionMatches {
    /// Schemas with a plan (`id vN`).
    pub(super) summarized: Vec<String>,
    /// Per `--field` glob: whether it matched a field of one of them.
    pub(super) fields: Vec<bool>,
    /// Whether one of them has the episode field (`--window episode`).
    pub(super) episode_field: bool,
}

impl OptionMatches {
    /// What no schema summarized so far has (see `Aggregator::unmatched_options`).
    pub(super) fn unmatched(&self, opts: &AggregatorOptions) -> Vec<String> {
        if self.summarized.is_empty() {
            return Vec::new();
        }
        let schemas = self.summarized.join(", ");
        let mut out: Vec<String> = opts
            .fields
            .iter()
            .zip(&self.fields)
            .filter(|(_, hit)| !**hit)
            .map(|(g, _)| format!("--field '{}' matched no field of {schemas}", g.as_str()))
            .collect();
        if opts.window == Window::Episode && !self.episode_field {
            out.push(format!(
                "--episode-field '{}' is an integer field of none of {schemas} (summarized per \
                 experiment only)",
                opts.episode_field
            ));
        }
        out
    }
}

/// Whether `--field` glob `g` alone selects a numeric field of `schema`.
pub(super) fn glob_matches(opts: &AggregatorOptions, schema: &SchemaDescriptor, g: &Glob) -> bool {
    Plan::compile(
        schema.root(),
        &opts.group_by,
        opts.window_field(),
        std::slice::from_ref(g),
    )
    .is_ok_and(|p| !p.leaves().is_empty())
}

/// What `opts` name that `schema` lacks, as the aggregator warns when it first meets the
/// schema: each `fields` glob that matches no numeric field, the episode field (with
/// [`Window::Episode`]), a group-by field. Empty for a schema it summarizes as asked (and for
/// summary schemas, which it summarizes only when asked to).
pub fn option_mismatches(opts: &AggregatorOptions, schema: &SchemaDescriptor) -> Vec<String> {
    if schema.id().ends_with(SUMMARY_SUFFIX) && !opts.summaries_wanted() {
        return Vec::new();
    }
    let name = format!("{} v{}", schema.id(), schema.version());
    let window_field = opts.window_field();
    let plan = match Plan::compile(schema.root(), &opts.group_by, window_field, &opts.fields) {
        Ok(p) => p,
        Err(PlanError::GroupField(f)) => {
            return vec![format!(
                "{name} has no group-by field {f:?}: it is not summarized"
            )];
        }
    };
    let mut out = Vec::new();
    if window_field.is_some() && !plan.has_window_field() {
        out.push(format!(
            "{name} has no integer field {:?} (--episode-field): summarized per experiment only",
            opts.episode_field
        ));
    }
    for g in &opts.fields {
        if !glob_matches(opts, schema, g) {
            out.push(format!(
                "--field '{}' matches no numeric field of {name}",
                g.as_str()
            ));
        }
    }
    out
}
