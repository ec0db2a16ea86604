//! Types of the QP state machines' interface: work requests as the
//! transport takes them and the completions it gives back. The verbs
//! vocabulary they use lives in [`crate::verbs`] and is re-exported here.

use std::net::IpAddr;

pub use crate::verbs::{
    access, send_flags, wc_flags, Mtu, NetworkHdr, QpState, QpType, Sge, WcOpcode, WcStatus,
    WrOpcode,
};

/// Where a WQE's data comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Payload {
    /// Gathered from registered memory at transmit time.
    Sges(Vec<Sge>),
    /// Copied at post time (IBV_SEND_INLINE).
    Inline(Vec<u8>),
}

impl Payload {
    /// Total message length in bytes.
    pub fn len(&self) -> u64 {
        match self {
            Payload::Sges(s) => s.iter().map(|s| u64::from(s.length)).sum(),
            Payload::Inline(v) => v.len() as u64,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Operation of a send WQE, numbered as `enum ibv_wr_opcode` where it has
/// a number there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOp {
    Send,
    SendImm {
        imm: u32,
    },
    SendInv {
        rkey: u32,
    },
    Write {
        remote_addr: u64,
        rkey: u32,
    },
    WriteImm {
        remote_addr: u64,
        rkey: u32,
        imm: u32,
    },
    Read {
        remote_addr: u64,
        rkey: u32,
    },
    CmpSwap {
        remote_addr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    },
    FetchAdd {
        remote_addr: u64,
        rkey: u32,
        add: u64,
    },
    /// ATOMIC WRITE: an 8-byte payload stored atomically.
    AtomicWrite {
        remote_addr: u64,
        rkey: u32,
    },
    /// FLUSH with placement type and selectivity level.
    Flush {
        remote_addr: u64,
        rkey: u32,
        len: u32,
        plt: u8,
        sel: u8,
    },
    /// LOCAL_INV: a local operation, no packet.
    LocalInv {
        rkey: u32,
    },
    /// BIND_MW: a local operation, no packet.
    BindMw(super::window::MwBind),
}

impl SendOp {
    /// Its `ibv_wr_opcode`: the key into the WR opcode table.
    pub const fn wr_opcode(&self) -> WrOpcode {
        match self {
            SendOp::Send => WrOpcode::SEND,
            SendOp::SendImm { .. } => WrOpcode::SEND_WITH_IMM,
            SendOp::SendInv { .. } => WrOpcode::SEND_WITH_INV,
            SendOp::Write { .. } => WrOpcode::RDMA_WRITE,
            SendOp::WriteImm { .. } => WrOpcode::RDMA_WRITE_WITH_IMM,
            SendOp::Read { .. } => WrOpcode::RDMA_READ,
            SendOp::CmpSwap { .. } => WrOpcode::ATOMIC_CMP_AND_SWP,
            SendOp::FetchAdd { .. } => WrOpcode::ATOMIC_FETCH_AND_ADD,
            SendOp::AtomicWrite { .. } => WrOpcode::ATOMIC_WRITE,
            SendOp::Flush { .. } => WrOpcode::FLUSH,
            SendOp::LocalInv { .. } => WrOpcode::LOCAL_INV,
            SendOp::BindMw(_) => WrOpcode::BIND_MW,
        }
    }
}

/// Destination of a UD send (from the address handle).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdDest {
    pub addr: IpAddr,
    pub qpn: u32,
    pub qkey: u32,
}

/// A send work request as the transport sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendWqe {
    pub wr_id: u64,
    pub op: SendOp,
    /// Bitwise or of [`send_flags`].
    pub flags: u32,
    /// Local data (for READ and atomics: where the result lands).
    pub payload: Payload,
    /// UD only.
    pub ud: Option<UdDest>,
    /// XRC_SEND only: the remote XRC SRQ number (`qp_type.xrc.remote_srqn`).
    pub xrc_srqn: Option<u32>,
}

/// A receive work request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecvWqe {
    pub wr_id: u64,
    pub sges: Vec<Sge>,
}

/// Which completion queue a completion belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqSide {
    Send,
    Recv,
    /// A receive taken from XRC SRQ n: it goes to that SRQ's CQ (an XRC
    /// target QP has no CQ of its own).
    Srq(u32),
}

/// A work completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub side: CqSide,
    pub wr_id: u64,
    pub status: WcStatus,
    pub opcode: WcOpcode,
    pub qp_num: u32,
    pub byte_len: u32,
    /// Bitwise or of [`wc_flags`].
    pub wc_flags: u32,
    /// Immediate data (wire word) when `WITH_IMM`.
    pub imm: u32,
    /// Invalidated rkey when `WITH_INV`.
    pub invalidated_rkey: u32,
    /// UD: the sender's QPN.
    pub src_qp: u32,
    /// UD: the sender's address.
    pub src_addr: Option<IpAddr>,
    /// UD: the header the packet came in (IPv4 or IPv6).
    pub network_hdr: Option<NetworkHdr>,
    /// Provider-specific detail for error completions.
    pub vendor_err: u32,
    /// A receive completion of a message whose last packet had the BTH
    /// solicited-event bit: it wakes a CQ armed for solicited completions
    /// (`ibv_req_notify_cq(cq, 1)`), as rxe's does.
    pub solicited: bool,
}

impl Completion {
    /// A completion with everything but the essentials zeroed.
    pub fn new(side: CqSide, wr_id: u64, status: WcStatus, opcode: WcOpcode, qp_num: u32) -> Self {
        Completion {
            side,
            wr_id,
            status,
            opcode,
            qp_num,
            byte_len: 0,
            wc_flags: 0,
            imm: 0,
            invalidated_rkey: 0,
            src_qp: 0,
            src_addr: None,
            network_hdr: None,
            vendor_err: 0,
            solicited: false,
        }
    }
}
