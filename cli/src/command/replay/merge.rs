//! `replay --print` in record-time order across producers.
//!
//! A recording holds each producer's records in the order it wrote them, but producers are
//! interleaved in the file as the recorder read them: a snapshot holds one producer's history,
//! then the next one's. [`items`] first scans the file once; if no record is older than one of
//! another producer already seen, the file is read again as it is. Otherwise it is read once per
//! producer, each pass keeping that producer's records (and loss records), and the passes are
//! merged by record time (a k-way merge: memory holds one record per producer, whatever the
//! file's size; ties keep the order in which the producers first appear). A damaged or cut file
//! gives every record that precedes the damage, merged, and then the read error; damaged
//! parts the reader skipped and metadata records (a cut file's `snapbus.cut`) are returned
//! once, ahead of the records, which are merged as usual.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use anyhow::Context;
use snapbus_consumers::recording::{ChannelInfo, Item, ReadError, RecordingReader};

type Reader = RecordingReader<BufReader<File>>;

/// At most this many producers are merged (one pass and one open file each); a file with more
/// is printed in file order, with a warning.
const MAX_PASSES: usize = 64;

/// A producer as the recording names it: its lane id (stable across broker restarts; the
/// broker's producer id in files written before lane ids were recorded) and pid.
type ProducerKey = (u64, u32);

fn key(channel: &ChannelInfo) -> ProducerKey {
    (channel.lane_id.unwrap_or(channel.producer_id), channel.pid)
}

/// The producer and record time of a message or loss record.
fn stamp(item: &Item) -> Option<(ProducerKey, u64)> {
    match item {
        Item::Message(m) => Some((key(&m.channel), m.t_nanos)),
        Item::Loss {
            channel, t_nanos, ..
        } => Some((key(channel), *t_nanos)),
        Item::Metadata { .. } | Item::Damaged(_) => None,
    }
}

fn open(path: &Path, buffer_bytes: usize) -> anyhow::Result<Reader> {
    let f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    Ok(RecordingReader::new(BufReader::with_capacity(buffer_bytes, f)).with_resync())
}

/// The messages and loss records of `path`, ordered by record time across producers.
pub(super) fn items(
    path: &Path,
) -> anyhow::Result<Box<dyn Iterator<Item = Result<Item, ReadError>>>> {
    let (producers, ordered) = scan(open(path, 1 << 20)?);
    if ordered || producers.len() < 2 {
        return Ok(Box::new(open(path, 1 << 20)?));
    }
    if producers.len() > MAX_PASSES {
        snapbus_bus::say!(
            "snapbus replay: {}: {} producers, more than the {MAX_PASSES} this merge reads side \
             by side: printed in file order (each producer's records are in order)",
            path.display(),
            producers.len()
        );
        return Ok(Box::new(open(path, 1 << 20)?));
    }
    let mut streams = Vec::with_capacity(producers.len());
    for (k, p) in producers.into_iter().enumerate() {
        streams.push(Stream {
            producer: p,
            reader: open(path, 64 << 10)?,
            ended: false,
            damage: k == 0,
        });
    }
    Ok(Box::new(Merged::new(streams)))
}

/// The producers of a recording in order of first appearance, and whether its records are in
/// time order across producers (each no older than the newest of every other producer before
/// it). Reads up to the first error.
fn scan(reader: Reader) -> (Vec<ProducerKey>, bool) {
    let mut producers = Vec::new();
    let mut newest: HashMap<ProducerKey, u64> = HashMap::new();
    // The newest time of any producer, and the newest of any producer but that one.
    let mut first: Option<(u64, ProducerKey)> = None;
    let mut second: u64 = 0;
    let mut ordered = true;
    for item in reader {
        let Ok(item) = item else { break };
        let Some((p, t)) = stamp(&item) else { continue };
        let mine = newest.entry(p).or_insert_with(|| {
            producers.push(p);
            0
        });
        // Loss records are stamped when the recorder wrote them, after the records around
        // them: they do not make a file out of order.
        if matches!(item, Item::Loss { .. }) {
            continue;
        }
        let bound = match first {
            Some((_, q)) if q == p => second,
            Some((t1, _)) => t1,
            None => 0,
        };
        if t < bound {
            ordered = false;
        }
        if t > *mine {
            *mine = t;
            match first {
                Some((_, q)) if q == p => first = Some((t, p)),
                Some((t1, _)) if t > t1 => {
                    second = t1;
                    first = Some((t, p));
                }
                Some(_) => second = second.max(t),
                None => first = Some((t, p)),
            }
        }
    }
    (producers, ordered)
}

/// One pass over the file keeping one producer's records (and, in the first pass, the damaged
/// parts the reader skipped and the metadata records: every pass meets them, one returns them).
struct Stream {
    producer: ProducerKey,
    reader: Reader,
    ended: bool,
    damage: bool,
}

impl Stream {
    /// The next record of this producer, or a read error.
    fn next(&mut self) -> Option<Result<Item, ReadError>> {
        if self.ended {
            return None;
        }
        for item in self.reader.by_ref() {
            match item {
                Ok(item @ (Item::Damaged(_) | Item::Metadata { .. })) if self.damage => {
                    return Some(Ok(item));
                }
                Ok(item) => match stamp(&item) {
                    Some((p, _)) if p == self.producer => return Some(Ok(item)),
                    _ => {}
                },
                Err(e) => return Some(Err(e)),
            }
        }
        self.ended = true;
        None
    }
}

/// The k-way merge of the streams by record time. A read error ends a pass (or not, if the
/// reader goes on after it); every pass meets the same damage, so each error is returned once,
/// after every record that precedes it in any pass.
struct Merged {
    streams: Vec<Stream>,
    /// Each stream's next record.
    heads: Vec<Option<Item>>,
    /// (time, stream index) of each stream's next record.
    heap: BinaryHeap<Reverse<(u64, usize)>>,
    /// Streams still to be read for their first record.
    unprimed: std::ops::Range<usize>,
    /// Errors met, by the offset where the damage starts.
    errors: BTreeMap<u64, ReadError>,
}

impl Merged {
    fn new(streams: Vec<Stream>) -> Merged {
        let n = streams.len();
        Merged {
            streams,
            heads: (0..n).map(|_| None).collect(),
            heap: BinaryHeap::new(),
            unprimed: 0..n,
            errors: BTreeMap::new(),
        }
    }

    /// Reads stream `i`'s next record into the heap (noting the errors on the way).
    fn advance(&mut self, i: usize) {
        while let Some(next) = self.streams[i].next() {
            match next {
                Ok(item) => {
                    let t = stamp(&item).map_or(0, |(_, t)| t);
                    self.heads[i] = Some(item);
                    self.heap.push(Reverse((t, i)));
                    return;
                }
                Err(e) => {
                    self.errors.entry(e.offset).or_insert(e);
                }
            }
        }
    }
}

impl Iterator for Merged {
    type Item = Result<Item, ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        while let Some(i) = self.unprimed.next() {
            self.advance(i);
        }
        match self.heap.pop() {
            Some(Reverse((_, i))) => {
                let item = self.heads[i].take();
                self.advance(i);
                item.map(Ok)
            }
            None => self.errors.pop_first().map(|(_, e)| Err(e)),
        }
    }
}
