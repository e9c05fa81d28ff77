//! snapbus benchmarks. The criterion benches live in `benches/` (`cargo bench -p
//! snapbus-benches`); see `BENCHMARKS.md` at the workspace root for results and commands.
