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
        let sock = connect(&d.socket());
        let hello = Request::CmHello {
            version: proto::PROTO_VERSION,
            pid: std::process::id(),
        };
        assert!(matches!(call(&sock, &hello, &[]), Response::Hello { .. }));
        let (events, theirs) = seqpacket_pair();
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
        let end = Instant::now() + limit;
        let mut buf = vec![0u8; MAX_MSG];
        loop {
            let r = recv_msg(self.events.as_fd(), &mut buf, libc::MSG_DONTWAIT);
            if let Ok((n, _)) = r {
                if n > 0 {
                    let rec: CmEventRecord = proto::decode(&buf[..n]).unwrap();
                    assert_eq!(rec.tag, 42);
                    return rec;
                }
            }
            assert!(Instant::now() < end, "no rdma_cm event within {limit:?}");
            std::thread::sleep(Duration::from_millis(5));
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
