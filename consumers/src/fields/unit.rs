//! Units of fields, from their names: snapbus names carry their unit as the last word of the
//! field (`duration_nanos`, `rss_bytes`, `latency_ms`, `rate_hz`), so declaring a unit is
//! naming the field. Exporters read it from there: OTLP's `unit` (UCUM) and OpenMetrics'
//! `# UNIT` (the name's own suffix).

/// A unit known from a field's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unit {
    /// The word that ends the field's name (`nanos`): OpenMetrics' unit, a suffix of the
    /// metric's name.
    pub suffix: &'static str,
    /// The UCUM code (`ns`): OTLP's `unit`.
    pub ucum: &'static str,
}

/// Name endings and their UCUM codes. A reduced leaf (`latency_ms.mean`) keeps its unit;
/// a shape or an index does not.
const UNITS: &[(&str, &str)] = &[
    ("nanos", "ns"),
    ("ns", "ns"),
    ("nanoseconds", "ns"),
    ("micros", "us"),
    ("us", "us"),
    ("microseconds", "us"),
    ("millis", "ms"),
    ("ms", "ms"),
    ("milliseconds", "ms"),
    ("secs", "s"),
    ("seconds", "s"),
    ("minutes", "min"),
    ("hours", "h"),
    ("bytes", "By"),
    ("hz", "Hz"),
    ("celsius", "Cel"),
    ("kelvin", "K"),
    ("meters", "m"),
    ("volts", "V"),
    ("amperes", "A"),
    ("watts", "W"),
    ("joules", "J"),
    ("grams", "g"),
    ("ratio", "1"),
    ("ratios", "1"),
    ("percent", "%"),
    ("pct", "%"),
];

/// Reductions that keep the unit of what they reduce.
const SAME_UNIT: &[&str] = &["mean", "min", "max"];

/// The unit of the leaf `leaf` (a dotted path, [`Plan::leaves`](super::Plan::leaves)), from
/// the last word of its field's name: `step_duration_nanos` → ns, `rss_bytes` → By,
/// `latency_ms.mean` → ms; `None` when the name says none.
pub fn unit_of(leaf: &str) -> Option<Unit> {
    let mut segs = leaf.rsplit('.');
    let mut last = segs.next()?;
    if SAME_UNIT.contains(&last) {
        last = segs.next()?;
    }
    let word = last.rsplit('_').next()?;
    UNITS
        .iter()
        .find(|(w, _)| w.eq_ignore_ascii_case(word))
        .map(|(suffix, ucum)| Unit { suffix, ucum })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_come_from_the_last_word_of_the_name() {
        let u = |l| unit_of(l).map(|u| u.ucum);
        assert_eq!(u("duration_nanos"), Some("ns"));
        assert_eq!(u("mem.rss_bytes"), Some("By"));
        assert_eq!(u("latency_ms.mean"), Some("ms"));
        assert_eq!(u("rate_hz"), Some("Hz"));
        assert_eq!(u("reward"), None);
        assert_eq!(u("position.0"), None);
        assert_eq!(u("image.shape.0"), None);
        assert_eq!(unit_of("t_secs").map(|u| u.suffix), Some("secs"));
    }
}
