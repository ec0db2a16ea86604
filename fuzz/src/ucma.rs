//! The ucma_command target: bytes as one `write` on the emulated rdma_cm
//! device, decoded with the kernel's checks. Never a panic; a command
//! that decodes was read from bytes the write covered or the kernel would
//! have copied (`sizeof cmd`), and its header names a handled command.

use rxu_ucma::abi;
use rxu_ucma::command::{self, Command};

/// What a run decoded.
#[derive(Debug, Default)]
pub struct Outcome {
    pub decoded: u64,
    pub refused: u64,
}

/// `data[0]` shortens or lengthens the write's length relative to the
/// bytes given (as a buffer shorter than `len` or a `len` past `in`).
pub fn run(data: &[u8]) -> Outcome {
    let mut o = Outcome::default();
    let (delta, bytes) = match data.split_first() {
        Some((d, rest)) => (i64::from(*d as i8), rest),
        None => (0, data),
    };
    let len = (bytes.len() as i64 + delta).max(0) as usize;
    for len in [bytes.len(), len] {
        match command::decode(bytes, len) {
            Ok(c) => {
                o.decoded += 1;
                let h = command::header(bytes, len).expect("a decoded command has a valid header");
                assert!(abi::body_len(h.cmd).is_some());
                assert!(
                    bytes.len()
                        >= abi::HDR_LEN
                            + usize::from(h.in_len).min(command::wire_len(&h) - abi::HDR_LEN)
                );
                if let Command::Reject { private_data, .. } = &c {
                    assert!(private_data.len() <= abi::MAX_PRIVATE_DATA);
                }
            }
            Err(e) => {
                assert!(e > 0, "errnos are positive");
                o.refused += 1;
            }
        }
    }
    o
}
