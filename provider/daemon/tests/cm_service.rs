//! rxud's rdma_cm service end to end, spoken to with raw protocol
//! messages as the ucma emulator speaks them (no librdmacm): two daemons
//! on 127.0.79.1 and 127.0.79.2 carry a connection through REQ / REP /
//! RTU over UDP, then DREQ / DREP; a connect to a port nobody listens on
//! is rejected with reason 8; a client that goes away takes its ids with
//! it and its peer hears DISCONNECTED.

use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use rxu_abi::proto::cm::{event, port_space, CmEventRecord, CmRequest, CmResponse, ConnParam, Ece};
use rxu_abi::proto::fdpass::{recv_msg, send_msg};
use rxu_abi::proto::{self, QpType, Request, Response, MAX_MSG};
use rxu_testkit::runtime::scratch_dir;
use rxu_testkit::sock::connect;
use rxu_testkit::{seqpacket_pair, Daemon};

fn start(tag: &str, addr: &str, port: u16) -> Daemon {
    Daemon::spawn(&format!("rxut{tag}"), addr.parse::<IpAddr>().unwrap())
        .args(&[
            "--port",
            &port.to_string(),
            "--cm-response-timeout",
            "12",
            "--cm-retries",
            "3",
        ])
        .own_dir(scratch_dir(&format!("rxud-cm-{tag}")))
        .start()
}

/// A CM client: control connection and one event channel.
struct CmClient {
    sock: OwnedFd,
    events: OwnedFd,
}

impl CmClient {
    fn new(d: &Daemon) -> CmClient {
        Self::with_sndbuf(d, None)
    }

