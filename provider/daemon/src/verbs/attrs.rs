//! What `ibv_query_device` and `ibv_query_port` report: rxu's own limits
//! (see [`super::limits`]) and, where a figure is a matter of convention,
//! what rxe reports, so programs tuned on rxe see the same device.

use super::limits::*;
use super::{gid_table, DeviceFacts};
use rxu_abi::proto::{DeviceAttr, PortAttr};
use transport::qp::Mtu;

/// IEEE OUI of the vendor. rxu, like rxe, has none and reports rxe's
/// 0xFFFFFF ("no OUI"); vendor_part_id and hw_ver are 0, as rxe's.
pub const VENDOR_ID: u32 = 0xFF_FFFF;
pub const VENDOR_PART_ID: u32 = 0;
pub const HW_VER: u32 = 0;

/// `enum ibv_device_cap_flags` bits rxu has.
pub mod cap {
    /// create_ah refuses an address on another port than 1.
    pub const UD_AV_PORT_ENFORCE: u32 = 1 << 6;
    /// IBV_EVENT_PORT_ACTIVE (and PORT_ERR) when the netdev comes up
    /// (goes down).
    pub const PORT_ACTIVE_EVENT: u32 = 1 << 10;
    /// sys_image_guid is meaningful (== node GUID).
    pub const SYS_IMAGE_GUID: u32 = 1 << 11;
    /// The RC responder sends RNR NAKs when no receive is posted.
    pub const RC_RNR_NAK_GEN: u32 = 1 << 12;
    /// `ibv_modify_srq` with IBV_SRQ_MAX_WR.
    pub const SRQ_RESIZE: u32 = 1 << 13;
    /// Memory windows (`ibv_alloc_mw`, type 1).
    pub const MEM_WINDOW: u32 = 1 << 17;
    /// XRC: domains, XRC SRQs, XRC_SEND and XRC_RECV QPs.
    pub const XRC: u32 = 1 << 20;
    /// Type 2B windows: bound to a QP by a BIND_MW work request.
    pub const MEM_WINDOW_TYPE_2B: u32 = 1 << 24;
}
/// Only what rxu does: no fast registration, no alternate paths, no
/// P_Key/Q_Key violation counters (rxe claims several of these; a program
/// that relies on a flag must find the feature). Windows are type 1 and
/// 2B, the flags later kernels' rxe reports (6.1's also claims 2A, whose
/// windows are not tied to a QP; rxe's windows never were 2A).
pub const DEVICE_CAP_FLAGS: u32 = cap::UD_AV_PORT_ENFORCE
    | cap::PORT_ACTIVE_EVENT
    | cap::SYS_IMAGE_GUID
    | cap::RC_RNR_NAK_GEN
    | cap::SRQ_RESIZE
    | cap::MEM_WINDOW
    | cap::XRC
    | cap::MEM_WINDOW_TYPE_2B;

/// `enum ibv_port_state`.
pub const PORT_DOWN: u8 = 1;
pub const PORT_ACTIVE: u8 = 4;
/// Physical port states as sysfs and ibv_devinfo name them.
pub const PHYS_DISABLED: u8 = 3;
pub const PHYS_LINK_UP: u8 = 5;
/// `IBV_LINK_LAYER_ETHERNET`.
pub const LINK_LAYER_ETHERNET: u8 = 2;
/// 1X (`IBV_WIDTH_1X` = 1) at EDR (32, 25 Gb/s per lane): the device node
/// writes the same rate ("25 Gb/sec (1X EDR)"); ibv_devinfo prints
/// "1X (1)" and "25.0 Gbps (32)".
pub const ACTIVE_WIDTH: u8 = 1;
pub const ACTIVE_SPEED: u8 = 32;

