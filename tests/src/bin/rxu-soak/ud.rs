//! The UD lane: SENDs from a UD QP to another (same device or the other
//! one), with receives kept posted. UD may drop; what arrives must be
//! exactly what this process incarnation sent: each message starts with
//! the incarnation's nonce and its sequence number, its length and bytes
//! follow from them. A message with another nonce reached a QP of ours
//! without being ours (a dead incarnation's, say): a violation.

use rxu_client::*;

use crate::lane::{Res, ALL_ACCESS};
use crate::pattern::{fill, first_bad, op_seed, splitmix};

/// Receives kept posted.
const SLOTS: usize = 16;
/// The GRH area at the head of every UD receive.
const GRH: usize = 40;
const HDR: usize = 16;
/// Payload bytes at most (fits any MTU rxu offers).
const MAX: usize = 1024;
const SLOT: usize = GRH + MAX;
const RECV_BIT: u64 = 0x8000_0000;
pub const QKEY: u32 = 0x1111_1111;

pub struct Ud {
    pub id: usize,
    nonce: u64,
    pub a: Qp,
    pub b: Qp,
    ah: Ah,
    src: MrBuf,
    rcv: MrBuf,
    seq: u64,
    in_flight: bool,
    pub sent: u64,
    pub received: u64,
    pub bytes: u64,
}

fn msg_len(nonce: u64, seq: u64) -> usize {
    HDR + (splitmix(nonce ^ seq) % (MAX - HDR + 1) as u64) as usize
}

impl Ud {
    /// `a` sends to `b`, whose device has GID `b_gid`.
    pub fn new(id: usize, nonce: u64, a: Qp, b: Qp, b_gid: [u8; 16]) -> Res<Ud> {
        let err = |what: &'static str| move |e: Error| format!("UD lane: {what}: {e}");
        let pd_a = a.pd().expect("UD QP has a PD").clone();
        let ah = Ah::new(
            &pd_a,
            AhAttr {
                dgid: b_gid,
                hop_limit: 64,
                is_global: true,
                port_num: 1,
                ..Default::default()
            },
        )
        .map_err(err("create_ah"))?;
        let src = MrBuf::new(&pd_a, MAX, ALL_ACCESS).map_err(err("reg_mr"))?;
        let rcv = MrBuf::new(b.pd().expect("UD QP has a PD"), SLOTS * SLOT, ALL_ACCESS)
            .map_err(err("reg_mr"))?;
        let ud = Ud {
            id,
            nonce,
            a,
            b,
            ah,
            src,
            rcv,
            seq: 0,
            in_flight: false,
            sent: 0,
            received: 0,
            bytes: 0,
        };
        for s in 0..SLOTS {
            ud.post_recv(s)?;
        }
        Ok(ud)
    }

    fn post_recv(&self, slot: usize) -> Res<()> {
        let id = (self.id as u64) << 32 | RECV_BIT | slot as u64;
        self.b
            .post_recv(&[RecvWr::new(id, &[self.rcv.sge(slot * SLOT, SLOT as u32)])])
            .map_err(|e| format!("UD lane: post_recv: {e}"))
    }

    pub fn idle(&self) -> bool {
        !self.in_flight
    }

    pub fn start(&mut self) -> Res<()> {
        let seq = self.seq;
        self.seq += 1;
        let len = msg_len(self.nonce, seq);
        let mut m = vec![0u8; len];
        m[..8].copy_from_slice(&self.nonce.to_le_bytes());
        m[8..16].copy_from_slice(&seq.to_le_bytes());
        fill(op_seed(self.nonce, self.id, seq), &mut m[HDR..]);
        self.src.write(0, &m).map_err(|e| e.to_string())?;
        let sge = [self.src.sge(0, len as u32)];
        let id = (self.id as u64) << 32 | (seq & 0xffff_ffff);
        self.a
            .post_send(&[SendWr::send(id, &sge)
                .ud(&self.ah, self.b.qpn(), QKEY)
                .signaled()])
            .map_err(|e| format!("UD lane: post_send: {e}"))?;
        self.in_flight = true;
        Ok(())
    }

    /// A successful completion for this lane; Some(bytes) for a received,
    /// checked message.
    pub fn complete(&mut self, wc: &Wc) -> Res<Option<u64>> {
        if wc.wr_id & RECV_BIT == 0 {
            self.in_flight = false;
            self.sent += 1;
            return Ok(None);
        }
        let slot = (wc.wr_id & 0xffff) as usize;
        let v = |what: String| format!("VIOLATION UD lane: {what}");
        if slot >= SLOTS {
            return Err(v(format!("receive of unknown slot {slot}")));
        }
        let n = (wc.byte_len as usize).saturating_sub(GRH);
        if !(HDR..=MAX).contains(&n) || wc.byte_len as usize != GRH + n {
            return Err(v(format!("received {} bytes", wc.byte_len)));
        }
        let mut m = vec![0u8; n];
        self.rcv
            .read(slot * SLOT + GRH, &mut m)
            .map_err(|e| e.to_string())?;
        let nonce = u64::from_le_bytes(m[..8].try_into().expect("8 bytes"));
        let seq = u64::from_le_bytes(m[8..16].try_into().expect("8 bytes"));
        if nonce != self.nonce {
            return Err(v(format!(
                "a message of another incarnation ({nonce:#x}, ours {:#x}) from QPN {:#x} \
                 landed in QP {:#x}",
                self.nonce,
                wc.src_qp,
                self.b.qpn()
            )));
        }
        if seq >= self.seq || n != msg_len(self.nonce, seq) {
            return Err(v(format!("message {seq} of {n} bytes was never sent")));
        }
        if let Some(off) = first_bad(op_seed(self.nonce, self.id, seq), &m[HDR..]) {
            return Err(v(format!("message {seq} byte {} is wrong", HDR + off)));
        }
        self.received += 1;
        self.bytes += n as u64;
        self.post_recv(slot)?;
        Ok(Some(n as u64))
    }
}
