//! Work requests as the daemon's tests describe them, written into slots
//! with the slot views' setters (the one encoder).

use rxu_abi::proto::abi::{RecvSlot, SendSlot};
use transport::verbs::{Sge, WrOpcode};

#[derive(Clone, Debug, Default)]
pub(crate) struct SendSpec {
    pub wr_id: u64,
    pub opcode: WrOpcode,
    pub send_flags: u32,
    pub imm_data: u32,
    pub remote_addr: u64,
    pub rkey: u32,
    pub compare_add: u64,
    pub swap: u64,
    pub flush: u32,
    pub ud_qpn: u32,
    pub ud_qkey: u32,
    pub ud_gid: [u8; 16],
    pub ud_flow_label: u32,
    pub bind_lkey: u32,
    pub bind_access: u32,
    pub sges: Vec<Sge>,
    /// Written instead of the SGEs when not empty.
    pub inline: Vec<u8>,
}

impl SendSpec {
    /// The whole slot `b` (zeroed first).
    pub(crate) fn write(&self, b: &mut [u8]) {
        b.fill(0);
        let mut s = SendSlot::new_unchecked(b);
        s.set_wr_id(self.wr_id);
        s.set_opcode(self.opcode);
        s.set_send_flags(self.send_flags);
        s.set_imm_data(self.imm_data);
        s.set_remote_addr(self.remote_addr);
        s.set_rkey(self.rkey);
        s.set_compare_add(self.compare_add);
        s.set_swap(self.swap);
        s.set_flush(self.flush);
        s.set_ud_qpn(self.ud_qpn);
        s.set_ud_qkey(self.ud_qkey);
        s.set_ud_gid(&self.ud_gid);
        s.set_ud_flow_label(self.ud_flow_label);
        s.set_bind_lkey(self.bind_lkey);
        s.set_bind_access(self.bind_access);
        if self.inline.is_empty() {
            s.set_sges(&self.sges).unwrap();
        } else {
            s.set_inline_data(&self.inline).unwrap();
        }
    }

    /// A slot of `size` bytes holding it.
    pub(crate) fn slot(&self, size: usize) -> Vec<u8> {
        let mut b = vec![0u8; size];
        self.write(&mut b);
        b
    }
}

#[derive(Clone, Debug, Default)]
pub(crate) struct RecvSpec {
    pub wr_id: u64,
    pub sges: Vec<Sge>,
}

impl RecvSpec {
    pub(crate) fn write(&self, b: &mut [u8]) {
        b.fill(0);
        let mut r = RecvSlot::new_unchecked(b);
        r.set_wr_id(self.wr_id);
        r.set_sges(&self.sges).unwrap();
    }
}
