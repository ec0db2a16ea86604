//! rxu's shared contract: what the daemon `rxud`, the client library (and
//! through it the C provider) and the `rxu` tool must agree on. The control
//! protocol and fd passing ([`proto`]), the shared-memory rings ([`ring`]),
//! where a device's files live ([`paths`]), the device's clocks
//! ([`clock`]). The verbs vocabulary both sides
//! use is the transport crate's (`transport::verbs`).

pub mod clock;
pub mod paths;
pub mod proto;
pub mod ring;
