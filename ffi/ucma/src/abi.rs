//! The ucma ABI 4 as bytes: command numbers, the size of each command's
//! body (after the 8-byte header), and the responses the kernel writes
//! (`rdma_user_cm.h`, `ib_user_verbs.h`, `ib_user_sa.h`; offsets checked
//! against the x86_64 headers, see the tests).

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use rxu_abi::proto::cm::RouteInfo;
use rxu_abi::proto::{AhAttr, QpAttr};

/// `RDMA_USER_CM_CMD_*`.
pub mod cmd {
    pub const CREATE_ID: u32 = 0;
    pub const DESTROY_ID: u32 = 1;
    pub const BIND_IP: u32 = 2;
    pub const RESOLVE_IP: u32 = 3;
    pub const RESOLVE_ROUTE: u32 = 4;
    pub const QUERY_ROUTE: u32 = 5;
    pub const CONNECT: u32 = 6;
    pub const LISTEN: u32 = 7;
    pub const ACCEPT: u32 = 8;
    pub const REJECT: u32 = 9;
    pub const DISCONNECT: u32 = 10;
    pub const INIT_QP_ATTR: u32 = 11;
    pub const GET_EVENT: u32 = 12;
    pub const GET_OPTION: u32 = 13;
    pub const SET_OPTION: u32 = 14;
    pub const NOTIFY: u32 = 15;
    pub const JOIN_IP_MCAST: u32 = 16;
    pub const LEAVE_MCAST: u32 = 17;
    pub const MIGRATE_ID: u32 = 18;
    pub const QUERY: u32 = 19;
    pub const BIND: u32 = 20;
    pub const RESOLVE_ADDR: u32 = 21;
    pub const JOIN_MCAST: u32 = 22;
    /// The kernel's table size: a command at or above it is EINVAL.
    pub const COUNT: u32 = 23;
}

/// `struct rdma_ucm_cmd_hdr`.
pub const HDR_LEN: usize = 8;

/// Bytes of each command's body the kernel copies in (`sizeof cmd`);
/// None for commands without a handler here.
pub const fn body_len(c: u32) -> Option<usize> {
    Some(match c {
        cmd::CREATE_ID => 24,
        cmd::DESTROY_ID => 16,
        cmd::BIND_IP => 40,
        cmd::RESOLVE_IP => 64,
        cmd::RESOLVE_ROUTE => 8,
        cmd::QUERY_ROUTE => 16,
        cmd::CONNECT => 288,
        cmd::LISTEN => 8,
        cmd::ACCEPT => 296,
        cmd::REJECT => 264,
        cmd::DISCONNECT => 4,
        cmd::INIT_QP_ATTR => 16,
        cmd::GET_EVENT => 8,
        cmd::SET_OPTION => 24,
        cmd::NOTIFY => 8,
        cmd::JOIN_IP_MCAST => 48,
        cmd::LEAVE_MCAST => 16,
        cmd::MIGRATE_ID => 16,
        _ => return None,
    })
}

/// `struct rdma_ucm_conn_param`.
pub const CONN_PARAM_LEN: usize = 272;
/// `RDMA_MAX_PRIVATE_DATA`.
pub const MAX_PRIVATE_DATA: usize = 256;
/// `struct rdma_ucm_event_resp`; the kernel accepts `out` down to
/// [`EVENT_RESP_MIN`] (old 32-bit libraries without reserved + ece).
pub const EVENT_RESP_LEN: usize = 336;
pub const EVENT_RESP_MIN: usize = 324;
/// `struct rdma_ucm_query_route_resp`; `out` must reach `ibdev_index`.
pub const QUERY_ROUTE_RESP_LEN: usize = 208;
pub const QUERY_ROUTE_RESP_MIN: usize = 200;
/// `struct ib_uverbs_qp_attr`.
pub const QP_ATTR_LEN: usize = 144;
/// `struct sockaddr_in6`, the address slot of the IP commands.
pub const SOCKADDR_IN6_LEN: usize = 28;
/// The kernel's `max_backlog` default (sysctl net.rdma_ucm.max_backlog).
pub const MAX_BACKLOG: i32 = 1024;
/// `IB_QPS_ERR`: the largest QP state INIT_QP_ATTR accepts.
pub const IB_QPS_ERR: u32 = 6;
/// `IB_CM_REJ_CONSUMER_DEFINED` and `IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED`.
pub const REJ_CONSUMER_DEFINED: u8 = 28;
pub const REJ_VENDOR_OPTION_NOT_SUPPORTED: u8 = 35;
/// `RDMA_OPTION_*` levels and names.
pub const OPTION_LEVEL_ID: u32 = 0;
pub const OPTION_LEVEL_IB: u32 = 1;
pub const OPTION_ID_TOS: u32 = 0;
pub const OPTION_ID_REUSEADDR: u32 = 1;
pub const OPTION_ID_AFONLY: u32 = 2;
pub const OPTION_ID_ACK_TIMEOUT: u32 = 3;

