//! The bridge's messages: a record (or a loss report, or a lane's end) is a fixed header, the
//! producer's name, the emitter's, the schema's descriptor (the first record of a schema in a
//! pass only), the payload's length, then the payload as the producer's lane held it. A Zenoh
//! sample holds one message or several of one key one after the other ([`messages`]): the
//! node sends small records in batches, since a sample costs more than a small record.

use thiserror::Error;

/// The message format's version (the first byte).
const VERSION: u8 = 2;
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
    /// The header's encoded length (with the payload's length).
    pub fn len(&self) -> usize {
        FIXED + 2 + self.producer.len() + 2 + self.emitter.len() + 4 + self.descriptor.len() + 4
    }

    /// Whether it encodes to nothing (never).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The message: this header, then `payload`.
    pub fn encode(&self, payload: &[u8]) -> Vec<u8> {
        let mut b = Vec::with_capacity(self.len() + payload.len());
        self.encode_into(&mut b, payload);
        b
    }

    /// The message appended to `b` (a batch of messages of one key).
    pub fn encode_into(&self, b: &mut Vec<u8>, payload: &[u8]) {
        b.reserve(self.len() + payload.len());
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
        b.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        b.extend_from_slice(payload);
    }
}

/// The messages of a sample, in order; the first that cannot be read ends them (an `Err`).
pub fn messages(sample: &[u8]) -> impl Iterator<Item = Result<(Header<'_>, &[u8]), WireError>> {
    let mut rest = Some(sample);
    std::iter::from_fn(move || {
        let b = rest.take().filter(|b| !b.is_empty())?;
        Some(decode(b).map(|(h, payload, after)| {
            rest = Some(after);
            (h, payload)
        }))
    })
}

/// Reads the first message of `b`: its header, its payload and what follows it.
pub fn decode(b: &[u8]) -> Result<(Header<'_>, &[u8], &[u8]), WireError> {
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
    let plen = u32::from_le_bytes(r.array()?) as usize;
    let payload = r.take(plen)?;
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
        payload,
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
        let (d, p, rest) = decode(&m).expect("decodes");
        assert_eq!((d, p, rest), (h.clone(), &b"payload"[..], &b""[..]));
        for cut in 0..m.len() {
            assert!(decode(&m[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn a_sample_holds_messages_one_after_the_other() {
        let at = |seq: u64, descriptor: &'static [u8]| Header {
            kind: KIND_RECORD,
            pass: 1,
            n: seq,
            seq,
            ring_lost: 0,
            t_nanos: seq * 10,
            pid: 42,
            level: 2,
            schema_version: 1,
            fingerprint: 0xfeed,
            producer: "demo",
            emitter: "",
            descriptor,
        };
        let payloads: [&[u8]; 3] = [b"first", b"", b"third payload"];
        let mut sample = Vec::new();
        for (i, p) in payloads.iter().enumerate() {
            at(i as u64, if i == 0 { b"desc" } else { b"" }).encode_into(&mut sample, p);
        }
        let got: Vec<(Header<'_>, &[u8])> = messages(&sample)
            .collect::<Result<_, _>>()
            .expect("every message reads");
        let want: Vec<(Header<'_>, &[u8])> = payloads
            .iter()
            .enumerate()
            .map(|(i, p)| (at(i as u64, if i == 0 { b"desc" } else { b"" }), *p))
            .collect();
        assert_eq!(got, want);
        // A sample cut inside its last message reads its whole ones, then says so.
        let cut: Vec<_> = messages(&sample[..sample.len() - 3]).collect();
        assert_eq!(cut.len(), 3);
        assert!(cut[..2].iter().all(Result::is_ok) && cut[2].is_err());
        assert_eq!(messages(&[]).count(), 0);
    }
}
