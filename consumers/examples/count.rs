//! A consumer in about 20 lines: counts records per schema and prints the counts every second
//! (`cargo run -p snapbus-consumers --example count -- 'demo.*'`; Ctrl-C to stop).

use std::collections::BTreeMap;

use snapbus_consumers::prelude::*;

#[derive(Default)]
struct Count(BTreeMap<String, u64>);

impl Consumer for Count {
    fn on_event(&mut self, r: &Record<'_>) -> Result<Flow, HookError> {
        *self.0.entry(r.schema.id().to_owned()).or_default() += 1;
        Ok(Flow::Continue)
    }
    fn flush(&mut self) -> Result<(), HookError> {
        println!("{:?}", self.0);
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut opts = RunOptions::new("count");
    opts.subscribe.globs = std::env::args()
        .skip(1)
        .map(|g| Glob::new(&g))
        .collect::<Result<_, _>>()?;
    let dir = BusDir::locate(&BusName::resolve(None)?);
    let summary = run(&dir, &opts, &mut Count::default(), None)?;
    eprintln!("{summary:?}");
    Ok(())
}
