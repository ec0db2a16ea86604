//! CM MADs inside RoCE packets: a UD SEND_ONLY to QP1 with the GSI Q_Key
//! carries one, named here by its message and what identifies it.

use std::fmt::Write as _;

use rxu_cm::wire::{self, GSI_QKEY, GSI_QPN};
use transport::wire::{Opcode, Packet};

/// Appends ` CM <summary>` for a packet to QP1 whose payload is a CM MAD,
/// ` CM ? (<why not>)` for one whose payload is not; nothing for others.
pub(super) fn describe(line: &mut String, p: &Packet<'_>) {
    let to_gsi = p.opcode() == Opcode::UD_SEND_ONLY
        && p.hdr.bth.dest_qpn == GSI_QPN
        && p.hdr.deth.is_some_and(|d| d.qkey == GSI_QKEY);
    if !to_gsi {
        return;
    }
    let _ = match wire::parse(p.payload) {
        Ok(m) => write!(line, " CM {}", m.summary()),
        Err(e) => write!(line, " CM ? ({e})"),
    };
}