    /// Like `new`, with the daemon's end of the event channel given a
    /// send buffer of `sndbuf` bytes (a reader that falls behind fills it
    /// after a few records).
    fn with_sndbuf(d: &Daemon, sndbuf: Option<libc::c_int>) -> CmClient {
        let sock = connect(&d.socket());
        let hello = Request::CmHello {
            version: proto::PROTO_VERSION,
            pid: std::process::id(),
        };
        assert!(matches!(call(&sock, &hello, &[]), Response::Hello { .. }));
        let (events, theirs) = seqpacket_pair();
        if let Some(n) = sndbuf {
            // SAFETY: setsockopt reads one c_int from a valid pointer.
            let r = unsafe {
                libc::setsockopt(
                    std::os::fd::AsRawFd::as_raw_fd(&theirs),
                    libc::SOL_SOCKET,
                    libc::SO_SNDBUF,
                    (&n as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            assert_eq!(r, 0, "SO_SNDBUF");
        }
        let attach = Request::Cm(CmRequest::AttachChannel {
            channel: 7,
            tag: 42,
        });
        let r = call(&sock, &attach, &[theirs.as_fd()]);
        assert_eq!(r, Response::Cm(CmResponse::Ok));
        CmClient { sock, events }
    }

    fn cm(&self, req: CmRequest) -> Response {
        call(&self.sock, &Request::Cm(req), &[])
    }

    fn ok(&self, req: CmRequest) -> CmResponse {
        match self.cm(req.clone()) {
            Response::Cm(r) => r,
            other => panic!("{req:?} -> {other:?}"),
        }
    }

    fn bind(&self, addr: &str) -> (u32, SocketAddr) {
        let r = self.ok(CmRequest::Bind {
            channel: 7,
            ps: port_space::TCP,
            qp_type: QpType::Rc,
            addr: addr.parse().unwrap(),
            reuseaddr: false,
            afonly: false,
            tos: None,
        });
        match r {
            CmResponse::Bound { id, addr, .. } => (id, addr),
            other => panic!("bind -> {other:?}"),
        }
    }

    /// The next event, within `limit`.
    fn event(&self, limit: Duration) -> CmEventRecord {
        self.try_event(limit)
            .unwrap_or_else(|| panic!("no rdma_cm event within {limit:?}"))
    }

    fn try_event(&self, limit: Duration) -> Option<CmEventRecord> {
        let end = Instant::now() + limit;
        let mut buf = vec![0u8; MAX_MSG];
        loop {
            let r = recv_msg(self.events.as_fd(), &mut buf, libc::MSG_DONTWAIT);
            if let Ok((n, _)) = r {
                if n > 0 {
                    let rec: CmEventRecord = proto::decode(&buf[..n]).unwrap();
                    assert_eq!(rec.tag, 42);
                    return Some(rec);
                }
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            let mut pfd = libc::pollfd {
                fd: std::os::fd::AsRawFd::as_raw_fd(&self.events),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = left.as_millis().min(1000) as i32 + 1;
            // SAFETY: one valid pollfd for the duration of the call.
            unsafe { libc::poll(&mut pfd, 1, ms) };
        }
    }
}

fn call(sock: &OwnedFd, req: &Request, fds: &[BorrowedFd<'_>]) -> Response {
    send_msg(sock.as_fd(), &proto::encode(req).unwrap(), fds).unwrap();
    let mut buf = vec![0u8; MAX_MSG];
    let (n, _) = recv_msg(sock.as_fd(), &mut buf, 0).unwrap();
    assert!(n > 0, "daemon closed the connection");
    proto::decode(&buf[..n]).unwrap()
}

/// A device counter, asked over an admin connection.
fn counter(d: &Daemon, name: &str) -> u64 {
    let sock = rxu_testkit::sock::admin(&d.socket()).expect("admin connection");
    let Some(Response::Stats { device, .. }) = rxu_testkit::sock::exchange(&sock, &Request::Stats)
    else {
        panic!("no stats");
    };
    device
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no counter {name}"))
        .value
}

const SEC: Duration = Duration::from_secs(5);

#[test]
fn connect_accept_disconnect_between_two_daemons() {
    let a = start("cm1", "127.0.79.1", 24901);
    let b = start("cm2", "127.0.79.2", 24901);
    let server = CmClient::new(&b);
    let client = CmClient::new(&a);
    let (lid, laddr) = server.bind("127.0.79.2:7174");
    assert_eq!(laddr, "127.0.79.2:7174".parse().unwrap());
    server.ok(CmRequest::Listen {
        id: lid,
        backlog: 4,
    });

    let (cid, caddr) = client.bind("127.0.79.1:0");
    assert_ne!(caddr.port(), 0, "an ephemeral port");
    client.ok(CmRequest::Resolve {
        id: cid,
        dst: laddr,
    });
    let pd: Vec<u8> = b"hello over REQ".to_vec();
    client.ok(CmRequest::Connect {
        id: cid,
        param: ConnParam {
            private_data: pd.clone(),
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            qp_num: 0x123,
            ..ConnParam::default()
        },
        ece: Ece::default(),
    });
    let req = server.event(SEC);
    assert_eq!((req.event, req.id), (event::CONNECT_REQUEST, lid));
    assert_eq!(&req.param.private_data[..pd.len()], &pd[..]);
    assert_eq!(req.param.private_data.len(), 56);
    assert_eq!(req.param.qp_num, 0x123);
    assert_eq!(req.remote, Some(caddr));
    let sid = req.new_id;
    server.ok(CmRequest::Accept {
        id: sid,
        param: Some(ConnParam {
            private_data: b"welcome".to_vec(),
            responder_resources: 1,
            initiator_depth: 1,
            rnr_retry_count: 7,
            qp_num: 0x456,
            ..ConnParam::default()
        }),
        ece: Ece::default(),
    });
    let rep = client.event(SEC);
    assert_eq!((rep.event, rep.id), (event::CONNECT_RESPONSE, cid));
    assert_eq!(rep.param.qp_num, 0x456);
    assert_eq!(&rep.param.private_data[..7], b"welcome");
    // RTR / RTS attributes carry the peer's QPN and PSN.
    match client.ok(CmRequest::InitQpAttr { id: cid, state: 2 }) {
        CmResponse::QpAttr { mask, attr } => {
            assert_eq!(mask, 0x129181);
            assert_eq!(attr.dest_qp_num, 0x456);
        }
        other => panic!("{other:?}"),
    }
    client.ok(CmRequest::Accept {
        id: cid,
        param: None,
        ece: Ece::default(),
    });
    let est = server.event(SEC);
    assert_eq!((est.event, est.id), (event::ESTABLISHED, sid));

    client.ok(CmRequest::Disconnect { id: cid });
    let d = server.event(SEC);
    assert_eq!((d.event, d.id), (event::DISCONNECTED, sid));
    server.ok(CmRequest::Disconnect { id: sid });
    let d = client.event(SEC);
    assert_eq!((d.event, d.id), (event::DISCONNECTED, cid));
    assert!(counter(&a, "cm_req_sent") >= 1);
    assert!(counter(&b, "cm_req_received") >= 1);
    assert!(counter(&b, "cm_rtu_received") >= 1);
    assert!(counter(&a, "cm_dreq_sent") >= 1);
    assert!(counter(&b, "cm_events") >= 3);
}

#[test]
fn no_listener_is_rejected_with_reason_8_and_a_dead_client_disconnects_its_peer() {
    let a = start("cm3", "127.0.79.3", 24902);
    let b = start("cm4", "127.0.79.4", 24902);
    let client = CmClient::new(&a);
    let (cid, _) = client.bind("127.0.79.3:0");
    let dst: SocketAddr = "127.0.79.4:7175".parse().unwrap();
    client.ok(CmRequest::Resolve { id: cid, dst });
    client.ok(CmRequest::Connect {
        id: cid,
        param: ConnParam {
            qp_num: 0x77,
            ..ConnParam::default()
        },
        ece: Ece::default(),
    });
    let rej = client.event(SEC);
    assert_eq!((rej.event, rej.status), (event::REJECTED, 8));

    // A connection, then the server's process "dies" (its socket closes).
    let server = CmClient::new(&b);
    let (lid, laddr) = server.bind("127.0.79.4:7176");
    server.ok(CmRequest::Listen {
        id: lid,
        backlog: 1,
    });
    let (cid, _) = client.bind("127.0.79.3:0");
    client.ok(CmRequest::Resolve {
        id: cid,
        dst: laddr,
    });
    client.ok(CmRequest::Connect {
        id: cid,
        param: ConnParam {
            qp_num: 0x78,
            ..ConnParam::default()
        },
        ece: Ece::default(),
    });
    let req = server.event(SEC);
    server.ok(CmRequest::Accept {
        id: req.new_id,
        param: Some(ConnParam {
            qp_num: 0x79,
            ..ConnParam::default()
        }),
        ece: Ece::default(),
    });
    assert_eq!(client.event(SEC).event, event::CONNECT_RESPONSE);
    client.ok(CmRequest::Accept {
        id: cid,
        param: None,
        ece: Ece::default(),
    });
    assert_eq!(server.event(SEC).event, event::ESTABLISHED);
    drop(server);
    let d = client.event(SEC);
    assert_eq!((d.event, d.id), (event::DISCONNECTED, cid));
    // Its listener went with it: the port can be listened on again.
    let again = CmClient::new(&b);
    let (lid2, _) = again.bind("127.0.79.4:7176");
    again.ok(CmRequest::Listen {
        id: lid2,
        backlog: 1,
    });
    // Another session's id is not reachable.
    let r = client.cm(CmRequest::Destroy { id: lid2 });
    assert!(
        matches!(r, Response::Error { errno, .. } if errno == libc::EINVAL),
        "{r:?}"
    );
}

/// A RoCEv2 UD SEND_ONLY to QP 1 carrying `mad`, with `qkey`, sealed with
/// the ICRC for 127.0.79.6 -> `dst` on `port`.
fn gsi_packet(mad: &[u8], qkey: u32, dst: std::net::Ipv4Addr, port: u16) -> Vec<u8> {
    use transport::wire::icrc::{fill_icrc, IcrcIp};
    use transport::wire::packet::emit_packet;
    use transport::wire::{Bth, Deth, Headers, Opcode};
    let hdr = Headers {
        bth: Bth {
            opcode: Opcode::UD_SEND_ONLY,
            pkey: 0xFFFF,
            dest_qpn: 1,
            ..Bth::default()
        },
        deth: Some(Deth { qkey, src_qpn: 1 }),
        ..Headers::default()
    };
    let mut buf = vec![0u8; 4096];
    let n = emit_packet(&hdr, mad, &mut buf).unwrap();
    buf.truncate(n);
    fill_icrc(
        &IcrcIp::v4([127, 0, 79, 6].into(), dst),
        port,
        port,
        &mut buf,
    )
    .unwrap();
    buf
}

fn req_mad(comm_id: u32, service_id: u64, qpn: u32) -> [u8; rxu_cm::wire::MAD_LEN] {
    use rxu_cm::wire::{CmMad, CmMsg, CmaHeader, Req, ReqPath, REQ_PRIVATE};
    let mut pd = [0u8; REQ_PRIVATE];
    CmaHeader {
        src_port: 40000 + (comm_id % 1000) as u16,
        src: "127.0.79.6".parse().unwrap(),
        dst: "127.0.79.5".parse().unwrap(),
    }
    .emit(&mut pd)
    .unwrap();
    let gid = |a: [u8; 4]| {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&a);
        g
    };
    let mad = CmMad {
        tid: u64::from(comm_id),
        attr_mod: 0,
        msg: CmMsg::Req(Box::new(Req {
            local_comm_id: comm_id,
            vendor_id: 0,
            service_id,
            local_ca_guid: 0x0202_0304_0506_0708,
            local_qkey: 0,
            local_qpn: qpn,
            responder_resources: 1,
            local_eecn: 0,
            initiator_depth: 1,
            remote_eecn: 0,
            remote_cm_response_timeout: 12,
            transport_type: 0,
            flow_control: false,
            starting_psn: 0x1234,
            local_cm_response_timeout: 12,
            retry_count: 7,
            pkey: 0xFFFF,
            path_mtu: 3,
            rdc_exists: false,
            rnr_retry_count: 7,
            max_cm_retries: 3,
            srq: false,
            extended_transport: 0,
            primary: ReqPath {
                local_lid: 0xFFFF,
                remote_lid: 0xFFFF,
                local_gid: gid([127, 0, 79, 6]),
                remote_gid: gid([127, 0, 79, 5]),
                hop_limit: 64,
                local_ack_timeout: 19,
                ..ReqPath::default()
            },
            alternate: ReqPath::default(),
            private_data: pd,
        })),
    };
    let mut out = [0u8; rxu_cm::wire::MAD_LEN];
    rxu_cm::wire::emit(&mad, &mut out);
    out
}

#[test]
fn bad_mads_and_a_req_flood_are_counted_and_harm_no_one() {
    let port = 24903;
    let b = start("cm5", "127.0.79.5", port);
    let a = start("cm7", "127.0.79.7", port);
    let server = CmClient::new(&b);
    let (lid, _) = server.bind("127.0.79.5:7177");
    server.ok(CmRequest::Listen {
        id: lid,
        backlog: 4,
    });
    let (other, other_addr) = server.bind("127.0.79.5:7178");
    server.ok(CmRequest::Listen {
        id: other,
        backlog: 4,
    });

    let raw = std::net::UdpSocket::bind(("127.0.79.6", port)).unwrap();
    let to = ("127.0.79.5", port);
    let dst = [127, 0, 79, 5].into();
    let sid = |p: u16| (u64::from(port_space::TCP) << 16) | u64::from(p);
    let good = req_mad(1, sid(7177), 0x500);
    // Truncated, not CM, unknown attribute, wrong Q_Key, garbage.
    raw.send_to(&gsi_packet(&good[..100], 0x8001_0000, dst, port), to)
        .unwrap();
    let mut not_cm = good;
    not_cm[1] = 0x04;
    raw.send_to(&gsi_packet(&not_cm, 0x8001_0000, dst, port), to)
        .unwrap();
    let mut unknown = good;
    unknown[16..18].copy_from_slice(&0x00ffu16.to_be_bytes());
    raw.send_to(&gsi_packet(&unknown, 0x8001_0000, dst, port), to)
        .unwrap();
    raw.send_to(&gsi_packet(&good, 0x1234_5678, dst, port), to)
        .unwrap();
    raw.send_to(&[0xffu8; 40], to).unwrap();
    // An RTU and a DREQ for comm IDs nobody has.
    let mut rtu = [0u8; rxu_cm::wire::MAD_LEN];
    rxu_cm::wire::emit(
        &rxu_cm::wire::CmMad {
            tid: 9,
            attr_mod: 0,
            msg: rxu_cm::wire::CmMsg::Rtu(Box::new(rxu_cm::wire::Rtu {
                local_comm_id: 77,
                remote_comm_id: 78,
                private_data: [0; rxu_cm::wire::RTU_PRIVATE],
            })),
        },
        &mut rtu,
    );
    raw.send_to(&gsi_packet(&rtu, 0x8001_0000, dst, port), to)
        .unwrap();
    // A flood of REQs to one listener: 200 connections it never accepts.
    for i in 0..200u32 {
        let m = req_mad(1000 + i, sid(7177), 0x600 + i);
        raw.send_to(&gsi_packet(&m, 0x8001_0000, dst, port), to)
            .unwrap();
    }
    // The listener sees at most its backlog of requests.
    let mut requests = 0;
    while let Some(ev) = server.try_event(Duration::from_millis(500)) {
        assert_eq!(ev.event, event::CONNECT_REQUEST);
        requests += 1;
    }
    assert_eq!(requests, 4, "CONNECT_REQUESTs beyond the backlog");
    assert!(counter(&b, "cm_dropped_malformed") >= 3);
    assert!(counter(&b, "gsi_dropped") >= 1);
    assert!(counter(&b, "cm_dropped_backlog") >= 196);
    // Another listener and another daemon are not harmed.
    let client = CmClient::new(&a);
    let (cid, _) = client.bind("127.0.79.7:0");
    client.ok(CmRequest::Resolve {
        id: cid,
        dst: other_addr,
    });
    client.ok(CmRequest::Connect {
        id: cid,
        param: ConnParam {
            qp_num: 0x90,
            ..ConnParam::default()
        },
        ece: Ece::default(),
    });
    let req = server.event(SEC);
    assert_eq!((req.event, req.id), (event::CONNECT_REQUEST, other));
    server.ok(CmRequest::Accept {
        id: req.new_id,
        param: Some(ConnParam {
            qp_num: 0x91,
            ..ConnParam::default()
        }),
        ece: Ece::default(),
    });
    assert_eq!(client.event(SEC).event, event::CONNECT_RESPONSE);
}

fn rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

/// One connect / accept / RTU / disconnect on both sides; returns the
/// client's and the server's ids, destroyed.
fn cycle(client: &CmClient, server: &CmClient, dst: SocketAddr, qpn: u32) {
    let (cid, _) = client.bind("127.0.79.8:0");
    client.ok(CmRequest::Resolve { id: cid, dst });
    client.ok(CmRequest::Connect {
        id: cid,
        param: ConnParam {
            qp_num: qpn,
            ..ConnParam::default()
        },
        ece: Ece::default(),
    });
    let req = server.event(SEC);
    assert_eq!(req.event, event::CONNECT_REQUEST);
    server.ok(CmRequest::Accept {
        id: req.new_id,
        param: Some(ConnParam {
            qp_num: qpn + 1,
            ..ConnParam::default()
        }),
        ece: Ece::default(),
    });
    assert_eq!(client.event(SEC).event, event::CONNECT_RESPONSE);
    client.ok(CmRequest::Accept {
        id: cid,
        param: None,
        ece: Ece::default(),
    });
    assert_eq!(server.event(SEC).event, event::ESTABLISHED);
    client.ok(CmRequest::Disconnect { id: cid });
    assert_eq!(server.event(SEC).event, event::DISCONNECTED);
    server.ok(CmRequest::Disconnect { id: req.new_id });
    assert_eq!(client.event(SEC).event, event::DISCONNECTED);
    client.ok(CmRequest::Destroy { id: cid });
    server.ok(CmRequest::Destroy { id: req.new_id });
}

#[test]
fn a_thousand_connections_leave_nothing_behind() {
    let a = start("cm8", "127.0.79.8", 24904);
    let b = start("cm9", "127.0.79.9", 24904);
    let server = CmClient::new(&b);
    let client = CmClient::new(&a);
    let (lid, laddr) = server.bind("127.0.79.9:7179");
    server.ok(CmRequest::Listen {
        id: lid,
        backlog: 8,
    });
    for i in 0..100 {
        cycle(&client, &server, laddr, 0x100 + 2 * i);
    }
    let (ra, rb) = (rss_kib(a.pid()), rss_kib(b.pid()));
    let t = Instant::now();
    for i in 100..1000 {
        cycle(&client, &server, laddr, 0x100 + 2 * i);
    }
    let per_sec = 900.0 / t.elapsed().as_secs_f64();
    eprintln!("900 connect/disconnect cycles: {per_sec:.0} per second");
    // Connections wait out TimeWait; then only the listener remains.
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let (ia, ca) = (counter(&a, "cm_ids"), counter(&a, "cm_connections"));
        let (ib, cb) = (counter(&b, "cm_ids"), counter(&b, "cm_connections"));
        if (ia, ca, ib, cb) == (0, 0, 1, 0) {
            break;
        }
        assert!(
            Instant::now() < end,
            "ids/connections left: client {ia}/{ca}, server {ib}/{cb}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let (ra2, rb2) = (rss_kib(a.pid()), rss_kib(b.pid()));
    assert!(
        ra2 < ra + 2048 && rb2 < rb + 2048,
        "daemon memory grew: {ra} -> {ra2} KiB, {rb} -> {rb2} KiB"
    );
}

/// A listener whose process reads its event channel late (the channel's
/// socket full after a few records) still gets every CONNECT_REQUEST, in
/// order, once it reads: the daemon queues what the socket cannot take,
/// as the kernel's ucma queues events, instead of dropping them (which
/// left the dropped requests in REQ_RCVD forever and their peers hanging).
#[test]
fn a_slow_event_reader_loses_no_connect_request() {
    const N: u32 = 24;
    let a = start("cm10", "127.0.79.10", 24905);
    let b = start("cm11", "127.0.79.11", 24905);
    let server = CmClient::with_sndbuf(&b, Some(4096));
    let (lid, laddr) = server.bind("127.0.79.11:7180");
    server.ok(CmRequest::Listen {
        id: lid,
        backlog: N as i32,
    });
    let client = CmClient::new(&a);
    let mut qpns = Vec::new();
    for i in 0..N {
        let (cid, _) = client.bind("127.0.79.10:0");
        client.ok(CmRequest::Resolve {
            id: cid,
            dst: laddr,
        });
        client.ok(CmRequest::Connect {
            id: cid,
            param: ConnParam {
                qp_num: 0x200 + i,
                ..ConnParam::default()
            },
            ece: Ece::default(),
        });
        qpns.push(0x200 + i);
    }
    // Every REQ has reached the server's daemon before it reads anything.
    let end = Instant::now() + SEC;
    while counter(&b, "cm_req_received") < u64::from(N) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(counter(&b, "cm_req_received") >= u64::from(N));
    let mut got = Vec::new();
    while let Some(ev) = server.try_event(Duration::from_millis(500)) {
        assert_eq!((ev.event, ev.id), (event::CONNECT_REQUEST, lid));
        got.push(ev.param.qp_num);
    }
    assert_eq!(got, qpns, "CONNECT_REQUESTs lost or out of order");
    assert_eq!(counter(&b, "cm_events_dropped"), 0);
}
