//! Decoding one ucma command (the bytes of one `write` on the device) with
//! the kernel's checks and errnos (`ucma_write` and the handlers' own
//! checks before they look an id up). Pure: no state, no pointers followed.

use std::net::SocketAddr;

use rxu_abi::proto::cm::{ConnParam, Ece};

use crate::abi::{self, cmd, u16_at, u32_at, u64_at};

/// A decoding failure: the positive errno the write fails with.
pub type Errno = i32;

/// The 8-byte header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub cmd: u32,
    pub in_len: u16,
    pub out_len: u16,
}

/// The header checks of `ucma_write`: `len` is the write's length.
pub fn header(bytes: &[u8], len: usize) -> Result<Header, Errno> {
    if len < abi::HDR_LEN {
        return Err(libc::EINVAL);
    }
    if bytes.len() < abi::HDR_LEN {
        return Err(libc::EFAULT);
    }
    let h = Header {
        cmd: u32_at(bytes, 0),
        in_len: u16_at(bytes, 4),
        out_len: u16_at(bytes, 6),
    };
    if h.cmd >= cmd::COUNT {
        return Err(libc::EINVAL);
    }
    if usize::from(h.in_len) + abi::HDR_LEN > len {
        return Err(libc::EINVAL);
    }
    // GET_OPTION has no handler; neither have the AF_IB commands here, so
    // librdmacm's AF_IB probe (a BIND of a sockaddr_ib) fails and it uses
    // only the IP commands.
    if abi::body_len(h.cmd).is_none() {
        return Err(libc::ENOSYS);
    }
    Ok(h)
}

/// How many bytes (header included) a command with this header is read
/// from: the kernel copies `sizeof cmd` whatever `in` says.
pub fn wire_len(h: &Header) -> usize {
    abi::HDR_LEN + abi::body_len(h.cmd).unwrap_or(0)
}

/// A decoded command. `response` fields are user pointers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    CreateId {
        uid: u64,
        response: u64,
        ps: u16,
        /// The `ibv_qp_type` the port space implies (or RDMA_PS_IB's own).
        qp_type: u8,
    },
    DestroyId {
        response: u64,
        id: u32,
    },
    BindIp {
        addr: SocketAddr,
        id: u32,
    },
    ResolveIp {
        src: Option<SocketAddr>,
        dst: SocketAddr,
        id: u32,
        timeout_ms: u32,
    },
    ResolveRoute {
        id: u32,
        timeout_ms: u32,
    },
    QueryRoute {
        response: u64,
        id: u32,
        out_len: usize,
    },
    Connect {
        param: ConnParam,
        id: u32,
        ece: Ece,
    },
    Listen {
        id: u32,
        /// Clamped as the kernel does (<= 0 or too large: the maximum).
        backlog: i32,
    },
    /// `param: None`: the active side's "send RTU" (`valid == 0`).
    Accept {
        uid: u64,
        param: Option<ConnParam>,
        id: u32,
        ece: Ece,
    },
    Reject {
        id: u32,
        private_data: Vec<u8>,
        /// 28 (consumer defined) or 35 (ECE not supported).
        reason: u8,
    },
    Disconnect {
        id: u32,
    },
    InitQpAttr {
        response: u64,
        id: u32,
        qp_state: u8,
    },
    GetEvent {
        response: u64,
        out_len: usize,
    },
    SetOption {
        optval: u64,
        id: u32,
        level: u32,
        optname: u32,
        optlen: u32,
    },
    Notify {
        id: u32,
        event: u32,
    },
    JoinIpMcast {
        response: u64,
        uid: u64,
        addr: SocketAddr,
        id: u32,
    },
    LeaveMcast {
        response: u64,
        id: u32,
    },
    MigrateId {
        response: u64,
        id: u32,
        /// The id's current channel fd.
        fd: i32,
    },
}

