//! The bridge's message: one Zenoh sample per record (or per loss report), a fixed header, the
//! producer's name, the emitter's, the schema's descriptor (the first record of a schema in a
//! pass only), then the payload as the producer's lane held it.

use thiserror::Error;

/// The message format's version (the first byte).
const VERSION: u8 = 1;
/// A record.
pub const KIND_RECORD: u8 = 0;
/// A loss report: records of the lane the node's reader lost (`ring_lost` grew), no payload.
pub const KIND_LOSS: u8 = 1;
/// The producer's lane ended (read to its end on the node): no payload.
pub const KIND_END: u8 = 2;

/// What a message says besides its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header<'a> {
    /// [`KIND_RECORD`], [`KIND_LOSS`] or [`KIND_END`].
    pub kind: u8,
    /// The reading pass that sent it: a live bridge's instance, or one history query.
    pub pass: u64,
    /// How many records of this lane the pass sent before this one.
    pub n: u64,
    /// The record's sequence number in the producer's lane.
    pub seq: u64,
    /// Records of this lane the pass lost on the node (its ring overwrote them), so far.
    pub ring_lost: u64,
    /// When the producer wrote it, CLOCK_REALTIME nanoseconds.
    pub t_nanos: u64,
    /// The producer's process id on the node.
    pub pid: u32,
    /// Its level's wire byte.
    pub level: u8,
    /// The payload's schema version.
    pub schema_version: u16,
    /// The schema's fingerprint.
    pub fingerprint: u64,
    /// The producer's name.
    pub producer: &'a str,
    /// The emitter's name ("" for none).
    pub emitter: &'a str,
    /// The schema's canonical descriptor bytes (empty: sent before in this pass).
    pub descriptor: &'a [u8],
}

/// A message that is not one.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("a bridge message that cannot be read: {0}")]
pub struct WireError(&'static str);

const FIXED: usize = 1 + 1 + 8 * 5 + 4 + 1 + 2 + 8;

impl Header<'_> {
    /// The header's encoded length.
    pub fn len(&self) -> usize {
        FIXED + 2 + self.producer.len() + 2 + self.emitter.len() + 4 + self.descriptor.len()
    }

    /// Whether it encodes to nothing (never).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The message: this header, then `payload`.
    pub fn encode(&self, payload: &[u8]) -> Vec<u8> {
        let mut b = Vec::with_capacity(self.len() + payload.len());
        b.push(VERSION);
        b.push(self.kind);
        for v in [self.pass, self.n, self.seq, self.ring_lost, self.t_nanos] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&self.pid.to_le_bytes());
        b.push(self.level);
        b.extend_from_slice(&self.schema_version.to_le_bytes());
        b.extend_from_slice(&self.fingerprint.to_le_bytes());
        for s in [self.producer.as_bytes(), self.emitter.as_bytes()] {
            let s = &s[..s.len().min(u16::MAX as usize)];
            b.extend_from_slice(&(s.len() as u16).to_le_bytes());
            b.extend_from_slice(s);
        }
        b.extend_from_slice(&(self.descriptor.len() as u32).to_le_bytes());
        b.extend_from_slice(self.descriptor);
        b.extend_from_slice(payload);
        b
    }
}

/// Reads a message: its header and its payload.
pub fn decode(b: &[u8]) -> Result<(Header<'_>, &[u8]), WireError> {
    let mut r = Cursor(b);
    if r.take(1)? != [VERSION] {
        return Err(WireError(
            "an unknown version (a newer or older snapbus on the node?)",
        ));
    }
    let kind = r.u8()?;
    let pass = r.u64()?;
    let n = r.u64()?;
    let seq = r.u64()?;
    let ring_lost = r.u64()?;
    let t_nanos = r.u64()?;
    let pid = u32::from_le_bytes(r.array()?);
    let level = r.u8()?;
    let schema_version = u16::from_le_bytes(r.array()?);
    let fingerprint = r.u64()?;
    let producer = r.str()?;
    let emitter = r.str()?;
    let dlen = u32::from_le_bytes(r.array()?) as usize;
    let descriptor = r.take(dlen)?;
    Ok((
        Header {
            kind,
            pass,
            n,
            seq,
            ring_lost,
            t_nanos,
            pid,
            level,
            schema_version,
            fingerprint,
            producer,
            emitter,
            descriptor,
        },
        r.0,
    ))
}

struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.0.len() < n {
            return Err(WireError("cut short"));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }

    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    fn str(&mut self) -> Result<&'a str, WireError> {
        let n = u16::from_le_bytes(self.array()?) as usize;
        std::str::from_utf8(self.take(n)?).map_err(|_| WireError("a name that is not UTF-8"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_cut() {
        let h = Header {
            kind: KIND_RECORD,
            pass: 7,
            n: 3,
            seq: 99,
            ring_lost: 2,
            t_nanos: 123,
            pid: 42,
            level: 2,
            schema_version: 1,
            fingerprint: 0xfeed,
            producer: "demo",
            emitter: "demo",
            descriptor: b"desc",
        };
        let m = h.encode(b"payload");
        let (d, p) = decode(&m).expect("decodes");
        assert_eq!((d, p), (h.clone(), &b"payload"[..]));
        for cut in 0..h.len() {
            assert!(decode(&m[..cut]).is_err(), "cut at {cut}");
        }
    }
}
