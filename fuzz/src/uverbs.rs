//! The uverbs_command target: bytes as one `write` and as one
//! `RDMA_VERBS_IOCTL` command on an rxu context's cmd_fd, through the
//! preload's decoders (`rxu_ucma::uverbs::command`). Never a panic; a
//! decoded CREATE_COMP_CHANNEL was fully covered by the write and asked
//! for room for its response; a decoded ASYNC_EVENT_ALLOC points inside
//! the command at an FD attribute.

use rxu_ucma::abi::u16_at;
use rxu_ucma::uverbs::abi;
use rxu_ucma::uverbs::command::{self, Ioctl, Write};

/// What a run decoded.
#[derive(Debug, Default)]
pub struct Outcome {
    pub decoded: u64,
    pub passed_on: u64,
    pub refused: u64,
}

/// `data[0]` shortens or lengthens the write's length relative to the
/// bytes given; the same bytes are then an ioctl command.
pub fn run(data: &[u8]) -> Outcome {
    let mut o = Outcome::default();
    let (delta, bytes) = match data.split_first() {
        Some((d, rest)) => (i64::from(*d as i8), rest),
        None => (0, data),
    };
    let len = (bytes.len() as i64 + delta).max(0) as usize;
    for len in [bytes.len(), len] {
        let readable = &bytes[..bytes.len().min(len)];
        match command::decode_write(readable, len) {
            Ok(Write::CreateCompChannel { out_len, .. }) => {
                o.decoded += 1;
                assert_eq!(readable.len(), len, "the whole command was read");
                assert!(len >= abi::CMD_HDR_LEN + abi::CREATE_COMP_CHANNEL_LEN);
                assert!(out_len >= abi::CREATE_COMP_CHANNEL_RESP_LEN);
                assert_eq!(command::comp_channel_resp(3, out_len).len(), out_len);
            }
            Ok(Write::Other) => o.passed_on += 1,
            Err(e) => {
                assert!(e > 0, "errnos are positive");
                o.refused += 1;
            }
        }
    }
    match command::decode_ioctl(bytes) {
        Ok(Ioctl::AsyncEventAlloc { data_at }) => {
            o.decoded += 1;
            let h = command::ioctl_header(bytes).expect("a decoded command has a valid header");
            assert!(data_at + 8 <= h.length && h.length <= bytes.len());
            let attr = data_at - abi::ATTR_DATA_AT;
            assert_eq!((attr - abi::IOCTL_HDR_LEN) % abi::IOCTL_ATTR_LEN, 0);
            assert_eq!(u16_at(bytes, attr), abi::ATTR_ASYNC_EVENT_ALLOC_FD_HANDLE);
        }
        Ok(Ioctl::Other) => o.passed_on += 1,
        Err(e) => {
            assert!(e > 0, "errnos are positive");
            o.refused += 1;
        }
    }
    o
}
