//! The rdma_cm part of the control protocol: what the in-process ucma
//! emulator (`librxu-ucma.so`, `ffi/ucma`) asks of a device's rxud, and the
//! event records rxud writes to event channel sockets.
//!
//! A ucma id exists in the process first (`CREATE_ID` needs no device);
//! it reaches a daemon when it gets an address on that daemon's device
//! ([`CmRequest::Bind`]). From then on the daemon owns everything the
//! network sees: the port, listeners, comm IDs, MADs, timers, TimeWait.
//! Daemon ids (`id`) are scoped to the connection, like every handle.
//!
//! Events: the emulator creates one `SOCK_SEQPACKET` pair per event
//! channel, gives one end to the application as the channel fd and passes
//! the other to each daemon with [`CmRequest::AttachChannel`]. A daemon
//! writes one postcard [`CmEventRecord`] per datagram to it, so the fd is
//! readable exactly when events are queued (poll, epoll, O_NONBLOCK behave
//! as the kernel's). The emulator writes its own records (ADDR_RESOLVED,
//! ROUTE_RESOLVED, ADDR_ERROR) to the same socket.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use super::attr::{AhAttr, QpAttr};
use transport::verbs::QpType;

/// `enum rdma_cm_event_type`.
pub mod event {
    pub const ADDR_RESOLVED: u32 = 0;
    pub const ADDR_ERROR: u32 = 1;
    pub const ROUTE_RESOLVED: u32 = 2;
    pub const ROUTE_ERROR: u32 = 3;
    pub const CONNECT_REQUEST: u32 = 4;
    pub const CONNECT_RESPONSE: u32 = 5;
    pub const CONNECT_ERROR: u32 = 6;
    pub const UNREACHABLE: u32 = 7;
    pub const REJECTED: u32 = 8;
    pub const ESTABLISHED: u32 = 9;
    pub const DISCONNECTED: u32 = 10;
    pub const DEVICE_REMOVAL: u32 = 11;
    pub const MULTICAST_JOIN: u32 = 12;
    pub const MULTICAST_ERROR: u32 = 13;
    pub const ADDR_CHANGE: u32 = 14;
    pub const TIMEWAIT_EXIT: u32 = 15;
}

/// `enum rdma_port_space`.
pub mod port_space {
    pub const IPOIB: u16 = 0x0002;
    pub const TCP: u16 = 0x0106;
    pub const UDP: u16 = 0x0111;
    pub const IB: u16 = 0x013F;
}

/// `RDMA_UDP_QKEY`: the Q_Key of UD ids unless the application sets one.
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// Connection parameters (`struct rdma_conn_param` as ucma carries it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnParam {
    /// The user's private data (the daemon adds the rdma_cm IP header).
    pub private_data: Vec<u8>,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
    /// UD only.
    pub qkey: u32,
}

/// Enhanced Connection Establishment fields (carried, not interpreted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ece {
    pub vendor_id: u32,
    pub attr_mod: u32,
}

/// What `QUERY_ROUTE` reports for an id, in host terms.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouteInfo {
    /// The device's node GUID (librdmacm finds the `ibv_context` by it).
    pub node_guid: u64,
    pub port_num: u8,
    /// Own GID and the peer's (IPv4-mapped or IPv6); dgid zero if unknown.
    pub sgid: [u8; 16],
    pub dgid: [u8; 16],
    pub pkey: u16,
    /// IB MTU enum (1 = 256 .. 5 = 4096).
    pub mtu: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub flow_label: u32,
    pub sl: u8,
    pub packet_life_time: u8,
    /// IB rate enum.
    pub rate: u8,
    /// 0 before route resolution, 1 after (the kernel's `num_paths`).
    pub num_paths: u32,
}

/// `rdma_set_option` values the daemon needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CmOption {
    Tos(u8),
    ReuseAddr(bool),
    AfOnly(bool),
    AckTimeout(u8),
}

