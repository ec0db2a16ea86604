//! The enums and the one struct of `verbs.h` that every layer shares: QP
//! type and state, path MTU, the scatter/gather element, completion
//! status and opcode. Numbered as libibverbs numbers them.

/// Transport service of a QP, numbered as `enum ibv_qp_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[repr(u8)]
pub enum QpType {
    Rc = 2,
    Uc = 3,
    Ud = 4,
    /// XRC initiator: an RC requester whose requests name a remote XRC
    /// SRQ; no receive queue.
    XrcSend = 9,
    /// XRC target: an RC responder bound to an XRC domain, taking each
    /// message's receive from the XRC SRQ its XRCETH names; no send queue.
    XrcRecv = 10,
}

impl QpType {
    /// From the `ibv_qp_type` value (None for types rxu has not).
    pub const fn from_ibv(v: u32) -> Option<QpType> {
        match v {
            2 => Some(QpType::Rc),
            3 => Some(QpType::Uc),
            4 => Some(QpType::Ud),
            9 => Some(QpType::XrcSend),
            10 => Some(QpType::XrcRecv),
            _ => None,
        }
    }

    /// `RC`, `UC`, `UD`, `XRC_SEND` or `XRC_RECV`.
    pub const fn name(self) -> &'static str {
        match self {
            QpType::Rc => "RC",
            QpType::Uc => "UC",
            QpType::Ud => "UD",
            QpType::XrcSend => "XRC_SEND",
            QpType::XrcRecv => "XRC_RECV",
        }
    }

    /// Reliable connected service (RC, or either side of XRC): ACKs,
    /// retransmission, READ and atomics.
    pub const fn is_reliable(self) -> bool {
        matches!(self, QpType::Rc | QpType::XrcSend | QpType::XrcRecv)
    }

    /// One of the two XRC types.
    pub const fn is_xrc(self) -> bool {
        matches!(self, QpType::XrcSend | QpType::XrcRecv)
    }
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

impl QpState {
    /// From the `ibv_qp_state` value.
    pub const fn from_u8(v: u8) -> Option<QpState> {
        Some(match v {
            0 => QpState::Reset,
            1 => QpState::Init,
            2 => QpState::Rtr,
            3 => QpState::Rts,
            4 => QpState::Sqd,
            5 => QpState::Sqe,
            6 => QpState::Err,
            _ => return None,
        })
    }

    /// `RESET`, `INIT`, `RTR`, `RTS`, `SQD`, `SQE` or `ERR`.
    pub const fn name(self) -> &'static str {
        match self {
            QpState::Reset => "RESET",
            QpState::Init => "INIT",
            QpState::Rtr => "RTR",
            QpState::Rts => "RTS",
            QpState::Sqd => "SQD",
            QpState::Sqe => "SQE",
            QpState::Err => "ERR",
        }
    }
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

/// One scatter/gather element, laid out as `struct ibv_sge` so a C
/// caller's array can be viewed as a slice of these.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
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
    /// From the `ibv_wc_status` value (None for values rxu never reports,
    /// such as the tag-matching ones).
    pub const fn from_u32(v: u32) -> Option<WcStatus> {
        use WcStatus::*;
        Some(match v {
            0 => Success,
            1 => LocLenErr,
            2 => LocQpOpErr,
            3 => LocEecOpErr,
            4 => LocProtErr,
            5 => WrFlushErr,
            6 => MwBindErr,
            7 => BadRespErr,
            8 => LocAccessErr,
            9 => RemInvReqErr,
            10 => RemAccessErr,
            11 => RemOpErr,
            12 => RetryExcErr,
            13 => RnrRetryExcErr,
            14 => LocRddViolErr,
            15 => RemInvRdReqErr,
            16 => RemAbortErr,
            17 => InvEecnErr,
            18 => InvEecStateErr,
            19 => FatalErr,
            20 => RespTimeoutErr,
            21 => GeneralErr,
            _ => return None,
        })
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbering_round_trips() {
        for v in 0..=255u8 {
            if let Some(s) = QpState::from_u8(v) {
                assert_eq!(s as u8, v);
            }
            if let Some(m) = Mtu::from_enum(v) {
                assert_eq!(m as u8, v);
                assert_eq!(m.bytes(), 128 << v);
            }
        }
        for v in 0..64u32 {
            if let Some(s) = WcStatus::from_u32(v) {
                assert_eq!(s as u32, v);
            }
            if let Some(t) = QpType::from_ibv(v) {
                assert_eq!(t as u32, v);
            }
        }
        assert_eq!(WcStatus::from_u32(21), Some(WcStatus::GeneralErr));
        assert_eq!(WcStatus::from_u32(22), None);
        assert_eq!(QpState::from_u8(7), None);
        assert_eq!(WcStatus::RemAccessErr.verbs_name(), "IBV_WC_REM_ACCESS_ERR");
    }

    #[test]
    fn sge_is_ibv_sge() {
        assert_eq!(std::mem::size_of::<Sge>(), 16);
        assert_eq!(std::mem::offset_of!(Sge, length), 8);
        assert_eq!(std::mem::offset_of!(Sge, lkey), 12);
    }

    #[test]
    fn netdev_mtu_rule() {
        assert_eq!(Mtu::for_netdev_mtu(1500), Some(Mtu::M1024));
        assert_eq!(Mtu::for_netdev_mtu(65536), Some(Mtu::M4096));
        assert_eq!(Mtu::for_netdev_mtu(9000), Some(Mtu::M4096));
        assert_eq!(Mtu::for_netdev_mtu(4175), Some(Mtu::M2048));
        assert_eq!(Mtu::for_netdev_mtu(4176), Some(Mtu::M4096));
        assert_eq!(Mtu::for_netdev_mtu(300), None);
    }
}
