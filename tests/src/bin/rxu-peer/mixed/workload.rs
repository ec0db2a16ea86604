//! What the mixed workload's client and server agree on: the operation
//! kinds, how many of each a run has, the data patterns and where every
//! lane's targets sit in memory.

use std::time::Duration;

use crate::args::Args;

pub(super) const KINDS: u64 = 6;
pub(super) const SEND: u64 = 0;
pub(super) const WRITE: u64 = 1;
pub(super) const WRITE_IMM: u64 = 2;
pub(super) const READ: u64 = 3;
pub(super) const CAS: u64 = 4;
pub(super) const FADD: u64 = 5;
pub(super) const KIND_NAMES: [&str; 6] = [
    "SEND",
    "WRITE",
    "WRITE_IMM",
    "READ",
    "CMP_SWAP",
    "FETCH_ADD",
];
/// Target slots per lane; a slot is reused after this many rounds.
pub(super) const MAX_TARGETS: u64 = 64;
/// How often the control channel is checked for the peer's death.
pub(super) const CTL_CHECK: Duration = Duration::from_millis(1);

/// Operations of `kind` among the first `n`.
pub(super) fn count(n: u64, kind: u64) -> u64 {
    if n > kind {
        (n - kind).div_ceil(KINDS)
    } else {
        0
    }
}

pub(super) fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The bytes of lane `q`'s operation `i`: distinct per lane, op and offset.
pub fn pattern(q: usize, i: u64, out: &mut [u8]) {
    let mut x = splitmix(((q as u64) << 40) ^ i ^ 0x5eed);
    for chunk in out.chunks_mut(8) {
        x = splitmix(x);
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
}

/// Where everything sits in the two sides' buffers (both derive it from
/// the same arguments).
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    pub size: usize,
    pub depth: usize,
    pub n: u64,
    pub qps: usize,
    /// Server lane: receive slots, target slots (WRITE bytes then
    /// WRITE_IMM bytes of one round), then the FetchAdd and CmpSwap words.
    pub recv_slots: usize,
    pub target_slots: u64,
    pub target_off: usize,
    pub atom_off: usize,
    pub server_stride: usize,
    /// Client lane: `depth` slots of twice the size (sources, READ and
    /// atomic results).
    pub client_slot: usize,
    pub client_stride: usize,
}

impl Layout {
    pub fn new(args: &Args) -> Layout {
        let size = args.size;
        let depth = args.depth as usize;
        let n = args.iters;
        let recv_slots = depth;
        let target_slots = count(n, WRITE).clamp(1, MAX_TARGETS);
        let target_off = recv_slots * size;
        let atom_off = (target_off + target_slots as usize * 2 * size).next_multiple_of(8);
        let server_stride = (atom_off + 16).next_multiple_of(64);
        let client_slot = (2 * size).max(8).next_multiple_of(8);
        Layout {
            size,
            depth,
            n,
            qps: args.qps as usize,
            recv_slots,
            target_slots,
            target_off,
            atom_off,
            server_stride,
            client_slot,
            client_stride: (depth * client_slot).next_multiple_of(64),
        }
    }

    pub fn server_len(&self) -> usize {
        self.qps * self.server_stride
    }

    pub fn client_len(&self) -> usize {
        self.qps * self.client_stride
    }

    /// Receive-consuming operations (SEND, WRITE_IMM) among `n`.
    pub fn recvs(n: u64) -> u64 {
        count(n, SEND) + count(n, WRITE_IMM)
    }

    /// The operation behind a lane's k-th receive (they alternate).
    pub fn recv_op(k: u64) -> u64 {
        KINDS * (k / 2) + if k.is_multiple_of(2) { SEND } else { WRITE_IMM }
    }

    pub(super) fn client_off(&self, q: usize, i: u64) -> usize {
        q * self.client_stride + (i % self.depth as u64) as usize * self.client_slot
    }

    /// Round m's target slot: WRITE m's bytes, then WRITE_IMM m's.
    pub(super) fn write_target(&self, q: usize, m: u64) -> usize {
        let slot = (m % self.target_slots) as usize;
        q * self.server_stride + self.target_off + slot * 2 * self.size
    }

    pub(super) fn imm_target(&self, q: usize, m: u64) -> usize {
        self.write_target(q, m) + self.size
    }

    pub(super) fn recv_slot(&self, q: usize, k: u64) -> usize {
        q * self.server_stride + (k % self.recv_slots as u64) as usize * self.size
    }

    pub(super) fn fadd_word(&self, q: usize) -> usize {
        q * self.server_stride + self.atom_off
    }

    pub(super) fn cas_word(&self, q: usize) -> usize {
        self.fadd_word(q) + 8
    }
}

pub(super) fn first_diff(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y)
}
