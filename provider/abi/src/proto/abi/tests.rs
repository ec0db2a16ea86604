//! The slot and CQE views: the documented layout, round trips, garbage.

use super::*;
use proptest::prelude::*;
use transport::verbs::{Sge, WrOpcode};

fn sge() -> impl Strategy<Value = Sge> {
    (any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(addr, length, lkey)| Sge {
        addr,
        length,
        lkey,
    })
}

/// The offsets of the layout in the module doc, pinned byte by byte:
/// the field modules may be rewritten, the contract may not.
#[test]
fn layout_is_the_documented_one() {
    let mut b = [0u8; 128];
    let mut s = SendSlot::new_unchecked(&mut b[..]);
    s.set_wr_id(0x0807_0605_0403_0201);
    s.set_opcode(WrOpcode(0x0c0b_0a09));
    s.set_send_flags(0x100f_0e0d);
    s.set_imm_data(0x1413_1211);
    s.set_num_sge(0x1615);
    s.set_inline_len(0x1817);
    s.set_remote_addr(0x201f_1e1d_1c1b_1a19);
    s.set_rkey(0x2423_2221);
    s.set_ud_qpn(0x2827_2625);
    s.set_compare_add(0x302f_2e2d_2c2b_2a29);
    s.set_swap(0x3837_3635_3433_3231);
    s.set_ud_qkey(0x3c3b_3a39);
    s.set_flush(0x403f_3e3d);
    s.set_ud_gid(&std::array::from_fn(|i| 0x41 + i as u8));
    s.set_ud_flow_label(0x5453_5251);
    let want: Vec<u8> = (1..=0x54).collect();
    assert_eq!(&b[..0x54], &want[..]);
    assert!(b[0x54..SEND_HDR].iter().all(|&x| x == 0), "reserved");
    let sg = emit_sge(&Sge {
        addr: 0x0807_0605_0403_0201,
        length: 0x0c0b_0a09,
        lkey: 0x100f_0e0d,
    });
    assert_eq!(sg.to_vec(), (1..=16).collect::<Vec<u8>>());

    let mut r = [0u8; RECV_HDR];
    let mut v = RecvSlot::new_unchecked(&mut r[..]);
    v.set_wr_id(0x0807_0605_0403_0201);
    v.set_num_sge(0x0c0b_0a09);
    assert_eq!(&r[..12], &(1..=12).collect::<Vec<u8>>()[..]);

    let mut c = [0u8; CQE_SIZE];
    let mut e = Cqe::new_unchecked(&mut c[..]);
    e.set_wr_id(0x0807_0605_0403_0201);
    e.set_status(0x0c0b_0a09);
    e.set_opcode(0x100f_0e0d);
    e.set_vendor_err(0x1413_1211);
    e.set_byte_len(0x1817_1615);
    e.set_imm_data(0x1c1b_1a19);
    e.set_qp_num(0x201f_1e1d);
    e.set_src_qp(0x2423_2221);
    e.set_wc_flags(0x2827_2625);
    e.set_pkey_index(0x2a29);
    e.set_slid(0x2c2b);
    e.set_sl(0x2d);
    e.set_dlid_path_bits(0x2e);
    e.set_src_gid(&std::array::from_fn(|i| 0x31 + i as u8));
    assert_eq!(&c[..46], &(1..=46).collect::<Vec<u8>>()[..]);
    assert_eq!(&c[46..48], &[0, 0], "reserved");
    assert_eq!(&c[48..], &(0x31..=0x40).collect::<Vec<u8>>()[..]);
}

proptest! {
    #[test]
    fn send_round_trip(wr_id in any::<u64>(), opcode in 0u32..16, flags in any::<u32>(),
                       sges in proptest::collection::vec(sge(), 0..8),
                       inline in proptest::collection::vec(any::<u8>(), 0..200),
                       gid in any::<[u8; 16]>(), ra in any::<u64>(), ca in any::<u64>()) {
        let mut b = vec![0u8; send_slot_size(8, 256) as usize];
        let mut s = SendSlot::new_unchecked(&mut b[..]);
        s.set_wr_id(wr_id);
        s.set_opcode(WrOpcode(opcode));
        s.set_send_flags(flags);
        s.set_imm_data(7);
        s.set_remote_addr(ra);
        s.set_rkey(9);
        s.set_ud_qpn(3);
        s.set_compare_add(ca);
        s.set_swap(!ca);
        s.set_ud_qkey(5);
        s.set_flush(0x0102);
        s.set_ud_gid(&gid);
        s.set_ud_flow_label(0x1234);
        if inline.is_empty() {
            s.set_sges(&sges).unwrap();
        } else {
            s.set_inline_data(&inline).unwrap();
        }
        let s = SendSlot::new_checked(&b[..]).unwrap();
        prop_assert_eq!((s.wr_id(), s.opcode(), s.send_flags()), (wr_id, WrOpcode(opcode), flags));
        prop_assert_eq!((s.imm_data(), s.remote_addr(), s.rkey()), (7, ra, 9));
        prop_assert_eq!((s.ud_qpn(), s.compare_add(), s.swap()), (3, ca, !ca));
        prop_assert_eq!((s.ud_qkey(), s.flush(), s.ud_gid()), (5, 0x0102, gid));
        prop_assert_eq!(s.ud_flow_label(), 0x1234);
        if inline.is_empty() {
            prop_assert_eq!(s.sges().collect::<Vec<_>>(), sges);
            prop_assert!(s.inline_data().is_empty());
        } else {
            prop_assert_eq!(s.inline_data(), &inline[..]);
            prop_assert_eq!(s.sges().len(), 0);
        }
    }

    #[test]
    fn recv_round_trip(wr_id in any::<u64>(), sges in proptest::collection::vec(sge(), 0..8)) {
        let mut b = vec![0u8; recv_slot_size(8) as usize];
        let mut r = RecvSlot::new_unchecked(&mut b[..]);
        r.set_wr_id(wr_id);
        r.set_sges(&sges).unwrap();
        let r = RecvSlot::new_checked(&b[..]).unwrap();
        prop_assert_eq!(r.wr_id(), wr_id);
        prop_assert_eq!(r.sges().collect::<Vec<_>>(), sges);
    }

    #[test]
    fn garbage_never_panics(b in proptest::collection::vec(any::<u8>(), 0..600)) {
        // Checked views read every field; unchecked ones over short
        // buffers are not built from untrusted bytes.
        if let Ok(s) = SendSlot::new_checked(&b[..]) {
            let _ = (s.wr_id(), s.opcode(), s.ud_gid(), s.ud_flow_label());
            prop_assert_eq!(s.sges().count(), usize::from(s.num_sge()));
            prop_assert_eq!(s.inline_data().len(), usize::from(s.inline_len()));
        }
        if let Ok(r) = RecvSlot::new_checked(&b[..]) {
            prop_assert_eq!(r.sges().count() as u32, r.num_sge());
        }
        if let Ok(c) = Cqe::new_checked(&b[..]) {
            let _ = (c.wr_id(), c.src_gid(), c.sl(), c.dlid_path_bits());
        }
        // The SGE iterator stops at the end of the bytes, whatever the
        // count says.
        let s = SendSlot::new_unchecked(&b[..]);
        if b.len() >= SEND_HDR {
            prop_assert!(s.sges().count() <= (b.len() - SEND_HDR) / SGE_SIZE);
        }
    }
}

