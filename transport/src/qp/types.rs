//! Types shared by the QP state machines, the engine and the provider:
//! work requests, completions, statuses (numbered as libibverbs' IBV_WC_*),
//! access flags (IBV_ACCESS_*), path MTU.

use std::net::IpAddr;

use crate::verbs::WrOpcode;

/// Memory access flags, numbered as `enum ibv_access_flags`.
pub mod access {
    pub const LOCAL_WRITE: u32 = 1;
    pub const REMOTE_WRITE: u32 = 1 << 1;
    pub const REMOTE_READ: u32 = 1 << 2;
    pub const REMOTE_ATOMIC: u32 = 1 << 3;
    pub const MW_BIND: u32 = 1 << 4;
    pub const ZERO_BASED: u32 = 1 << 5;
}

/// Send work request flags, numbered as `enum ibv_send_flags`.
pub mod send_flags {
    pub const FENCE: u32 = 1;
    pub const SIGNALED: u32 = 1 << 1;
    pub const SOLICITED: u32 = 1 << 2;
    pub const INLINE: u32 = 1 << 3;
}

/// Transport service of a QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpType {
    Rc,
    Uc,
    Ud,
}

/// QP states, numbered as `enum ibv_qp_state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum QpState {
    Reset = 0,
    Init = 1,
    Rtr = 2,
    Rts = 3,
    Sqd = 4,
    Sqe = 5,
    Err = 6,
}

/// IB path MTU, numbered as `enum ibv_mtu` (1 = 256 .. 5 = 4096).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Mtu {
    M256 = 1,
    M512 = 2,
    M1024 = 3,
    M2048 = 4,
    M4096 = 5,
}

impl Mtu {
    /// Payload bytes per packet.
    pub const fn bytes(self) -> usize {
        128 << (self as u8)
    }
    /// From the `ibv_mtu` enum value.
    pub const fn from_enum(v: u8) -> Option<Mtu> {
        match v {
            1 => Some(Mtu::M256),
            2 => Some(Mtu::M512),
            3 => Some(Mtu::M1024),
            4 => Some(Mtu::M2048),
            5 => Some(Mtu::M4096),
            _ => None,
        }
    }
    /// Largest IB MTU whose packets fit a netdev MTU, as rxe computes it
    /// (netdev MTU minus 80 bytes of headers, rounded down).
    pub const fn for_netdev_mtu(netdev_mtu: usize) -> Option<Mtu> {
        let room = netdev_mtu.saturating_sub(80);
        if room >= 4096 {
            Some(Mtu::M4096)
        } else if room >= 2048 {
            Some(Mtu::M2048)
        } else if room >= 1024 {
            Some(Mtu::M1024)
        } else if room >= 512 {
            Some(Mtu::M512)
        } else if room >= 256 {
            Some(Mtu::M256)
        } else {
            None
        }
    }
}

/// One scatter/gather element, as `struct ibv_sge`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

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
}

/// A receive work request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecvWqe {
    pub wr_id: u64,
    pub sges: Vec<Sge>,
}

/// Completion status, numbered as `enum ibv_wc_status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum WcStatus {
    Success = 0,
    LocLenErr = 1,
    LocQpOpErr = 2,
    LocEecOpErr = 3,
    LocProtErr = 4,
    WrFlushErr = 5,
    MwBindErr = 6,
    BadRespErr = 7,
    LocAccessErr = 8,
    RemInvReqErr = 9,
    RemAccessErr = 10,
    RemOpErr = 11,
    RetryExcErr = 12,
    RnrRetryExcErr = 13,
    LocRddViolErr = 14,
    RemInvRdReqErr = 15,
    RemAbortErr = 16,
    InvEecnErr = 17,
    InvEecStateErr = 18,
    FatalErr = 19,
    RespTimeoutErr = 20,
    GeneralErr = 21,
}

impl WcStatus {
    /// The libibverbs name, as `ibv_wc_status_str` would describe it.
    pub const fn verbs_name(self) -> &'static str {
        match self {
            WcStatus::Success => "IBV_WC_SUCCESS",
            WcStatus::LocLenErr => "IBV_WC_LOC_LEN_ERR",
            WcStatus::LocQpOpErr => "IBV_WC_LOC_QP_OP_ERR",
            WcStatus::LocEecOpErr => "IBV_WC_LOC_EEC_OP_ERR",
            WcStatus::LocProtErr => "IBV_WC_LOC_PROT_ERR",
            WcStatus::WrFlushErr => "IBV_WC_WR_FLUSH_ERR",
            WcStatus::MwBindErr => "IBV_WC_MW_BIND_ERR",
            WcStatus::BadRespErr => "IBV_WC_BAD_RESP_ERR",
            WcStatus::LocAccessErr => "IBV_WC_LOC_ACCESS_ERR",
            WcStatus::RemInvReqErr => "IBV_WC_REM_INV_REQ_ERR",
            WcStatus::RemAccessErr => "IBV_WC_REM_ACCESS_ERR",
            WcStatus::RemOpErr => "IBV_WC_REM_OP_ERR",
            WcStatus::RetryExcErr => "IBV_WC_RETRY_EXC_ERR",
            WcStatus::RnrRetryExcErr => "IBV_WC_RNR_RETRY_EXC_ERR",
            WcStatus::LocRddViolErr => "IBV_WC_LOC_RDD_VIOL_ERR",
            WcStatus::RemInvRdReqErr => "IBV_WC_REM_INV_RD_REQ_ERR",
            WcStatus::RemAbortErr => "IBV_WC_REM_ABORT_ERR",
            WcStatus::InvEecnErr => "IBV_WC_INV_EECN_ERR",
            WcStatus::InvEecStateErr => "IBV_WC_INV_EEC_STATE_ERR",
            WcStatus::FatalErr => "IBV_WC_FATAL_ERR",
            WcStatus::RespTimeoutErr => "IBV_WC_RESP_TIMEOUT_ERR",
            WcStatus::GeneralErr => "IBV_WC_GENERAL_ERR",
        }
    }
}

/// Completion opcode, numbered as `enum ibv_wc_opcode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum WcOpcode {
    Send = 0,
    RdmaWrite = 1,
    RdmaRead = 2,
    CompSwap = 3,
    FetchAdd = 4,
    BindMw = 5,
    LocalInv = 6,
    Tso = 7,
    Flush = 8,
    AtomicWrite = 9,
    Recv = 128,
    RecvRdmaWithImm = 129,
}

/// Completion flags, numbered as `enum ibv_wc_flags`.
pub mod wc_flags {
    pub const GRH: u32 = 1;
    pub const WITH_IMM: u32 = 1 << 1;
    pub const IP_CSUM_OK: u32 = 1 << 2;
    pub const WITH_INV: u32 = 1 << 3;
}

/// Which completion queue a completion belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqSide {
    Send,
    Recv,
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
    /// Provider-specific detail for error completions.
    pub vendor_err: u32,
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
            vendor_err: 0,
        }
    }
}
