//! Decoding what an application's libibverbs writes or ioctls to a
//! context's `cmd_fd`, with the kernel's checks and errnos for the two
//! commands emulated here (`ib_uverbs_write` / `verify_hdr` /
//! `uverbs_request`, and `ib_uverbs_ioctl`). Everything else is
//! [`Write::Other`] / [`Ioctl::Other`]: it goes on to the file (/dev/null)
//! as before. Pure: no state, no pointers followed.

use super::abi;
use crate::abi::{u16_at, u32_at, u64_at};
use crate::command::Errno;

/// One `write(cmd_fd, buf, len)`, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Write {
    /// `ibv_create_comp_channel`: the new fd goes to `response`, which
    /// takes `out_len` bytes (the fd, then zeros, as the kernel fills).
    CreateCompChannel { response: u64, out_len: usize },
    /// Any other command: not emulated.
    Other,
}

/// Decodes a write of `len` bytes of which `bytes` (a prefix, shorter
/// when the rest could not be read) are the readable part.
pub fn decode_write(bytes: &[u8], len: usize) -> Result<Write, Errno> {
    if len < abi::CMD_HDR_LEN {
        return Err(libc::EINVAL);
    }
    if bytes.len() < abi::CMD_HDR_LEN {
        return Err(libc::EFAULT);
    }
    if u32_at(bytes, 0) != abi::CMD_CREATE_COMP_CHANNEL {
        return Ok(Write::Other);
    }
    let in_len = usize::from(u16_at(bytes, 4)) * 4;
    let out_len = usize::from(u16_at(bytes, 6)) * 4;
    if in_len != len {
        return Err(libc::EINVAL);
    }
    if len < abi::CMD_HDR_LEN + abi::CREATE_COMP_CHANNEL_LEN
        || out_len < abi::CREATE_COMP_CHANNEL_RESP_LEN
    {
        return Err(libc::ENOSPC);
    }
    let core = abi::CMD_HDR_LEN + abi::CREATE_COMP_CHANNEL_LEN;
    if bytes.len() < core {
        return Err(libc::EFAULT);
    }
    // Input past the command must be zero (an unreadable tail counts as
    // not zero, as ib_is_buffer_cleared says).
    if bytes.len() < len || bytes[core..len].iter().any(|&b| b != 0) {
        return Err(libc::EOPNOTSUPP);
    }
    Ok(Write::CreateCompChannel {
        response: u64_at(bytes, abi::CMD_HDR_LEN),
        out_len,
    })
}

/// The response of CREATE_COMP_CHANNEL: `fd`, then zeros up to `out_len`.
pub fn comp_channel_resp(fd: i32, out_len: usize) -> Vec<u8> {
    let mut r = vec![0u8; out_len.max(abi::CREATE_COMP_CHANNEL_RESP_LEN)];
    r[..4].copy_from_slice(&fd.to_ne_bytes());
    r
}

/// The fixed part of an ioctl command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoctlHeader {
    /// Header and attributes, in bytes.
    pub length: usize,
    pub object_id: u16,
    pub method_id: u16,
    pub num_attrs: u16,
}

/// The header checks of `ib_uverbs_ioctl`; `bytes` is what could be read.
pub fn ioctl_header(bytes: &[u8]) -> Result<IoctlHeader, Errno> {
    if bytes.len() < abi::IOCTL_HDR_LEN {
        return Err(libc::EFAULT);
    }
    let h = IoctlHeader {
        length: usize::from(u16_at(bytes, 0)),
        object_id: u16_at(bytes, 2),
        method_id: u16_at(bytes, 4),
        num_attrs: u16_at(bytes, 6),
    };
    if h.length > abi::IOCTL_MAX_LEN
        || h.length != abi::IOCTL_HDR_LEN + usize::from(h.num_attrs) * abi::IOCTL_ATTR_LEN
    {
        return Err(libc::EINVAL);
    }
    if u64_at(bytes, 8) != 0 || u32_at(bytes, 20) != 0 {
        return Err(libc::EPROTONOSUPPORT);
    }
    Ok(h)
}

/// One `ioctl(cmd_fd, RDMA_VERBS_IOCTL, hdr)`, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ioctl {
    /// `ibv_cmd_alloc_async_fd`: the new fd goes to the 8 bytes at offset
    /// `data_at` of the command.
    AsyncEventAlloc {
        data_at: usize,
    },
    Other,
}

