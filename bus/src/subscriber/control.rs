//! The subscriber's side of the control socket: joining the broker (and rejoining a
//! restarted one), serving what it sends, and reporting counters and cursors for `snapbus ls`.

use std::time::Instant;

use super::{RECONNECT_EVERY, REPLY_TIMEOUT, STATS_EVERY, SubscribeError, Subscriber};
use crate::control::{
    Conn, ConsumerCounters, ConsumerInfo, ControlError, FromBroker, LaneCursor, PROTOCOL_VERSION,
    ToBroker,
};
use crate::doorbell::DoorbellPage;
use crate::lane::StartAt;
use crate::status::StatusBoard;

impl Subscriber {
    /// Hello, welcome, then every existing lane up to the broker's `Ok`.
    pub(super) fn join(&mut self, first: bool) -> Result<(), SubscribeError> {
        let sock = self.dir.socket_path();
        let mut conn =
            Conn::connect(&sock).map_err(|_| SubscribeError::NoBus(self.dir.name().to_string()))?;
        let hello = ToBroker::HelloConsumer {
            version: PROTOCOL_VERSION,
            info: ConsumerInfo {
                pid: std::process::id(),
                kind: self.opts.kind.clone(),
                subscriptions: self
                    .opts
                    .globs
                    .iter()
                    .map(|g| g.as_str().to_owned())
                    .collect(),
            },
            previous_id: self.consumer_id,
            counters: {
                let s = self.stats();
                ConsumerCounters {
                    delivered: s.delivered,
                    lost: s.lost,
                    damaged: s.damaged,
                    garbage: s.garbage,
                    unknown_keys: s.unknown_keys,
                }
            },
            lanes: self.cursors(),
        };
        let (reply, mut fds): (FromBroker, _) = conn.request(&hello, REPLY_TIMEOUT)?;
        match reply {
            FromBroker::WelcomeConsumer {
                bell, consumer_id, ..
            } => {
                self.bell = bell;
                self.consumer_id = Some(consumer_id);
                self.page = fds.pop().and_then(|fd| DoorbellPage::open(fd).ok());
            }
            FromBroker::Error { message } => return Err(SubscribeError::Refused(message)),
            other => return Err(SubscribeError::Protocol(format!("{other:?}"))),
        }
        let start = self.opts.start;
        loop {
            let Some((msg, fds)) = conn.recv::<FromBroker>(Some(REPLY_TIMEOUT))? else {
                return Err(ControlError::Timeout(REPLY_TIMEOUT).into());
            };
            match msg {
                FromBroker::Ok => break,
                FromBroker::Lane(info) => {
                    // On a rejoin, lanes we already read keep their cursor; new ones start at
                    // their oldest record (nothing was read from them yet).
                    self.add_lane(
                        info,
                        fds,
                        if first { start } else { StartAt::Oldest },
                        first,
                    );
                }
                FromBroker::LaneDead { producer_id } => self.lane_died(producer_id),
                _ => {}
            }
        }
        // Every lane is mapped with its start position fixed: tell the broker (an `attach`
        // waiting for this consumer returns now).
        conn.send(&ToBroker::Subscribed, &[])?;
        self.conn = Some(conn);
        Ok(())
    }

    /// Handles what the broker sent; rejoins a broker after losing one; reports counters.
    pub(super) fn pump_control(&mut self) {
        self.since_pump = 0;
        self.last_pump = Instant::now();
        if let Some(conn) = self.conn.as_mut() {
            let mut msgs = Vec::new();
            let mut lost_conn = false;
            loop {
                match conn.try_recv::<FromBroker>() {
                    Ok(Some(m)) => msgs.push(m),
                    Ok(None) => break,
                    Err(_) => {
                        lost_conn = true;
                        break;
                    }
                }
            }
            for (msg, fds) in msgs {
                match msg {
                    FromBroker::Lane(info) => self.add_lane(info, fds, StartAt::Oldest, false),
                    FromBroker::LaneDead { producer_id } => self.lane_died(producer_id),
                    _ => {}
                }
            }
            if lost_conn {
                self.conn = None;
                self.last_reconnect = Instant::now();
            }
        } else if self.last_reconnect.elapsed() >= RECONNECT_EVERY {
            self.last_reconnect = Instant::now();
            let _ = self.join(false);
        }
        if self.last_report.elapsed() >= STATS_EVERY {
            self.last_report = Instant::now();
            self.report();
        }
    }

    /// Where it is in each lane it still reads.
    fn cursors(&self) -> Vec<LaneCursor> {
        self.lanes
            .iter()
            .filter(|l| !l.ended)
            .map(|l| LaneCursor {
                lane_id: l.info.lane_id,
                position: l.reader.position(),
                expected_seq: l.reader.expected_seq(),
            })
            .collect()
    }

    /// Sends the counters and cursors to the broker (for `snapbus ls`, which works out lag
    /// and overwrites past the cursors itself, so they stay true while this consumer does
    /// not report).
    pub(super) fn report(&self) {
        if let Some(conn) = &self.conn {
            let stats = self.stats();
            let lanes = self.cursors();
            let _ = conn.send(
                &ToBroker::ConsumerStats {
                    delivered: stats.delivered,
                    lost: stats.lost,
                    damaged: stats.damaged,
                    garbage: stats.garbage,
                    unknown_keys: stats.unknown_keys,
                    lanes,
                    refused: self.refused.clone(),
                    board: self
                        .board
                        .as_ref()
                        .map(StatusBoard::entries)
                        .unwrap_or_default(),
                },
                &[],
            );
        }
    }
}