/// `ucma_get_qp_type`: the QP type of a port space.
fn qp_type_of(ps: u16, requested: u8) -> Result<u8, Errno> {
    use rxu_abi::proto::cm::port_space as ps_;
    match ps {
        ps_::TCP => Ok(2),
        ps_::UDP | ps_::IPOIB => Ok(4),
        ps_::IB => Ok(requested),
        _ => Err(libc::EINVAL),
    }
}

/// An IP address slot that must hold an address (`rdma_addr_size_in6`).
fn addr_in6(b: &[u8]) -> Result<SocketAddr, Errno> {
    match abi::parse_sockaddr(b) {
        Some(Some(a)) => Ok(a),
        _ => Err(libc::EINVAL),
    }
}

/// `struct rdma_ucm_conn_param` into the contract's ConnParam (the
/// kernel's `ucma_copy_conn_param`: 24-bit QPN, Q_Key only for AF_IB).
fn conn_param(b: &[u8]) -> ConnParam {
    let len = usize::from(b[264]);
    ConnParam {
        private_data: b[8..8 + len].to_vec(),
        srq: b[265],
        responder_resources: b[266],
        initiator_depth: b[267],
        flow_control: b[268],
        retry_count: b[269],
        rnr_retry_count: b[270],
        qp_num: u32_at(b, 0) & 0xff_ffff,
        qkey: 0,
    }
}

fn conn_param_valid(b: &[u8]) -> bool {
    b[271] != 0
}

fn ece_at(b: &[u8], at: usize) -> Ece {
    Ece {
        vendor_id: u32_at(b, at),
        attr_mod: u32_at(b, at + 4),
    }
}

/// `KMALLOC_MAX_SIZE` on x86_64 (the largest optlen SET_OPTION copies).
const MAX_OPTLEN: u32 = 4 << 20;

