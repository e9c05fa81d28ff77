//! The naming rule of the aggregator's summary schemas, which the exporters recognise even in a
//! build without the aggregator (feature `aggregator`).

/// The suffix of summary schema ids (public as `aggregator::SUMMARY_SUFFIX`).
pub(crate) const SUMMARY_SUFFIX: &str = ".summary";