/// The device attributes.
pub fn device_attr(f: &DeviceFacts) -> DeviceAttr {
    DeviceAttr {
        fw_ver: env!("CARGO_PKG_VERSION").to_owned(),
        node_guid: f.node_guid,
        sys_image_guid: f.node_guid,
        max_mr_size: MAX_MR_SIZE,
        page_size_cap: PAGE_SIZE_CAP,
        vendor_id: VENDOR_ID,
        vendor_part_id: VENDOR_PART_ID,
        hw_ver: HW_VER,
        max_qp: MAX_QP,
        max_qp_wr: MAX_QP_WR,
        device_cap_flags: DEVICE_CAP_FLAGS,
        max_sge: MAX_SGE,
        max_sge_rd: MAX_SGE_RD,
        max_cq: MAX_CQ,
        max_cqe: MAX_CQE,
        max_mr: MAX_MR,
        max_mw: MAX_MW,
        max_pd: MAX_PD,
        max_qp_rd_atom: MAX_QP_RD_ATOM.into(),
        // No end-to-end contexts (RD is not supported).
        max_ee_rd_atom: 0,
        max_res_rd_atom: MAX_RES_RD_ATOM,
        max_qp_init_rd_atom: MAX_QP_INIT_RD_ATOM.into(),
        atomic_cap: ATOMIC_HCA,
        max_ah: MAX_AH,
        max_srq: MAX_SRQ,
        max_srq_wr: MAX_SRQ_WR,
        max_srq_sge: MAX_SRQ_SGE,
        max_pkeys: MAX_PKEYS,
        local_ca_ack_delay: LOCAL_CA_ACK_DELAY,
        phys_port_cnt: 1,
        max_inline_data: MAX_INLINE_DATA,
    }
}

/// Active MTU for a netdev MTU, as rxe sets it: the largest IB MTU whose
/// packets fit (netdev MTU - 80, rounded down), 256 if none does.
pub fn active_mtu(netdev_mtu: u32) -> u8 {
    let m = usize::try_from(netdev_mtu).unwrap_or(usize::MAX);
    Mtu::for_netdev_mtu(m).map_or(Mtu::M256 as u8, |m| m as u8)
}

