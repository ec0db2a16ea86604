//! Extension transport headers: RETH, AETH, AtomicETH, AtomicAckETH, DETH,
//! FETH. ImmDt and IETH are a bare 32-bit word and live in
//! [`crate::wire::Headers`] as `u32`.

use super::{be24, be32, be64, put24};

/// RDMA extended transport header (16 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Reth {
    pub va: u64,
    pub rkey: u32,
    pub dma_len: u32,
}

impl Reth {
    pub const LEN: usize = 16;
    pub(crate) fn parse(b: &[u8]) -> Reth {
        Reth {
            va: be64(b, 0),
            rkey: be32(b, 8),
            dma_len: be32(b, 12),
        }
    }
    pub(crate) fn emit(&self, b: &mut [u8]) {
        b[0..8].copy_from_slice(&self.va.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..16].copy_from_slice(&self.dma_len.to_be_bytes());
    }
}

/// NAK codes carried in the AETH syndrome (type 11).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NakCode {
    /// 0x60: PSN sequence error.
    PsnSequence,
    /// 0x61: invalid request.
    InvalidRequest,
    /// 0x62: remote access error.
    RemoteAccess,
    /// 0x63: remote operational error.
    RemoteOperational,
    /// 0x64: invalid RD request.
    InvalidRdRequest,
    /// Any other value of the low 5 bits.
    Reserved(u8),
}

impl NakCode {
    pub const fn value(self) -> u8 {
        match self {
            NakCode::PsnSequence => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccess => 2,
            NakCode::RemoteOperational => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(v) => v & 0x1f,
        }
    }
    pub const fn from_value(v: u8) -> NakCode {
        match v & 0x1f {
            0 => NakCode::PsnSequence,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccess,
            3 => NakCode::RemoteOperational,
            4 => NakCode::InvalidRdRequest,
            x => NakCode::Reserved(x),
        }
    }
}

/// What an AETH syndrome says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AethKind {
    /// ACK with a credit code (31 = invalid/unlimited).
    Ack { credit: u8 },
    /// Receiver not ready, with the 5-bit RNR timer code.
    RnrNak { timer: u8 },
    /// NAK.
    Nak(NakCode),
    /// Type 10: reserved.
    Reserved(u8),
}

/// ACK extended transport header (4 bytes): syndrome and MSN.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Aeth {
    pub syndrome: u8,
    /// Message sequence number (24 bits).
    pub msn: u32,
}

impl Aeth {
    pub const LEN: usize = 4;
    /// Credit code meaning "no credit information".
    pub const CREDIT_INVALID: u8 = 0x1f;

    pub const fn ack(credit: u8, msn: u32) -> Aeth {
        Aeth {
            syndrome: credit & 0x1f,
            msn: msn & 0xff_ffff,
        }
    }
    pub const fn rnr_nak(timer: u8, msn: u32) -> Aeth {
        Aeth {
            syndrome: 0x20 | (timer & 0x1f),
            msn: msn & 0xff_ffff,
        }
    }
    pub const fn nak(code: NakCode, msn: u32) -> Aeth {
        Aeth {
            syndrome: 0x60 | code.value(),
            msn: msn & 0xff_ffff,
        }
    }
    pub const fn kind(&self) -> AethKind {
        let v = self.syndrome & 0x1f;
        match (self.syndrome >> 5) & 3 {
            0 => AethKind::Ack { credit: v },
            1 => AethKind::RnrNak { timer: v },
            3 => AethKind::Nak(NakCode::from_value(v)),
            _ => AethKind::Reserved(v),
        }
    }
    pub(crate) fn parse(b: &[u8]) -> Aeth {
        Aeth {
            syndrome: b[0],
            msn: be24(b, 1),
        }
    }
    pub(crate) fn emit(&self, b: &mut [u8]) {
        b[0] = self.syndrome;
        put24(b, 1, self.msn);
    }
}

/// Atomic extended transport header (28 bytes, not 8-byte aligned).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct AtomicEth {
    pub va: u64,
    pub rkey: u32,
    /// Swap value (CmpSwap) or add value (FetchAdd).
    pub swap_add: u64,
    /// Compare value (CmpSwap only).
    pub compare: u64,
}

impl AtomicEth {
    pub const LEN: usize = 28;
    pub(crate) fn parse(b: &[u8]) -> AtomicEth {
        AtomicEth {
            va: be64(b, 0),
            rkey: be32(b, 8),
            swap_add: be64(b, 12),
            compare: be64(b, 20),
        }
    }
    pub(crate) fn emit(&self, b: &mut [u8]) {
        b[0..8].copy_from_slice(&self.va.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..20].copy_from_slice(&self.swap_add.to_be_bytes());
        b[20..28].copy_from_slice(&self.compare.to_be_bytes());
    }
}

/// Atomic ACK extended transport header (8 bytes): the original value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct AtomicAckEth {
    pub orig: u64,
}

impl AtomicAckEth {
    pub const LEN: usize = 8;
    pub(crate) fn parse(b: &[u8]) -> AtomicAckEth {
        AtomicAckEth { orig: be64(b, 0) }
    }
    pub(crate) fn emit(&self, b: &mut [u8]) {
        b[0..8].copy_from_slice(&self.orig.to_be_bytes());
    }
}

/// Datagram extended transport header (8 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Deth {
    pub qkey: u32,
    /// Source QP (24 bits).
    pub src_qpn: u32,
}

impl Deth {
    pub const LEN: usize = 8;
    pub(crate) fn parse(b: &[u8]) -> Deth {
        Deth {
            qkey: be32(b, 0),
            src_qpn: be24(b, 5),
        }
    }
    pub(crate) fn emit(&self, b: &mut [u8]) {
        b[0..4].copy_from_slice(&self.qkey.to_be_bytes());
        b[4] = 0;
        put24(b, 5, self.src_qpn);
    }
}

/// FLUSH extended transport header (4 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Feth {
    /// Placement type (bits 3:0).
    pub plt: u8,
    /// Selectivity level (bits 5:4).
    pub sel: u8,
}

impl Feth {
    pub const LEN: usize = 4;
    pub(crate) fn parse(b: &[u8]) -> Feth {
        let v = be32(b, 0);
        Feth {
            plt: (v & 0xf) as u8,
            sel: ((v >> 4) & 3) as u8,
        }
    }
    pub(crate) fn emit(&self, b: &mut [u8]) {
        let v = u32::from(self.plt & 0xf) | (u32::from(self.sel & 3) << 4);
        b[0..4].copy_from_slice(&v.to_be_bytes());
    }
}
