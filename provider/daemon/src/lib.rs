//! rxud, the rxu soft NIC daemon (one per device): the daemon itself
//! ([`daemon`]), the verbs rules it enforces ([`verbs`]), registered client
//! memory ([`mem`]) and the device node libibverbs reads ([`devnode`]).
//! The contract it shares with clients is in `rxu-abi`.

pub mod daemon;
pub mod devnode;
pub mod mem;
pub mod verbs;
