//! rxu soft NIC: the device applications open.
//!
//! For now it holds the `rxu` command-line tool's pieces; the daemon, the
//! verbs object model and the shared-memory data path come with the soft
//! NIC issue.

pub mod cli;
pub mod client;
pub mod daemon;
pub mod decode;
pub mod devnode;
pub mod mem;
pub mod paths;
pub mod proto;
pub mod ring;
pub mod verbs;