/// Little helpers over a byte slice known to be long enough.
pub fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

pub fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().unwrap_or([0; 4]))
}

pub fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]))
}

fn put(b: &mut [u8], at: usize, v: &[u8]) {
    b[at..at + v.len()].copy_from_slice(v);
}

/// The address in a `sockaddr_in6`-sized slot: None for an unknown family
/// (the kernel's `rdma_addr_size_in6` == 0), `Some(None)` for family 0.
pub fn parse_sockaddr(b: &[u8]) -> Option<Option<SocketAddr>> {
    let family = i32::from(u16_at(b, 0));
    let port = u16::from_be_bytes([b[2], b[3]]);
    match family {
        0 => Some(None),
        libc::AF_INET => {
            let ip = Ipv4Addr::new(b[4], b[5], b[6], b[7]);
            Some(Some(SocketAddr::V4(SocketAddrV4::new(ip, port))))
        }
        libc::AF_INET6 => {
            let flow = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
            let mut ip = [0u8; 16];
            ip.copy_from_slice(&b[8..24]);
            let scope = u32_at(b, 24);
            Some(Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(ip),
                port,
                flow,
                scope,
            ))))
        }
        _ => None,
    }
}

/// Writes `a` as `sockaddr_in` / `sockaddr_in6` at the start of `b`
/// (28 bytes, zeroed first).
pub fn emit_sockaddr(b: &mut [u8], a: Option<&SocketAddr>) {
    b[..SOCKADDR_IN6_LEN].fill(0);
    match a {
        None => {}
        Some(SocketAddr::V4(v4)) => {
            put(b, 0, &(libc::AF_INET as u16).to_ne_bytes());
            put(b, 2, &v4.port().to_be_bytes());
            put(b, 4, &v4.ip().octets());
        }
        Some(SocketAddr::V6(v6)) => {
            put(b, 0, &(libc::AF_INET6 as u16).to_ne_bytes());
            put(b, 2, &v6.port().to_be_bytes());
            put(b, 4, &v6.flowinfo().to_be_bytes());
            put(b, 8, &v6.ip().octets());
            put(b, 24, &v6.scope_id().to_ne_bytes());
        }
    }
}

/// The GID of an IP address as RoCE uses it (IPv4-mapped for IPv4).
pub fn ip_gid(a: &SocketAddr) -> [u8; 16] {
    match a {
        SocketAddr::V4(v4) => v4.ip().to_ipv6_mapped().octets(),
        SocketAddr::V6(v6) => v6.ip().octets(),
    }
}

/// `IB_SA_EQ`: the selector value of an exact path record field.
const IB_SA_EQ: u8 = 2;

/// `struct ib_user_path_rec` (64 bytes) of a resolved RoCE route, as the
/// kernel's `ib_copy_path_rec_to_user` fills it.
fn emit_path_rec(b: &mut [u8], r: &RouteInfo) {
    put(b, 0, &r.dgid);
    put(b, 16, &r.sgid);
    // dlid, slid, raw_traffic: 0 on RoCE.
    put(b, 40, &r.flow_label.to_be_bytes());
    put(b, 44, &1u32.to_ne_bytes()); // reversible
    put(b, 48, &u32::from(r.mtu).to_ne_bytes());
    put(b, 52, &r.pkey.to_be_bytes());
    b[54] = r.hop_limit;
    b[55] = r.traffic_class;
    b[56] = 1; // numb_path
    b[57] = r.sl;
    b[58] = IB_SA_EQ; // mtu_selector
    b[59] = IB_SA_EQ; // rate_selector
    b[60] = r.rate;
    b[61] = IB_SA_EQ; // packet_life_time_selector
    b[62] = r.packet_life_time;
}

