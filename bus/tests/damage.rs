//! Garbage written over a closed producer's ring (as a buggy neighbour or a bad bit would):
//! every record whose header it hit is counted exactly once, as damage (not as an overwrite),
//! by the lane's reader, by the subscriber's books and by the `Lagged` events, and the rest is
//! delivered: delivered + damaged + lost == emitted. A real broker (threads of this process),
//! a producer writing into shared memory, a real subscriber.

use std::time::{Duration, Instant};

use snapbus_bus::subscriber::Event;

use crate::common::{record_positions, store_frame_word};
use crate::in_place::{Bus, emit_bytes, payload};

const WATCHDOG: Duration = Duration::from_secs(60);

/// Deterministic garbage (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Where in a frame header a spot of garbage lands, and how many words it covers: the commit
/// word, the length word, both, the sequence number, or the first three words.
const SPOTS: [(usize, usize); 5] = [(0, 1), (1, 1), (0, 2), (3, 1), (0, 3)];

#[test]
fn every_record_under_garbage_is_counted_once_as_damage() {
    const N: u64 = 20_000;
    let bus = Bus::start("damage-closed");
    let (p, meta) = bus.publisher(4 << 20);
    for i in 0..N {
        emit_bytes(&p, meta, &payload(i, 64)).expect("emit");
    }
    p.close();
    let lane = p.lane().lane();
    let positions = record_positions(lane);
    assert_eq!(positions.len() as u64, N, "the ring holds every record");
    // 50 spots: spread over the ring, two pairs of neighbours, and the last two records.
    let mut hit: Vec<u64> = (0..46).map(|i| 17 + i * 431).collect();
    hit.extend([9_000, 9_001, N - 2, N - 1]);
    hit.sort_unstable();
    hit.dedup();
    assert_eq!(hit.len(), 50);
    let mut rng = Rng(0x005e_ed0f_da7a);
    for (n, &k) in hit.iter().enumerate() {
        let (first, words) = SPOTS[n % SPOTS.len()];
        for w in first..first + words {
            store_frame_word(lane, positions[k as usize], w, rng.next());
        }
    }

    let mut sub = bus.subscribe();
    let (mut delivered, mut lost, mut damaged) = (Vec::new(), 0, 0);
    let t0 = Instant::now();
    let mut longest_wait = Duration::ZERO;
    let mut last = Instant::now();
    loop {
        assert!(
            t0.elapsed() < WATCHDOG,
            "no end after {} records: {:?}",
            delivered.len(),
            sub.stats()
        );
        match sub.next(Duration::from_millis(100)).expect("next") {
            Some(Event::Record(r)) => delivered.push(r.meta.seq),
            Some(Event::Lagged {
                lost: l,
                damaged: d,
                ..
            }) => {
                lost += l;
                damaged += d;
            }
            Some(Event::Ended(_)) => break,
            _ => {}
        }
        longest_wait = longest_wait.max(last.elapsed());
        last = Instant::now();
    }
    let expected: Vec<u64> = (0..N).filter(|s| !hit.contains(s)).collect();
    assert_eq!(delivered.len(), expected.len(), "{:?}", sub.stats());
    assert_eq!(delivered, expected);
    assert_eq!((lost, damaged), (0, 50), "the events: {:?}", sub.stats());
    let s = sub.stats();
    assert_eq!(
        (s.delivered, s.lost, s.damaged),
        (N - 50, 0, 50),
        "the books: {s:?}"
    );
    assert_eq!(s.delivered + s.lost + s.damaged, N);
    // A closed lane has no claim in flight: garbage in it is skipped at once, not after a
    // stall (the lane was written moments ago: its timestamps prove nothing).
    assert!(
        longest_wait < Duration::from_millis(500),
        "a spot of garbage held the reader {longest_wait:?}"
    );
}

/// Garbage over a record near the live tail of a lane that has not wrapped yet: nothing was
/// ever written there before that record's claim, so a word that is neither zero (a claim
/// whose header is not written yet) nor the frame's tag is garbage, skipped at once, not after
/// a stall; counted as damage.
#[test]
fn garbage_near_the_live_tail_is_skipped_at_once_before_the_ring_wraps() {
    const N: u64 = 1_000;
    let bus = Bus::start("damage-live");
    let (p, meta) = bus.publisher(4 << 20);
    for i in 0..N {
        emit_bytes(&p, meta, &payload(i, 64)).expect("emit");
    }
    let lane = p.lane().lane();
    let positions = record_positions(lane);
    for k in [990u64, 995, 998] {
        store_frame_word(lane, positions[k as usize], 0, 0xbad0_0000_0000_0bad ^ k);
    }
    let mut sub = bus.subscribe();
    let t0 = Instant::now();
    let (mut delivered, mut damaged) = (0u64, 0u64);
    while delivered + damaged < N {
        assert!(t0.elapsed() < WATCHDOG, "stuck: {:?}", sub.stats());
        match sub.next(Duration::from_millis(100)).expect("next") {
            Some(Event::Record(_)) => delivered += 1,
            Some(Event::Lagged {
                lost, damaged: d, ..
            }) => {
                assert_eq!(lost, 0, "{:?}", sub.stats());
                damaged += d;
            }
            _ => {}
        }
    }
    let took = t0.elapsed();
    eprintln!("read {N} records with 3 garbage spots near the live tail in {took:?}");
    assert_eq!((delivered, damaged), (N - 3, 3));
    assert!(took < Duration::from_millis(500), "took {took:?}");
    drop(p);
}
