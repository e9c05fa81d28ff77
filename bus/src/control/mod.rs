//! The control plane's wire: messages between the broker, producers, consumers and the CLI,
//! over a Unix `SOCK_SEQPACKET` socket (one message per packet, file descriptors passed with
//! `SCM_RIGHTS`; a message too large for a packet, such as `ls` of a big bus, in a memfd the
//! packet carries), encoded with postcard.
//!
//! Payload bytes never travel here: producers pass the broker their lane fds, the broker
//! passes them on to consumers, and consumers map the lanes themselves.
//!
//! Private to the crate: the publisher, the subscriber, the broker and the
//! [client](crate::client) speak it. The data the messages carry ([`state`], [`status`]) is
//! public through [`crate::client`].

mod msg;
mod socket;
pub(crate) mod state;
pub(crate) mod status;
#[cfg(test)]
mod tests;

pub(crate) use msg::{
    ConsumerCounters, FromBroker, LaneCursor, LaneInfo, PROTOCOL_VERSION, ToBroker,
};
pub use socket::ControlError;
pub(crate) use socket::{Conn, Listener};
pub(crate) use state::DETACH_GRACE;
pub use state::{
    AttachRequest, Attached, BusState, Census, ConsumerInfo, ConsumerState, DetachOutcome,
    ProducerInfo, ProducerState, RefusedLane, SchemaState,
};
pub use status::{AfterEnd, ConsumerStatus, End, Ending, ProducerStatus, Run};