/// What QUERY_ROUTE reports about one id.
pub struct RouteView<'a> {
    pub src: Option<&'a SocketAddr>,
    pub dst: Option<&'a SocketAddr>,
    /// None while the id has no device (unbound or a wildcard listener).
    pub route: Option<&'a RouteInfo>,
}

/// `struct rdma_ucm_query_route_resp`.
pub fn query_route_resp(v: &RouteView<'_>) -> [u8; QUERY_ROUTE_RESP_LEN] {
    let mut b = [0u8; QUERY_ROUTE_RESP_LEN];
    emit_sockaddr(&mut b[136..], v.src);
    emit_sockaddr(&mut b[164..], v.dst);
    let Some(r) = v.route else {
        return b;
    };
    // The kernel copies the device's __be64 node_guid as is.
    put(&mut b, 0, &r.node_guid.to_be_bytes());
    if r.num_paths == 0 {
        // Before route resolution: GIDs of the addresses, the default P_Key.
        if let Some(d) = v.dst {
            put(&mut b, 8, &ip_gid(d));
        }
        if let Some(s) = v.src {
            put(&mut b, 24, &ip_gid(s));
        }
        put(&mut b, 8 + 52, &0xffffu16.to_be_bytes());
    } else {
        emit_path_rec(&mut b[8..72], r);
    }
    put(&mut b, 192, &r.num_paths.min(1).to_ne_bytes());
    b[196] = r.port_num;
    // The device's kernel index is unknown here: -1, as librdmacm presets.
    put(&mut b, 200, &u32::MAX.to_ne_bytes());
    b
}

/// `struct ib_uverbs_ah_attr` (32 bytes).
pub fn emit_ah_attr(b: &mut [u8], a: &AhAttr) {
    put(b, 0, &a.dgid);
    put(b, 16, &a.flow_label.to_ne_bytes());
    b[20] = a.sgid_index;
    b[21] = a.hop_limit;
    b[22] = a.traffic_class;
    // dlid 0 on RoCE.
    b[26] = a.sl;
    b[29] = u8::from(a.is_global);
    b[30] = a.port_num;
}

