//! The responder's state (rxe keeps it as `qp->resp`): what the
//! responder remembers between packets, and the queue of responses it owes.
//! Data only; the behaviour is `impl Qp` in `responder.rs`, `resp_ud.rs` and
//! `responses.rs`, which is why the state lives apart from them.

use super::resources::Resources;
use super::sgl::{self, SgCursor};
use super::types::RecvWqe;
use super::ud_dedup::UdDedup;
use crate::wire::Aeth;
use crate::Psn;
use std::collections::VecDeque;

/// A receive WQE being filled by a (multi-packet) message.
#[derive(Debug)]
pub(crate) struct HeldRecv {
    pub wqe: RecvWqe,
    /// XRC: the SRQ it was taken from (its CQ gets the completion).
    pub xrc_srq: Option<u32>,
    pub cap: u64,
    pub cur: SgCursor,
    pub written: u64,
}

impl HeldRecv {
    pub(crate) fn new(wqe: RecvWqe) -> HeldRecv {
        HeldRecv {
            cap: sgl::capacity(&wqe.sges),
            wqe,
            xrc_srq: None,
            cur: SgCursor::default(),
            written: 0,
        }
    }
}

/// Multi-packet message in progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InMsg {
    Send,
    Write,
}

/// Target of the RDMA WRITE in progress.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct WriteCtx {
    pub va: u64,
    pub rkey: u32,
    pub total: u64,
    pub done: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Responder {
    /// Expected PSN.
    pub epsn: Psn,
    /// Message sequence number (24 bits).
    pub msn: u32,
    /// A sequence NAK went out and the expected PSN has not come since.
    pub nak_sent: bool,
    pub in_msg: Option<InMsg>,
    pub held: Option<HeldRecv>,
    pub write: WriteCtx,
    /// UC: dropping packets until the next FIRST/ONLY.
    pub uc_drop: bool,
    pub res: Resources,
    pub out: VecDeque<RespOut>,
    /// UD: recently seen PSNs per source, to drop network duplicates.
    pub ud_seen: UdDedup,
    /// The PD remote and receive memory is checked against for the packet
    /// in hand: the QP's, or for an XRC target the PD of the XRC SRQ its
    /// XRCETH names (a target QP has no PD of its own).
    pub pd: u32,
    /// Credits the newest ACK sent promised (None: none sent yet, or
    /// code 31). Receives posted beyond twice this are announced at once
    /// (`Qp::offer_credits`).
    pub advertised: Option<u32>,
}

impl Responder {
    pub(crate) fn reset(&mut self) {
        self.epsn = Psn::new(0);
        self.msn = 0;
        self.nak_sent = false;
        self.in_msg = None;
        self.held = None;
        self.write = WriteCtx::default();
        self.uc_drop = false;
        self.ud_seen.clear();
        self.res.clear();
        self.out.clear();
        self.advertised = None;
    }

    pub(crate) fn bump_msn(&mut self) {
        self.msn = (self.msn + 1) & 0xFF_FFFF;
    }
}

/// A READ response stream: `resid` bytes from `va` answer PSNs from
/// `psn` on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReadStream {
    pub psn: Psn,
    pub va: u64,
    pub rkey: u32,
    /// The PD the READ was checked against.
    pub pd: u32,
    pub resid: u64,
    /// The first packet (FIRST or ONLY) is out.
    pub started: bool,
}

impl ReadStream {
    pub(crate) fn new(psn: Psn, va: u64, rkey: u32, pd: u32, len: u64) -> ReadStream {
        ReadStream {
            psn,
            va,
            rkey,
            pd,
            resid: len,
            started: false,
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum RespOut {
    /// ACK, RNR NAK or NAK.
    Ack {
        psn: Psn,
        aeth: Aeth,
    },
    AtomicAck {
        psn: Psn,
        orig: u64,
    },
    Read(ReadStream),
    /// READ RESPONSE ONLY without payload: the answer to FLUSH and
    /// ATOMIC WRITE (as rxe sends it).
    Empty {
        psn: Psn,
    },
}
