//! The naming rule of the aggregator's summary schemas, which the exporters recognise even in a
//! build without the aggregator (feature `aggregator`).
//!
//! A summary of schema `S` is `S.summary`; grouped (`--group-by F1,F2`), it is
//! `S.by_F1-F2.summary` (dots of nested fields as `_`): another descriptor (a `group` field),
//! so another id, never a second layout under one id (which `snapbus ls` shows as a
//! `CONFLICT`). Both end with [`SUMMARY_SUFFIX`], which is what tells a summary.

/// The suffix of summary schema ids (public as `aggregator::SUMMARY_SUFFIX`).
pub(crate) const SUMMARY_SUFFIX: &str = ".summary";

/// The start of the segment that names a grouped summary's group-by fields.
#[cfg_attr(not(feature = "aggregator"), allow(dead_code))]
const GROUP_PREFIX: &str = "by_";

/// The id of the summaries of schema `source` grouped by `group` (dotted field paths; none:
/// `<source>.summary`).
#[cfg_attr(not(feature = "aggregator"), allow(dead_code))]
pub(crate) fn summary_id(source: &str, group: &[String]) -> String {
    if group.is_empty() {
        return format!("{source}{SUMMARY_SUFFIX}");
    }
    let fields: Vec<String> = group.iter().map(|g| g.replace('.', "_")).collect();
    format!(
        "{source}.{GROUP_PREFIX}{}{SUMMARY_SUFFIX}",
        fields.join("-")
    )
}

/// The id of the schema a summary id summarizes (`grouped`: the summary has a `group` field,
/// so its id names the group-by fields); `None` if `id` is not a summary id.
#[cfg_attr(not(feature = "aggregator"), allow(dead_code))]
pub(crate) fn summarized_id(id: &str, grouped: bool) -> Option<&str> {
    let base = id.strip_suffix(SUMMARY_SUFFIX)?;
    if !grouped {
        return Some(base);
    }
    match base.rsplit_once('.') {
        Some((source, last)) if last.starts_with(GROUP_PREFIX) => Some(source),
        _ => Some(base),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouped_summaries_have_ids_of_their_own() {
        assert_eq!(summary_id("demo.step", &[]), "demo.step.summary");
        let g = summary_id("demo.step", &["episode".into(), "cfg.lr".into()]);
        assert_eq!(g, "demo.step.by_episode-cfg_lr.summary");
        snapbus_schemas::validate_schema_id(&g).expect("a valid id");
        assert_eq!(summarized_id(&g, true), Some("demo.step"));
        assert_eq!(summarized_id("demo.step.summary", false), Some("demo.step"));
        assert_eq!(
            summarized_id("sales.by_region.summary", false),
            Some("sales.by_region"),
            "an ungrouped summary of a schema whose name starts with by_"
        );
        assert_eq!(summarized_id("demo.step", false), None);
    }
}