/// Decodes an ioctl command: `bytes` holds the header and as many
/// attribute bytes as could be read.
pub fn decode_ioctl(bytes: &[u8]) -> Result<Ioctl, Errno> {
    let h = ioctl_header(bytes)?;
    if (h.object_id, h.method_id) != (abi::OBJECT_ASYNC_EVENT, abi::METHOD_ASYNC_EVENT_ALLOC) {
        return Ok(Ioctl::Other);
    }
    if bytes.len() < h.length {
        return Err(libc::EFAULT);
    }
    let attrs = &bytes[abi::IOCTL_HDR_LEN..h.length];
    let at = attrs
        .chunks_exact(abi::IOCTL_ATTR_LEN)
        .position(|a| u16_at(a, 0) == abi::ATTR_ASYNC_EVENT_ALLOC_FD_HANDLE)
        // The FD attribute is mandatory.
        .ok_or(libc::EINVAL)?;
    Ok(Ioctl::AsyncEventAlloc {
        data_at: abi::IOCTL_HDR_LEN + at * abi::IOCTL_ATTR_LEN + abi::ATTR_DATA_AT,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CREATE_COMP_CHANNEL as libibverbs 44 writes it.
    fn create(response: u64) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&abi::CMD_CREATE_COMP_CHANNEL.to_ne_bytes());
        v.extend_from_slice(&4u16.to_ne_bytes());
        v.extend_from_slice(&1u16.to_ne_bytes());
        v.extend_from_slice(&response.to_ne_bytes());
        v
    }

    #[test]
    fn create_comp_channel_and_its_errnos() {
        let b = create(0x1000);
        assert_eq!(
            decode_write(&b, 16),
            Ok(Write::CreateCompChannel {
                response: 0x1000,
                out_len: 4
            })
        );
        assert_eq!(decode_write(&b, 7), Err(libc::EINVAL));
        assert_eq!(decode_write(&b[..4], 16), Err(libc::EFAULT));
        assert_eq!(decode_write(&b, 20), Err(libc::EINVAL), "in_words says 16");
        assert_eq!(decode_write(&b[..12], 16), Err(libc::EFAULT));
        let mut short = b.clone();
        short[4] = 2;
        assert_eq!(decode_write(&short[..8], 8), Err(libc::ENOSPC));
        let mut no_out = b.clone();
        no_out[6] = 0;
        assert_eq!(decode_write(&no_out, 16), Err(libc::ENOSPC));
        let mut longer = b.clone();
        longer[4] = 5;
        longer.extend_from_slice(&[0; 4]);
        assert!(matches!(
            decode_write(&longer, 20),
            Ok(Write::CreateCompChannel { .. })
        ));
        longer[18] = 1;
        assert_eq!(decode_write(&longer, 20), Err(libc::EOPNOTSUPP));
        assert_eq!(decode_write(&longer[..16], 20), Err(libc::EOPNOTSUPP));
        let mut other = b.clone();
        other[0] = 3;
        assert_eq!(decode_write(&other, 16), Ok(Write::Other));
        assert_eq!(decode_write(&other, 3), Err(libc::EINVAL));
    }

    #[test]
    fn the_response_is_the_fd_then_zeros() {
        assert_eq!(comp_channel_resp(7, 4), 7i32.to_ne_bytes().to_vec());
        let r = comp_channel_resp(9, 8);
        assert_eq!(&r[..4], &9i32.to_ne_bytes());
        assert_eq!(&r[4..], &[0; 4]);
    }

    /// An ioctl command with the given attribute ids.
    fn ioctl(object: u16, method: u16, attrs: &[u16]) -> Vec<u8> {
        let len = abi::IOCTL_HDR_LEN + attrs.len() * abi::IOCTL_ATTR_LEN;
        let mut v = vec![0u8; len];
        v[0..2].copy_from_slice(&(len as u16).to_ne_bytes());
        v[2..4].copy_from_slice(&object.to_ne_bytes());
        v[4..6].copy_from_slice(&method.to_ne_bytes());
        v[6..8].copy_from_slice(&(attrs.len() as u16).to_ne_bytes());
        for (i, a) in attrs.iter().enumerate() {
            let at = abi::IOCTL_HDR_LEN + i * abi::IOCTL_ATTR_LEN;
            v[at..at + 2].copy_from_slice(&a.to_ne_bytes());
        }
        v
    }

    #[test]
    fn async_event_alloc_and_its_errnos() {
        let b = ioctl(abi::OBJECT_ASYNC_EVENT, 0, &[0]);
        assert_eq!(
            decode_ioctl(&b),
            Ok(Ioctl::AsyncEventAlloc { data_at: 24 + 8 })
        );
        let two = ioctl(abi::OBJECT_ASYNC_EVENT, 0, &[5, 0]);
        assert_eq!(
            decode_ioctl(&two),
            Ok(Ioctl::AsyncEventAlloc { data_at: 40 + 8 })
        );
        assert_eq!(decode_ioctl(&b[..30]), Err(libc::EFAULT));
        assert_eq!(decode_ioctl(&b[..20]), Err(libc::EFAULT));
        let none = ioctl(abi::OBJECT_ASYNC_EVENT, 0, &[3]);
        assert_eq!(decode_ioctl(&none), Err(libc::EINVAL));
        let mut bad_len = b.clone();
        bad_len[0] = 25;
        assert_eq!(decode_ioctl(&bad_len), Err(libc::EINVAL));
        let mut reserved = b.clone();
        reserved[20] = 1;
        assert_eq!(decode_ioctl(&reserved), Err(libc::EPROTONOSUPPORT));
        // libibverbs' probe (DEVICE / INVOKE_WRITE) is not emulated.
        assert_eq!(decode_ioctl(&ioctl(0, 0, &[0])), Ok(Ioctl::Other));
    }
}
