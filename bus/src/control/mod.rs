//! The control plane's wire: messages between the broker, producers, consumers and the CLI,
//! over a Unix `SOCK_SEQPACKET` socket (one message per packet, file descriptors passed with
//! `SCM_RIGHTS`), encoded with postcard.
//!
//! Payload bytes never travel here: producers pass the broker their lane fds, the broker
//! passes them on to consumers, and consumers map the lanes themselves.

mod msg;
mod socket;
mod status;

pub use msg::{
    BusState, ConsumerInfo, ConsumerState, FromBroker, LaneCursor, LaneInfo, PROTOCOL_VERSION,
    ProducerInfo, ProducerState, RefusedLane, SchemaState, ToBroker,
};
pub use socket::{Conn, ControlError, Listener};
pub use status::{AfterEnd, ConsumerStatus, End, Ending, ProducerStatus, Run};