#[test]
fn short_buffers_are_refused() {
    let b = [0u8; SEND_HDR - 1];
    assert_eq!(
        SendSlot::new_checked(&b[..]).unwrap_err(),
        SlotError::TooSmall {
            need: SEND_HDR,
            have: SEND_HDR - 1
        }
    );
    let mut b = [0u8; 128];
    SendSlot::new_unchecked(&mut b[..]).set_num_sge(3);
    assert!(SendSlot::new_checked(&b[..]).is_err(), "3 SGEs in 32 bytes");
    let mut b = [0u8; 64];
    RecvSlot::new_unchecked(&mut b[..]).set_num_sge(u32::MAX);
    assert!(RecvSlot::new_checked(&b[..]).is_err());
    assert!(Cqe::new_checked(&[0u8; CQE_SIZE - 1][..]).is_err());
    let mut s = SendSlot::new_unchecked(vec![0u8; SEND_HDR + 16]);
    assert!(s.set_sges(&[Sge::default(); 2]).is_err());
    assert!(s.set_inline_data(&[0; 17]).is_err());
}

#[test]
fn cqe_round_trip() {
    let mut b = [0u8; CQE_SIZE];
    let mut c = Cqe::new_unchecked(&mut b);
    c.set_wr_id(1);
    c.set_status(5);
    c.set_opcode(128);
    c.set_vendor_err(2);
    c.set_byte_len(40);
    c.set_imm_data(0xdead);
    c.set_qp_num(0x11);
    c.set_src_qp(0x12);
    c.set_wc_flags(3);
    c.set_src_gid(&[7; 16]);
    let c = Cqe::new_checked(&b).unwrap();
    assert_eq!(
        (c.wr_id(), c.status(), c.opcode(), c.vendor_err()),
        (1, 5, 128, 2)
    );
    assert_eq!(
        (c.byte_len(), c.imm_data(), c.qp_num(), c.src_qp()),
        (40, 0xdead, 0x11, 0x12)
    );
    assert_eq!(
        (c.wc_flags(), c.pkey_index(), c.slid(), c.sl()),
        (3, 0, 0, 0)
    );
    assert_eq!((c.dlid_path_bits(), c.src_gid()), (0, [7; 16]));
}

#[test]
fn cqe_stamps() {
    let mut b = [0u8; CQE_STAMPED_SIZE];
    let mut c = Cqe::new_unchecked(&mut b);
    c.set_wr_id(9);
    c.set_completion_stamps(0x0102_0304_0506_0708, 0x1112_1314_1516_1718);
    assert_eq!(&b[64..72], &0x0102_0304_0506_0708u64.to_le_bytes());
    assert_eq!(&b[72..80], &0x1112_1314_1516_1718u64.to_le_bytes());
    let c = Cqe::new_checked(&b[..]).unwrap();
    assert_eq!((c.wr_id(), c.completion_ts()), (9, 0x0102_0304_0506_0708));
    assert_eq!(c.completion_wallclock_ns(), 0x1112_1314_1516_1718);
    // The first 64 bytes alone: an entry of a CQ without timestamps.
    let short = Cqe::new_checked(&b[..CQE_SIZE]).unwrap();
    assert_eq!((short.wr_id(), short.completion_ts()), (9, 0));
    assert_eq!(short.completion_wallclock_ns(), 0);
    let mut c = Cqe::new_unchecked(&mut b);
    c.clear();
    assert_eq!(b, [0u8; CQE_STAMPED_SIZE]);
}

#[test]
fn slot_sizes() {
    assert_eq!(send_slot_size(1, 0), 128);
    assert_eq!(send_slot_size(4, 220), 320);
    assert_eq!(recv_slot_size(1), 64);
    assert_eq!(recv_slot_size(4), 128);
}
