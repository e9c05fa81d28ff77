//! Replay: a recording's records republished into a running bus by a producer of its own,
//! with the original relative timing (scaled) or as fast as possible, so every consumer works
//! on replayed data exactly as on live data.

use std::collections::HashMap;
use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use snapbus_bus::publisher::{EmitError, EmitMeta, Publisher};
use snapbus_bus::subscriber::Glob;
use thiserror::Error;

use crate::recording::{CUT_METADATA, Damage, Item, Message, ReadError, RecordingReader};

/// How to pace a replay.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pace {
    /// The original relative timing, sped up by this factor (1.0: real time).
    Speed(f64),
    /// As fast as possible (consumers that cannot keep up lose records, and say so).
    Max,
}

/// What a replay did.
#[derive(Debug, Clone, Default)]
pub struct ReplaySummary {
    /// Records republished.
    pub emitted: u64,
    /// Records not matching the globs.
    pub skipped: u64,
    /// Records the lane refused (larger than its largest frame, …).
    pub refused: u64,
    /// Records the recording says were lost when it was made (loss records).
    pub lost_in_recording: u64,
    /// Damaged parts of the file, skipped (what came after them was replayed).
    pub damaged: Vec<Damage>,
    /// The `snapbus.cut` record of a recording whose writer failed (what it could not write).
    pub cut: Option<std::collections::BTreeMap<String, String>>,
}

/// Why a replay stopped early.
#[derive(Debug, Error)]
pub enum ReplayError {
    /// The recording is damaged or unreadable (what came before was replayed).
    #[error("{0}")]
    Read(#[from] ReadError),
    /// A schema could not be registered with the bus.
    #[error("{0}")]
    Emit(#[from] EmitError),
}

/// Republishes the records of `reader` through `publisher`. `summary` is updated as it goes,
/// so that it is right even when an error ends the replay. Returns when the file ends, on
/// damage the reader cannot skip, or when `stop` is set; a damaged chunk is skipped and listed
/// in `summary.damaged`.
pub fn replay<R: Read>(
    reader: RecordingReader<R>,
    publisher: &Publisher,
    pace: Pace,
    globs: &[Glob],
    stop: &AtomicBool,
    summary: &mut ReplaySummary,
) -> Result<(), ReplayError> {
    // Channel id → how to emit its records, or None if the globs exclude it.
    let mut keys: HashMap<u16, Option<EmitMeta>> = HashMap::new();
    let mut clock: Option<(u64, Instant)> = None;
    let mut last: Option<(u16, Option<EmitMeta>)> = None;
    for item in reader {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let m: Message = match item? {
            Item::Message(m) => m,
            Item::Loss { record, .. } => {
                summary.lost_in_recording += record.lost + record.damaged;
                continue;
            }
            Item::Metadata { name, fields } => {
                if name == CUT_METADATA {
                    summary.cut = Some(fields);
                }
                continue;
            }
            Item::Damaged(d) => {
                summary.damaged.push(d);
                continue;
            }
        };
        // Records come in runs of one channel: check the last one before the map.
        let key = match last {
            Some((id, k)) if id == m.channel.id => k,
            _ => {
                let k = match keys.get(&m.channel.id) {
                    Some(k) => *k,
                    None => {
                        let schema = &m.channel.schema;
                        let k = if globs.is_empty() || globs.iter().any(|g| g.matches(schema.id()))
                        {
                            let key = publisher.register_schema(schema)?;
                            let emitter = m
                                .channel
                                .emitter
                                .as_deref()
                                .map_or(0, |name| publisher.emitter(name));
                            let version = u16::try_from(schema.version()).unwrap_or(u16::MAX);
                            Some(EmitMeta {
                                schema_key: key,
                                schema_version: version,
                                level: m.channel.level,
                                emitter,
                            })
                        } else {
                            None
                        };
                        keys.insert(m.channel.id, k);
                        k
                    }
                };
                last = Some((m.channel.id, k));
                k
            }
        };
        let Some(meta) = key else {
            summary.skipped += 1;
            continue;
        };
        if let Pace::Speed(speed) = pace {
            let (t0, w0) = *clock.get_or_insert((m.t_nanos, Instant::now()));
            let due =
                w0 + Duration::from_secs_f64(m.t_nanos.saturating_sub(t0) as f64 / 1e9 / speed);
            wait_until(due, stop);
        }
        match publisher.emit_with(meta, m.data.len(), |w| Ok(w.put(&m.data)?)) {
            Ok(_) => summary.emitted += 1,
            Err(EmitError::Claim(_)) => summary.refused += 1,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Sleeps until `due` (in slices, so that `stop` is seen within 100 ms).
fn wait_until(due: Instant, stop: &AtomicBool) {
    loop {
        let now = Instant::now();
        if now >= due || stop.load(Ordering::Relaxed) {
            return;
        }
        std::thread::sleep((due - now).min(Duration::from_millis(100)));
    }
}