/// `struct ib_uverbs_qp_attr` (144 bytes) of INIT_QP_ATTR.
pub fn qp_attr_resp(mask: u32, a: &QpAttr) -> [u8; QP_ATTR_LEN] {
    let mut b = [0u8; QP_ATTR_LEN];
    put(&mut b, 0, &mask.to_ne_bytes());
    put(&mut b, 4, &u32::from(a.qp_state).to_ne_bytes());
    put(&mut b, 8, &u32::from(a.cur_qp_state).to_ne_bytes());
    put(&mut b, 12, &u32::from(a.path_mtu).to_ne_bytes());
    put(&mut b, 20, &a.qkey.to_ne_bytes());
    put(&mut b, 24, &a.rq_psn.to_ne_bytes());
    put(&mut b, 28, &a.sq_psn.to_ne_bytes());
    put(&mut b, 32, &a.dest_qp_num.to_ne_bytes());
    put(&mut b, 36, &a.qp_access_flags.to_ne_bytes());
    emit_ah_attr(&mut b[40..72], &a.ah);
    put(&mut b, 104, &a.cap.max_send_wr.to_ne_bytes());
    put(&mut b, 108, &a.cap.max_recv_wr.to_ne_bytes());
    put(&mut b, 112, &a.cap.max_send_sge.to_ne_bytes());
    put(&mut b, 116, &a.cap.max_recv_sge.to_ne_bytes());
    put(&mut b, 120, &a.cap.max_inline_data.to_ne_bytes());
    put(&mut b, 124, &a.pkey_index.to_ne_bytes());
    b[129] = a.sq_draining;
    b[130] = a.max_rd_atomic;
    b[131] = a.max_dest_rd_atomic;
    b[132] = a.min_rnr_timer;
    b[133] = a.port_num;
    b[134] = a.timeout;
    b[135] = a.retry_cnt;
    b[136] = a.rnr_retry;
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockaddr_round_trips() {
        for a in [
            "10.1.2.3:7174".parse::<SocketAddr>().unwrap(),
            "[fe80::1%3]:18515".parse().unwrap(),
            "[::1]:0".parse().unwrap(),
        ] {
            let mut b = [0xaau8; 28];
            emit_sockaddr(&mut b, Some(&a));
            assert_eq!(parse_sockaddr(&b), Some(Some(a)));
        }
        let mut b = [0u8; 28];
        assert_eq!(parse_sockaddr(&b), Some(None), "family 0");
        b[0] = 27; // AF_IB does not fit the in6 slot
        assert_eq!(parse_sockaddr(&b), None);
    }

    #[test]
    fn ipv4_sockaddr_bytes() {
        let mut b = [0u8; 28];
        emit_sockaddr(&mut b, Some(&"127.0.0.2:7174".parse().unwrap()));
        assert_eq!(&b[..8], &[2, 0, 0x1c, 0x06, 127, 0, 0, 2]);
    }

    #[test]
    fn query_route_layout() {
        let route = RouteInfo {
            node_guid: 0x0011_2233_4455_6677,
            port_num: 1,
            sgid: [1; 16],
            dgid: [2; 16],
            pkey: 0xffff,
            mtu: 3,
            hop_limit: 64,
            traffic_class: 0x20,
            flow_label: 0x12345,
            sl: 0,
            packet_life_time: 18,
            rate: 7,
            num_paths: 1,
        };
        let src: SocketAddr = "127.0.0.1:1000".parse().unwrap();
        let dst: SocketAddr = "127.0.0.2:7174".parse().unwrap();
        let b = query_route_resp(&RouteView {
            src: Some(&src),
            dst: Some(&dst),
            route: Some(&route),
        });
        assert_eq!(&b[..8], &[0, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77]);
        assert_eq!(&b[8..24], &[2; 16], "dgid");
        assert_eq!(&b[24..40], &[1; 16], "sgid");
        assert_eq!(&b[48..52], &0x12345u32.to_be_bytes(), "flow label");
        assert_eq!(u32_at(&b, 56), 3, "mtu");
        assert_eq!(&b[60..62], &[0xff, 0xff], "pkey");
        assert_eq!((b[62], b[63]), (64, 0x20));
        assert_eq!((b[68], b[70]), (7, 18), "rate, lifetime");
        assert_eq!(parse_sockaddr(&b[136..]), Some(Some(src)));
        assert_eq!(parse_sockaddr(&b[164..]), Some(Some(dst)));
        assert_eq!(u32_at(&b, 192), 1);
        assert_eq!(b[196], 1);
        assert_eq!(u32_at(&b, 200), u32::MAX);
    }

    #[test]
    fn unresolved_route_reports_address_gids() {
        let route = RouteInfo {
            node_guid: 5,
            port_num: 1,
            ..Default::default()
        };
        let src: SocketAddr = "127.0.0.1:1000".parse().unwrap();
        let b = query_route_resp(&RouteView {
            src: Some(&src),
            dst: None,
            route: Some(&route),
        });
        assert_eq!(&b[24..40], &ip_gid(&src));
        assert_eq!(&b[60..62], &[0xff, 0xff]);
        assert_eq!(u32_at(&b, 192), 0);
        let none = query_route_resp(&RouteView {
            src: Some(&src),
            dst: None,
            route: None,
        });
        assert_eq!(&none[..8], &[0; 8], "no device: node_guid 0");
    }

    #[test]
    fn qp_attr_layout() {
        let a = QpAttr {
            qp_state: 3,
            path_mtu: 3,
            rq_psn: 0x111,
            sq_psn: 0x222,
            dest_qp_num: 0x33,
            qp_access_flags: 0xe,
            max_rd_atomic: 4,
            max_dest_rd_atomic: 5,
            timeout: 19,
            retry_cnt: 7,
            rnr_retry: 6,
            port_num: 1,
            ah: AhAttr {
                dgid: [9; 16],
                hop_limit: 64,
                is_global: true,
                port_num: 1,
                ..Default::default()
            },
            ..Default::default()
        };
        let b = qp_attr_resp(0x129181, &a);
        assert_eq!(u32_at(&b, 0), 0x129181);
        assert_eq!(u32_at(&b, 4), 3);
        assert_eq!(u32_at(&b, 12), 3);
        assert_eq!(u32_at(&b, 24), 0x111);
        assert_eq!(u32_at(&b, 28), 0x222);
        assert_eq!(u32_at(&b, 32), 0x33);
        assert_eq!(u32_at(&b, 36), 0xe);
        assert_eq!(&b[40..56], &[9; 16]);
        assert_eq!((b[61], b[69], b[70]), (64, 1, 1));
        assert_eq!(
            (b[130], b[131], b[133], b[134], b[135], b[136]),
            (4, 5, 1, 19, 7, 6)
        );
    }
}
