//! The `rxu` tool's pieces: device management ([`cli`]) and the pcap
//! decoder ([`decode`]); `bin/rxu.rs` parses arguments and prints.

pub mod cli;
pub mod decode;