/// A request of the ucma emulator, wrapped in `Request::Cm`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CmRequest {
    /// fds: [0] the daemon's end of event channel `channel` (a
    /// SOCK_SEQPACKET socket it only writes [`CmEventRecord`]s to). `tag`
    /// is written back in every record, so one channel can serve ids of
    /// several devices.
    AttachChannel {
        channel: u32,
        tag: u32,
    },
    /// What the emulator needs to pick a device for an address: reply
    /// [`CmResponse::Device`].
    QueryDevice,
    /// Forget a channel (the application destroyed it).
    DetachChannel {
        channel: u32,
    },
    /// Creates an id on this device bound to `addr` (port 0: an ephemeral
    /// port from the IP local range; a wildcard address binds the port on
    /// this device's addresses). Errors as `rdma_bind_addr`: EADDRINUSE and
    /// EADDRNOTAVAIL (the port is taken), ENODEV (not an address of this
    /// device), EINVAL.
    /// Reply: [`CmResponse::Bound`].
    Bind {
        channel: u32,
        ps: u16,
        qp_type: QpType,
        addr: SocketAddr,
        reuseaddr: bool,
        afonly: bool,
        tos: Option<u8>,
    },
    /// `rdma_resolve_addr` reached this device: the id's peer is `dst`.
    /// Reply: [`CmResponse::Route`] (the emulator then reports
    /// ADDR_RESOLVED and, on RESOLVE_ROUTE, ROUTE_RESOLVED).
    Resolve {
        id: u32,
        dst: SocketAddr,
    },
    Listen {
        id: u32,
        backlog: i32,
    },
    /// Sends a REQ (RC/UC) or SIDR_REQ (UD ids).
    Connect {
        id: u32,
        param: ConnParam,
        ece: Ece,
    },
    /// Passive side: sends REP (or SIDR_REP). `param: None` is the active
    /// side's "send RTU" (librdmacm's ACCEPT with `valid = 0`).
    Accept {
        id: u32,
        param: Option<ConnParam>,
        ece: Ece,
    },
    /// `reason` 0: consumer defined (IB 28); 35: ECE not supported.
    Reject {
        id: u32,
        private_data: Vec<u8>,
        reason: u8,
    },
    Disconnect {
        id: u32,
    },
    /// Reply: [`CmResponse::QpAttr`].
    InitQpAttr {
        id: u32,
        state: u8,
    },
    SetOption {
        id: u32,
        option: CmOption,
    },
    /// `rdma_notify` (accepted and ignored, as on RoCE).
    Notify {
        id: u32,
        event: u32,
    },
    /// Further events of `id` go to `channel`.
    Migrate {
        id: u32,
        channel: u32,
    },
    /// Destroys the id: DREQ / REJ as the kernel would send.
    Destroy {
        id: u32,
    },
    JoinMcast {
        id: u32,
        addr: SocketAddr,
        send_only: bool,
    },
    LeaveMcast {
        id: u32,
        addr: SocketAddr,
    },
}

/// A reply to a [`CmRequest`] (errors are `Response::Error`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CmResponse {
    Ok,
    /// The device's name, node GUID, netdev and addresses (its GIDs).
    Device {
        name: String,
        node_guid: u64,
        netdev: String,
        addrs: Vec<std::net::IpAddr>,
    },
    Bound {
        id: u32,
        addr: SocketAddr,
        route: RouteInfo,
    },
    Route(RouteInfo),
    /// `mask` in `enum ibv_qp_attr_mask` bits.
    QpAttr {
        mask: u32,
        attr: QpAttr,
    },
}

/// The parameters of an event (conn or UD, as the event says).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CmEventParam {
    /// Delivered as the kernel does: the whole slot of the message (56 for
    /// a REQ, 196 for a REP, 148 for a REJ ...), zero padded.
    pub private_data: Vec<u8>,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
    pub qkey: u32,
    /// UD events: the address vector to reach the peer.
    pub ah: Option<AhAttr>,
}

/// One event, as a daemon (or the emulator) writes it to a channel.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CmEventRecord {
    /// The `tag` of the channel's `AttachChannel`.
    pub tag: u32,
    /// The daemon id the event concerns (the listener for CONNECT_REQUEST).
    pub id: u32,
    /// `event::*`.
    pub event: u32,
    /// 0, a negative errno, or the IB reject reason for REJECTED.
    pub status: i32,
    /// CONNECT_REQUEST: the new id (on the listener's channel).
    pub new_id: u32,
    pub param: CmEventParam,
    pub ece: Ece,
    /// CONNECT_REQUEST: the new id's addresses and route.
    pub local: Option<SocketAddr>,
    pub remote: Option<SocketAddr>,
    pub route: Option<RouteInfo>,
    /// MULTICAST_JOIN / MULTICAST_ERROR: the group.
    pub mcast: Option<SocketAddr>,
}

/// One rdma_cm id, for `rxu status`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CmIdStatus {
    pub id: u32,
    /// "TCP", "UDP", "IB", or the number.
    pub ps: String,
    /// The state's name (e.g. "listen", "established").
    pub state: String,
    pub local: Option<SocketAddr>,
    pub remote: Option<SocketAddr>,
    /// The QP the connection carries (0 before connect / accept).
    pub qpn: u32,
}