/// The port attributes. The GID table is the device node's (IPv4 first,
/// duplicates dropped): libibverbs reads GIDs from the tree, so the two
/// must agree.
pub fn port_attr(f: &DeviceFacts) -> PortAttr {
    let mut gids = gid_table(&f.addrs);
    gids.truncate(GID_TBL_LEN as usize);
    PortAttr {
        state: if f.port_up { PORT_ACTIVE } else { PORT_DOWN },
        max_mtu: MAX_MTU,
        active_mtu: active_mtu(f.netdev_mtu),
        gid_tbl_len: GID_TBL_LEN,
        port_cap_flags: PORT_CAP_FLAGS,
        max_msg_sz: MAX_MSG_SZ,
        pkey_tbl_len: MAX_PKEYS,
        active_width: ACTIVE_WIDTH,
        active_speed: ACTIVE_SPEED,
        phys_state: if f.port_up {
            PHYS_LINK_UP
        } else {
            PHYS_DISABLED
        },
        link_layer: LINK_LAYER_ETHERNET,
        netdev: f.netdev.clone(),
        gids,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::devnode::{PortDesc, Speed};
    use rxu_abi::proto::abi::{recv_slot_size, send_slot_size, CQE_SIZE};
    use rxu_abi::proto::{encode, Response, MAX_MSG};
    use rxu_abi::ring::layout::Geometry;
    use std::net::IpAddr;

    fn facts(addrs: &[&str], mtu: u32, up: bool) -> DeviceFacts {
        DeviceFacts {
            name: "rxu0".into(),
            netdev: "lo".into(),
            addrs: addrs.iter().map(|a| a.parse().unwrap()).collect(),
            netdev_mtu: mtu,
            node_guid: 0x0278_7500_0000_0001,
            port_up: up,
        }
    }

    #[test]
    fn device_attr_reports_the_limits() {
        let d = device_attr(&facts(&["127.0.0.1"], 65536, true));
        assert_eq!(d.fw_ver, env!("CARGO_PKG_VERSION"));
        assert_eq!(
            (d.node_guid, d.sys_image_guid),
            (0x0278_7500_0000_0001, 0x0278_7500_0000_0001)
        );
        assert_eq!((d.vendor_id, d.vendor_part_id, d.hw_ver), (0xFF_FFFF, 0, 0));
        assert_eq!(
            (d.max_qp, d.max_qp_wr, d.max_cq, d.max_cqe),
            (MAX_QP, MAX_QP_WR, MAX_CQ, MAX_CQE)
        );
        assert_eq!((d.max_sge, d.max_sge_rd, d.max_inline_data), (32, 32, 512));
        assert_eq!(
            (d.max_mr, d.max_pd, d.max_mr_size),
            (MAX_MR, MAX_PD, u64::MAX)
        );
        assert_eq!(
            (d.max_srq, d.max_srq_wr, d.max_srq_sge),
            (MAX_SRQ, MAX_SRQ_WR, MAX_SRQ_SGE)
        );
        assert_eq!(
            (d.max_qp_rd_atom, d.max_qp_init_rd_atom, d.max_ee_rd_atom),
            (128, 128, 0)
        );
        assert_eq!(d.max_res_rd_atom, MAX_QP * 128);
        assert_eq!(
            (
                d.atomic_cap,
                d.max_pkeys,
                d.local_ca_ack_delay,
                d.phys_port_cnt
            ),
            (1, 1, 15, 1)
        );
        // UD_AV_PORT_ENFORCE, PORT_ACTIVE_EVENT, SYS_IMAGE_GUID,
        // RC_RNR_NAK_GEN, SRQ_RESIZE, MEM_WINDOW, XRC, MEM_WINDOW_TYPE_2B.
        let want = (1 << 6)
            | (1 << 10)
            | (1 << 11)
            | (1 << 12)
            | (1 << 13)
            | (1 << 17)
            | (1 << 20)
            | (1 << 24);
        assert_eq!(d.device_cap_flags, want);
        assert_eq!(d.max_mw, 0x1_ffff);
        assert_eq!(d.max_ah, 32767);
    }

    #[test]
    fn limits_fit_rings_transport_and_device_node() {
        let sq = send_slot_size(MAX_SGE, MAX_INLINE_DATA);
        assert!(Geometry::new(sq, MAX_QP_WR.next_power_of_two()).is_ok());
        assert!(Geometry::new(recv_slot_size(MAX_SGE), MAX_QP_WR.next_power_of_two()).is_ok());
        let srq = recv_slot_size(MAX_SRQ_SGE);
        assert!(Geometry::new(srq, MAX_SRQ_WR.next_power_of_two()).is_ok());
        assert!(Geometry::new(CQE_SIZE as u32, (MAX_CQE + 1).next_power_of_two()).is_ok());
        assert_eq!(u64::from(MAX_MSG_SZ), transport::qp::MAX_MSG_SIZE);
        assert_eq!(GID_TBL_LEN, transport::verbs::GID_TBL_LEN);
        let node = PortDesc::default();
        assert_eq!(PORT_CAP_FLAGS, node.cap_mask);
        assert_eq!((ACTIVE_WIDTH, node.speed), (node.width, Speed::Edr));
        assert_eq!(ACTIVE_SPEED, 32, "IBV_SPEED_EDR");
    }

    #[test]
    fn active_mtu_as_rxe_sets_it() {
        for (netdev, ib) in [
            (65536, 5),
            (9000, 5),
            (4176, 5),
            (4175, 4),
            (1500, 3),
            (1280, 3),
            (1103, 2),
            (576, 1),
            (300, 1),
            (0, 1),
            (u32::MAX, 5),
        ] {
            assert_eq!(active_mtu(netdev), ib, "netdev MTU {netdev}");
        }
        assert_eq!(port_attr(&facts(&[], 1500, true)).active_mtu, 3);
    }

    #[test]
    fn port_attr_follows_the_facts() {
        let f = facts(&["::1", "10.0.0.2", "10.0.0.1", "10.0.0.2"], 65536, true);
        let p = port_attr(&f);
        assert_eq!((p.state, p.phys_state, p.link_layer), (4, 5, 2));
        assert_eq!((p.max_mtu, p.active_mtu, p.pkey_tbl_len), (5, 5, 1));
        assert_eq!(
            (p.gid_tbl_len, p.port_cap_flags, p.max_msg_sz),
            (16, 1 << 16, 1 << 30)
        );
        assert_eq!((p.active_width, p.active_speed), (1, 32));
        assert_eq!(p.netdev, "lo");
        let want: Vec<[u8; 16]> = ["10.0.0.2", "10.0.0.1", "::1"]
            .iter()
            .map(|a| super::super::gid_of(a.parse::<IpAddr>().unwrap()))
            .collect();
        assert_eq!(p.gids, want, "first IPv4 at index 0, duplicates dropped");

        let down = port_attr(&facts(&["10.0.0.1"], 1500, false));
        assert_eq!((down.state, down.phys_state), (1, 3));

        let many: Vec<String> = (0..40).map(|i| format!("10.0.1.{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let p = port_attr(&facts(&many, 1500, true));
        assert_eq!(p.gids.len(), GID_TBL_LEN as usize);
        assert_eq!(p.gids[0], super::super::gid_of("10.0.1.0".parse().unwrap()));
    }

    #[test]
    fn attributes_fit_one_message() {
        let many: Vec<String> = (0..40).map(|i| format!("2001:db8::{i:x}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let mut f = facts(&many, 9000, true);
        f.netdev = "x".repeat(15);
        assert!(encode(&Response::Port(port_attr(&f))).unwrap().len() < MAX_MSG);
        assert!(encode(&Response::Device(device_attr(&f))).unwrap().len() < MAX_MSG);
    }
}