/// Decodes a command from `bytes` (what could be read from the write's
/// buffer, up to [`wire_len`]) given the write's length `len`. Bytes the
/// kernel would copy but that are missing here are EFAULT.
pub fn decode(bytes: &[u8], len: usize) -> Result<Command, Errno> {
    let h = header(bytes, len)?;
    let need = wire_len(&h);
    let out = usize::from(h.out_len);
    let in_len = usize::from(h.in_len);
    // Size checks on `out` come first, as in the handlers.
    let min_out = match h.cmd {
        cmd::CREATE_ID | cmd::DESTROY_ID | cmd::JOIN_IP_MCAST | cmd::LEAVE_MCAST => 4,
        cmd::QUERY_ROUTE => abi::QUERY_ROUTE_RESP_MIN,
        cmd::INIT_QP_ATTR => abi::QP_ATTR_LEN,
        cmd::GET_EVENT => abi::EVENT_RESP_MIN,
        _ => 0,
    };
    if out < min_out {
        return Err(libc::ENOSPC);
    }
    // CONNECT and ACCEPT copy min(in, sizeof cmd) and need `in` to reach
    // the reserved field; ECE only when `in` covers it.
    let (need, ece_ok) = match h.cmd {
        cmd::CONNECT | cmd::ACCEPT => {
            let floor = if h.cmd == cmd::CONNECT { 280 } else { 288 };
            if in_len < floor {
                return Err(libc::EINVAL);
            }
            let copy = in_len.min(need - abi::HDR_LEN);
            (abi::HDR_LEN + copy, copy == need - abi::HDR_LEN)
        }
        _ => (need, true),
    };
    if bytes.len() < need {
        return Err(libc::EFAULT);
    }
    let mut full = [0u8; abi::HDR_LEN + 296];
    full[..need].copy_from_slice(&bytes[..need]);
    let b = &full[abi::HDR_LEN..];
    Ok(match h.cmd {
        cmd::CREATE_ID => {
            let ps = u16_at(b, 16);
            Command::CreateId {
                uid: u64_at(b, 0),
                response: u64_at(b, 8),
                ps,
                qp_type: qp_type_of(ps, b[18])?,
            }
        }
        cmd::DESTROY_ID => Command::DestroyId {
            response: u64_at(b, 0),
            id: u32_at(b, 8),
        },
        cmd::BIND_IP => Command::BindIp {
            addr: addr_in6(&b[8..36])?,
            id: u32_at(b, 36),
        },
        cmd::RESOLVE_IP => {
            let src = abi::parse_sockaddr(&b[0..28]).ok_or(libc::EINVAL)?;
            Command::ResolveIp {
                src,
                dst: addr_in6(&b[28..56])?,
                id: u32_at(b, 56),
                timeout_ms: u32_at(b, 60),
            }
        }
        cmd::RESOLVE_ROUTE => Command::ResolveRoute {
            id: u32_at(b, 0),
            timeout_ms: u32_at(b, 4),
        },
        cmd::QUERY_ROUTE => Command::QueryRoute {
            response: u64_at(b, 0),
            id: u32_at(b, 8),
            out_len: out,
        },
        cmd::CONNECT => {
            if !conn_param_valid(b) {
                return Err(libc::EINVAL);
            }
            Command::Connect {
                param: conn_param(b),
                id: u32_at(b, 272),
                ece: if ece_ok {
                    ece_at(b, 280)
                } else {
                    Ece::default()
                },
            }
        }
        cmd::LISTEN => {
            let backlog = u32_at(b, 4) as i32;
            Command::Listen {
                id: u32_at(b, 0),
                backlog: if backlog <= 0 || backlog > abi::MAX_BACKLOG {
                    abi::MAX_BACKLOG
                } else {
                    backlog
                },
            }
        }
        cmd::ACCEPT => {
            let p = &b[8..8 + abi::CONN_PARAM_LEN];
            Command::Accept {
                uid: u64_at(b, 0),
                param: conn_param_valid(p).then(|| conn_param(p)),
                id: u32_at(b, 280),
                ece: if ece_ok {
                    ece_at(b, 288)
                } else {
                    Ece::default()
                },
            }
        }
        cmd::REJECT => {
            let reason = match b[5] {
                0 => abi::REJ_CONSUMER_DEFINED,
                r @ (abi::REJ_CONSUMER_DEFINED | abi::REJ_VENDOR_OPTION_NOT_SUPPORTED) => r,
                _ => return Err(libc::EINVAL),
            };
            let len = usize::from(b[4]);
            Command::Reject {
                id: u32_at(b, 0),
                private_data: b[8..8 + len].to_vec(),
                reason,
            }
        }
        cmd::DISCONNECT => Command::Disconnect { id: u32_at(b, 0) },
        cmd::INIT_QP_ATTR => {
            let state = u32_at(b, 12);
            if state > abi::IB_QPS_ERR {
                return Err(libc::EINVAL);
            }
            Command::InitQpAttr {
                response: u64_at(b, 0),
                id: u32_at(b, 8),
                qp_state: state as u8,
            }
        }
        cmd::GET_EVENT => Command::GetEvent {
            response: u64_at(b, 0),
            out_len: out,
        },
        cmd::SET_OPTION => {
            let optlen = u32_at(b, 20);
            if optlen > MAX_OPTLEN {
                return Err(libc::EINVAL);
            }
            Command::SetOption {
                optval: u64_at(b, 0),
                id: u32_at(b, 8),
                level: u32_at(b, 12),
                optname: u32_at(b, 16),
                optlen,
            }
        }
        cmd::NOTIFY => Command::Notify {
            id: u32_at(b, 0),
            event: u32_at(b, 4),
        },
        cmd::JOIN_IP_MCAST => Command::JoinIpMcast {
            response: u64_at(b, 0),
            uid: u64_at(b, 8),
            addr: addr_in6(&b[16..44])?,
            id: u32_at(b, 44),
        },
        cmd::LEAVE_MCAST => Command::LeaveMcast {
            response: u64_at(b, 0),
            id: u32_at(b, 8),
        },
        cmd::MIGRATE_ID => Command::MigrateId {
            response: u64_at(b, 0),
            id: u32_at(b, 8),
            fd: u32_at(b, 12) as i32,
        },
        // header() let only commands with a body length through.
        _ => return Err(libc::ENOSYS),
    })
}

#[cfg(test)]
mod tests;
