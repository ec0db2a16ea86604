//! The emulator against fake daemons, through `Shim::write` with real
//! response pointers, as librdmacm drives it.

use std::net::{IpAddr, SocketAddr};

use rxu_abi::proto::cm::{event as ev, CmEventParam, CmEventRecord, CmRequest};

use crate::abi::{self, cmd, u32_at, u64_at};
use crate::fake_daemon::{route, temp_dir, FakeDaemon, GUID_BASE};
use crate::shim::Shim;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn hdr(c: u32, body_len: usize, out: usize) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&c.to_ne_bytes());
    v.extend_from_slice(&(body_len as u16).to_ne_bytes());
    v.extend_from_slice(&(out as u16).to_ne_bytes());
    v
}

/// One process's view: a shim over a runtime dir with fake devices.
struct Env {
    shim: Shim,
    fd: i32,
}

impl Env {
    fn new(dir: &std::path::Path) -> Env {
        let shim = Shim::new(dir.to_path_buf());
        let fd = shim.open(libc::O_RDWR | libc::O_CLOEXEC).unwrap();
        Env { shim, fd }
    }

    fn write(&self, fd: i32, v: &[u8]) -> Result<(), i32> {
        self.shim.write(fd, v.as_ptr() as u64, v.len())
    }

    fn create_id_on(&self, fd: i32, uid: u64, ps: u16) -> Result<u32, i32> {
        let mut resp = 0xffff_ffffu32;
        let mut v = hdr(cmd::CREATE_ID, 24, 4);
        v.extend_from_slice(&uid.to_ne_bytes());
        v.extend_from_slice(&(&mut resp as *mut u32 as u64).to_ne_bytes());
        v.extend_from_slice(&ps.to_ne_bytes());
        v.extend_from_slice(&[0; 6]);
        self.write(fd, &v)?;
        Ok(resp)
    }

    fn create_id(&self, uid: u64) -> u32 {
        self.create_id_on(self.fd, uid, 0x0106).unwrap()
    }

    fn destroy_on(&self, fd: i32, id: u32) -> Result<u32, i32> {
        let mut resp = 0xffff_ffffu32;
        let mut v = hdr(cmd::DESTROY_ID, 16, 4);
        v.extend_from_slice(&(&mut resp as *mut u32 as u64).to_ne_bytes());
        v.extend_from_slice(&id.to_ne_bytes());
        v.extend_from_slice(&[0; 4]);
        self.write(fd, &v)?;
        Ok(resp)
    }

    fn destroy(&self, id: u32) -> Result<u32, i32> {
        self.destroy_on(self.fd, id)
    }

    fn bind(&self, id: u32, addr: &str) -> Result<(), i32> {
        let mut v = hdr(cmd::BIND_IP, 40, 0);
        v.extend_from_slice(&[0; 8]);
        let mut a = [0u8; 28];
        abi::emit_sockaddr(&mut a, Some(&sa(addr)));
        v.extend_from_slice(&a);
        v.extend_from_slice(&id.to_ne_bytes());
        self.write(self.fd, &v)
    }

    fn resolve(&self, id: u32, src: Option<&str>, dst: &str) -> Result<(), i32> {
        let mut v = hdr(cmd::RESOLVE_IP, 64, 0);
        let mut a = [0u8; 56];
        abi::emit_sockaddr(&mut a[..28], src.map(sa).as_ref());
        abi::emit_sockaddr(&mut a[28..], Some(&sa(dst)));
        v.extend_from_slice(&a);
        v.extend_from_slice(&id.to_ne_bytes());
        v.extend_from_slice(&2000u32.to_ne_bytes());
        self.write(self.fd, &v)
    }

    fn simple(&self, c: u32, id: u32, extra: u32) -> Result<(), i32> {
        let mut v = hdr(c, 8, 0);
        v.extend_from_slice(&id.to_ne_bytes());
        v.extend_from_slice(&extra.to_ne_bytes());
        self.write(self.fd, &v)
    }

    fn query_route(&self, id: u32) -> Result<[u8; 208], i32> {
        let mut resp = [0u8; 208];
        let mut v = hdr(cmd::QUERY_ROUTE, 16, 208);
        v.extend_from_slice(&(resp.as_mut_ptr() as u64).to_ne_bytes());
        v.extend_from_slice(&id.to_ne_bytes());
        v.extend_from_slice(&[0; 4]);
        self.write(self.fd, &v)?;
        Ok(resp)
    }

    fn get_event_on(&self, fd: i32) -> Result<[u8; 336], i32> {
        let mut resp = [0u8; 336];
        let mut v = hdr(cmd::GET_EVENT, 8, 336);
        v.extend_from_slice(&(resp.as_mut_ptr() as u64).to_ne_bytes());
        self.write(fd, &v)?;
        Ok(resp)
    }

    fn get_event(&self) -> [u8; 336] {
        set_nonblock(self.fd);
        self.get_event_on(self.fd).expect("an event")
    }

    fn accept(&self, id: u32, uid: u64, valid: bool) -> Result<(), i32> {
        let mut v = hdr(cmd::ACCEPT, 296, 0);
        let mut body = vec![0u8; 296];
        body[0..8].copy_from_slice(&uid.to_ne_bytes());
        body[8 + 271] = u8::from(valid);
        body[280..284].copy_from_slice(&id.to_ne_bytes());
        v.extend_from_slice(&body);
        self.write(self.fd, &v)
    }
}

fn set_nonblock(fd: i32) {
    // SAFETY: fcntl on a channel fd the test owns.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
    }
}

#[test]
fn bind_query_destroy_on_the_device_serving_the_address() {
    let dir = temp_dir("bind");
    let d0 = FakeDaemon::start(&dir, "rxu0", vec![ip("127.0.0.1")], 1);
    let d1 = FakeDaemon::start(&dir, "rxu1", vec![ip("127.0.0.2")], 2);
    let e = Env::new(&dir);
    let id = e.create_id(0x1000);
    assert_eq!(id, 0);
    e.bind(id, "127.0.0.2:7174").unwrap();
    assert!(d0
        .log()
        .iter()
        .all(|r| !matches!(r, CmRequest::Listen { .. })));
    assert!(d1
        .log()
        .iter()
        .any(|r| matches!(r, CmRequest::Bind { addr, .. } if *addr == sa("127.0.0.2:7174"))));
    let q = e.query_route(id).unwrap();
    assert_eq!(
        &q[..8],
        &(GUID_BASE | 2).to_be_bytes(),
        "node_guid, big-endian"
    );
    assert_eq!(
        abi::parse_sockaddr(&q[136..]),
        Some(Some(sa("127.0.0.2:7174")))
    );
    assert_eq!(q[196], 1, "port_num");
    assert_eq!(
        e.bind(id, "127.0.0.2:7175"),
        Err(libc::EINVAL),
        "bound twice"
    );
    assert_eq!(e.destroy(id), Ok(0));
    assert!(d1
        .log()
        .iter()
        .any(|r| matches!(r, CmRequest::Destroy { .. })));
    assert_eq!(e.destroy(id), Err(libc::ENOENT));
}

#[test]
fn addresses_no_device_serves() {
    let dir = temp_dir("noaddr");
    let _d = FakeDaemon::start(&dir, "rxu0", vec![ip("127.0.0.1")], 1);
    let e = Env::new(&dir);
    let id = e.create_id(1);
    // A local address without an rxu device: ENODEV, like the kernel for a
    // netdev without RDMA; an address of no interface: EADDRNOTAVAIL.
    assert_eq!(e.bind(id, "127.0.0.9:1"), Err(libc::ENODEV));
    assert_eq!(e.bind(id, "192.0.2.1:1"), Err(libc::EADDRNOTAVAIL));
}

#[test]
fn bad_handles_channels_and_pointers() {
    let dir = temp_dir("bad");
    let _d = FakeDaemon::start(&dir, "rxu0", vec![ip("127.0.0.1")], 1);
    let e = Env::new(&dir);
    let other = e.shim.open(libc::O_RDWR).unwrap();
    let id = e.create_id(1);
    assert_eq!(
        e.destroy_on(other, id),
        Err(libc::EINVAL),
        "another file's id"
    );
    assert_eq!(e.destroy(77), Err(libc::ENOENT));
    // CREATE_ID with a NULL response: EFAULT and no id left behind.
    let mut v = hdr(cmd::CREATE_ID, 24, 4);
    v.extend_from_slice(&5u64.to_ne_bytes());
    v.extend_from_slice(&0u64.to_ne_bytes());
    v.extend_from_slice(&0x0106u16.to_ne_bytes());
    v.extend_from_slice(&[0; 6]);
    assert_eq!(e.write(e.fd, &v), Err(libc::EFAULT));
    assert_eq!(e.create_id(2), 1, "handle 1 was not kept");
    // A garbage command pointer is EFAULT, not a crash.
    assert_eq!(e.shim.write(e.fd, 8, 32), Err(libc::EFAULT));
    // Commands that need a device on an unbound id: EINVAL.
    assert_eq!(e.simple(cmd::RESOLVE_ROUTE, id, 0), Err(libc::EINVAL));
    assert_eq!(e.simple(cmd::NOTIFY, id, 0), Err(libc::EINVAL));
    // GET_EVENT into an unwritable buffer: EFAULT, the event stays queued.
    e.bind(id, "127.0.0.1:0").unwrap();
    e.resolve(id, None, "127.0.0.1:7174").unwrap();
    set_nonblock(e.fd);
    let mut v = hdr(cmd::GET_EVENT, 8, 336);
    v.extend_from_slice(&16u64.to_ne_bytes());
    assert_eq!(e.write(e.fd, &v), Err(libc::EFAULT));
    assert_eq!(u32_at(&e.get_event(), 12), ev::ADDR_RESOLVED);
    // No more: a non-blocking channel says EAGAIN.
    assert_eq!(e.get_event_on(e.fd), Err(libc::EAGAIN));
}

#[test]
fn resolve_and_route_events_are_counted() {
    let dir = temp_dir("resolve");
    let d = FakeDaemon::start(&dir, "rxu0", vec![ip("127.0.0.1")], 1);
    let e = Env::new(&dir);
    let id = e.create_id(0xabc0);
    // No source: the kernel's route source (127.0.0.1 for 127.0.0.1).
    e.resolve(id, None, "127.0.0.1:7174").unwrap();
    let evt = e.get_event();
    assert_eq!(u64_at(&evt, 0), 0xabc0);
    assert_eq!(u32_at(&evt, 8), id);
    assert_eq!(u32_at(&evt, 12), ev::ADDR_RESOLVED);
    assert_eq!(u32_at(&evt, 16), 0);
    let q = e.query_route(id).unwrap();
    assert_eq!(&q[..8], &(GUID_BASE | 1).to_be_bytes());
    assert_eq!(u32_at(&q, 192), 0, "no path before ROUTE_RESOLVED");
    e.simple(cmd::RESOLVE_ROUTE, id, 2000).unwrap();
    assert_eq!(u32_at(&e.get_event(), 12), ev::ROUTE_RESOLVED);
    let q = e.query_route(id).unwrap();
    assert_eq!(u32_at(&q, 192), 1);
    assert_eq!(u32_at(&q, 8 + 48), 3, "path mtu");
    assert!(d
        .log()
        .iter()
        .any(|r| matches!(r, CmRequest::Resolve { dst, .. } if *dst == sa("127.0.0.1:7174"))));
    assert_eq!(e.destroy(id), Ok(2), "events_reported");
}

#[test]
fn unreachable_destinations_give_addr_error() {
    let dir = temp_dir("unreach");
    let _d = FakeDaemon::start(&dir, "rxu0", vec![ip("127.0.0.1")], 1);
    let e = Env::new(&dir);
    // The daemon says EHOSTUNREACH: ADDR_ERROR with -EHOSTUNREACH.
    let a = e.create_id(1);
    e.resolve(a, None, "127.0.0.99:1").unwrap();
    let evt = e.get_event();
    assert_eq!(u32_at(&evt, 12), ev::ADDR_ERROR);
    assert_eq!(u32_at(&evt, 16) as i32, -libc::EHOSTUNREACH);
    // A route source no rxu device serves: ADDR_ERROR -ENODEV.
    let dir2 = temp_dir("unreach2");
    let _d2 = FakeDaemon::start(&dir2, "rxu0", vec![ip("127.0.0.2")], 2);
    let e = Env::new(&dir2);
    let b = e.create_id(2);
    e.resolve(b, None, "127.0.0.1:1").unwrap();
    let evt = e.get_event();
    assert_eq!((u32_at(&evt, 8), u32_at(&evt, 12)), (b, ev::ADDR_ERROR));
    assert_eq!(u32_at(&evt, 16) as i32, -libc::ENODEV);
}

#[test]
fn connect_request_makes_an_id_and_events_follow_accept() {
    let dir = temp_dir("connreq");
    let d0 = FakeDaemon::start(&dir, "rxu0", vec![ip("127.0.0.1")], 1);
    let d1 = FakeDaemon::start(&dir, "rxu1", vec![ip("127.0.0.2")], 2);
    let e = Env::new(&dir);
    let l = e.create_id(0x5000);
    e.bind(l, "0.0.0.0:7174").unwrap();
    let q = e.query_route(l).unwrap();
    assert_eq!(&q[..8], &[0; 8], "wildcard: no device");
    e.simple(cmd::LISTEN, l, 3).unwrap();
    // Listening on every device, same port.
    let listens = |d: &FakeDaemon| {
        d.log()
            .iter()
            .filter(|r| matches!(r, CmRequest::Bind { addr, .. } if *addr == sa("0.0.0.0:7174")))
            .count()
    };
    assert_eq!((listens(&d0), listens(&d1)), (1, 1));
    let did = d1
        .log()
        .iter()
        .find_map(|r| match r {
            CmRequest::Listen { id, backlog: 3 } => Some(*id),
            _ => None,
        })
        .unwrap();
    let ch = d1.channel_of(did);
    d1.emit(
        ch,
        CmEventRecord {
            id: did,
            event: ev::CONNECT_REQUEST,
            new_id: 900,
            param: CmEventParam {
                private_data: vec![0xee; 56],
                initiator_depth: 1,
                responder_resources: 2,
                qp_num: 0x42,
                ..Default::default()
            },
            local: Some(sa("127.0.0.2:7174")),
            remote: Some(sa("127.0.0.1:40001")),
            route: Some(route(
                d1.node_guid,
                sa("127.0.0.2:7174"),
                Some(sa("127.0.0.1:40001")),
            )),
            ..Default::default()
        },
    );
    let evt = e.get_event();
    assert_eq!(u64_at(&evt, 0), 0x5000, "the listener's uid");
    assert_eq!(u32_at(&evt, 12), ev::CONNECT_REQUEST);
    let child = u32_at(&evt, 8);
    assert_ne!(child, l);
    assert_eq!(u32_at(&evt, 20), 0x42);
    assert_eq!(evt[20 + 264], 56);
    assert_eq!((evt[20 + 266], evt[20 + 267]), (2, 1));
    let q = e.query_route(child).unwrap();
    assert_eq!(
        &q[..8],
        &(GUID_BASE | 2).to_be_bytes(),
        "the child has a device"
    );
    assert_eq!(
        abi::parse_sockaddr(&q[164..]),
        Some(Some(sa("127.0.0.1:40001")))
    );
    // Before ACCEPT the child has no uid: its events are dropped.
    d1.emit(
        ch,
        CmEventRecord {
            id: 900,
            event: ev::DISCONNECTED,
            ..Default::default()
        },
    );
    assert_eq!(e.get_event_on(e.fd), Err(libc::EAGAIN));
    e.accept(child, 0x6000, true).unwrap();
    assert!(d1.log().iter().any(|r| matches!(
        r,
        CmRequest::Accept {
            id: 900,
            param: Some(_),
            ..
        }
    )));
    d1.emit(
        ch,
        CmEventRecord {
            id: 900,
            event: ev::ESTABLISHED,
            ..Default::default()
        },
    );
    let evt = e.get_event();
    assert_eq!((u64_at(&evt, 0), u32_at(&evt, 8)), (0x6000, child));
    assert_eq!(u32_at(&evt, 12), ev::ESTABLISHED);
    assert_eq!(e.destroy(child), Ok(1));
    assert_eq!(
        e.destroy(l),
        Ok(1),
        "the CONNECT_REQUEST counts for the listener"
    );
    assert!(d1.log().contains(&CmRequest::Destroy { id: 900 }));
}

#[test]
fn connect_request_for_a_destroyed_listener_is_refused() {
    let dir = temp_dir("lgone");
    let d = FakeDaemon::start(&dir, "rxu0", vec![ip("127.0.0.1")], 1);
    let e = Env::new(&dir);
    let l = e.create_id(1);
    e.bind(l, "127.0.0.1:7000").unwrap();
    e.simple(cmd::LISTEN, l, 0).unwrap();
    let did = match d
        .log()
        .iter()
        .rev()
        .find(|r| matches!(r, CmRequest::Listen { .. }))
    {
        Some(CmRequest::Listen { id, backlog }) => {
            assert_eq!(*backlog, 1024, "backlog 0 -> max");
            *id
        }
        _ => panic!("no listen"),
    };
    let ch = d.channel_of(did);
    e.destroy(l).unwrap();
    d.emit(
        ch,
        CmEventRecord {
            id: did,
            event: ev::CONNECT_REQUEST,
            new_id: 777,
            ..Default::default()
        },
    );
    set_nonblock(e.fd);
    assert_eq!(e.get_event_on(e.fd).map(|_| ()), Err(libc::EAGAIN));
    assert!(d.log().contains(&CmRequest::Destroy { id: 777 }));
}

#[test]
fn close_destroys_every_id_and_detaches() {
    let dir = temp_dir("close");
    let d = FakeDaemon::start(&dir, "rxu0", vec![ip("127.0.0.1")], 1);
    let e = Env::new(&dir);
    let a = e.create_id(1);
    let b = e.create_id(2);
    e.bind(a, "127.0.0.1:0").unwrap();
    e.bind(b, "127.0.0.1:0").unwrap();
    e.shim.close(e.fd);
    let log = d.log();
    assert_eq!(
        log.iter()
            .filter(|r| matches!(r, CmRequest::Destroy { .. }))
            .count(),
        2
    );
    assert!(matches!(log.last(), Some(CmRequest::DetachChannel { .. })));
    assert!(e.shim.lock().table.ids.is_empty());
}

#[test]
fn migrate_moves_the_id_and_its_queued_events() {
    let dir = temp_dir("migrate");
    let d = FakeDaemon::start(&dir, "rxu0", vec![ip("127.0.0.1")], 1);
    let e = Env::new(&dir);
    let a = e.create_id(0xa);
    let b = e.create_id(0xb);
    e.resolve(a, None, "127.0.0.1:1").unwrap();
    e.resolve(b, None, "127.0.0.1:2").unwrap();
    let new = e.shim.open(libc::O_RDWR | libc::O_NONBLOCK).unwrap();
    let mut resp = 0xffffu32;
    let mut v = hdr(cmd::MIGRATE_ID, 16, 4);
    v.extend_from_slice(&(&mut resp as *mut u32 as u64).to_ne_bytes());
    v.extend_from_slice(&a.to_ne_bytes());
    v.extend_from_slice(&e.fd.to_ne_bytes());
    e.write(new, &v).unwrap();
    assert_eq!(resp, 0);
    assert!(d
        .log()
        .iter()
        .any(|r| matches!(r, CmRequest::Migrate { .. })));
    // a's ADDR_RESOLVED moved; b's stayed.
    let evt = e.get_event_on(new).unwrap();
    assert_eq!(
        (u64_at(&evt, 0), u32_at(&evt, 12)),
        (0xa, ev::ADDR_RESOLVED)
    );
    assert_eq!(u64_at(&e.get_event(), 0), 0xb);
    assert_eq!(
        e.destroy(a),
        Err(libc::EINVAL),
        "a belongs to the new channel"
    );
    assert_eq!(e.destroy_on(new, a), Ok(1));
    // A migrate naming a descriptor that is not a channel: EINVAL.
    let mut v = hdr(cmd::MIGRATE_ID, 16, 4);
    v.extend_from_slice(&(&mut resp as *mut u32 as u64).to_ne_bytes());
    v.extend_from_slice(&b.to_ne_bytes());
    v.extend_from_slice(&0i32.to_ne_bytes());
    assert_eq!(e.write(new, &v), Err(libc::EINVAL));
}

#[test]
fn set_option_and_init_qp_attr() {
    let dir = temp_dir("opts");
    let d = FakeDaemon::start(&dir, "rxu0", vec![ip("127.0.0.1")], 1);
    let e = Env::new(&dir);
    let id = e.create_id(1);
    let set = |name: u32, val: &[u8]| {
        let mut v = hdr(cmd::SET_OPTION, 24, 0);
        v.extend_from_slice(&(val.as_ptr() as u64).to_ne_bytes());
        v.extend_from_slice(&id.to_ne_bytes());
        v.extend_from_slice(&0u32.to_ne_bytes());
        v.extend_from_slice(&name.to_ne_bytes());
        v.extend_from_slice(&(val.len() as u32).to_ne_bytes());
        e.write(e.fd, &v)
    };
    set(abi::OPTION_ID_REUSEADDR, &1i32.to_ne_bytes()).unwrap();
    set(abi::OPTION_ID_TOS, &[0x20]).unwrap();
    assert_eq!(
        set(abi::OPTION_ID_TOS, &[0, 0]),
        Err(libc::EINVAL),
        "TOS is a u8"
    );
    assert_eq!(set(9, &[0]), Err(libc::ENOSYS));
    e.bind(id, "127.0.0.1:0").unwrap();
    assert!(d.log().iter().any(|r| matches!(
        r,
        CmRequest::Bind {
            reuseaddr: true,
            tos: Some(0x20),
            ..
        }
    )));
    let mut resp = [0u8; 144];
    let mut v = hdr(cmd::INIT_QP_ATTR, 16, 144);
    v.extend_from_slice(&(resp.as_mut_ptr() as u64).to_ne_bytes());
    v.extend_from_slice(&id.to_ne_bytes());
    v.extend_from_slice(&1u32.to_ne_bytes());
    e.write(e.fd, &v).unwrap();
    assert_eq!(u32_at(&resp, 0), 0x39);
    assert_eq!(u32_at(&resp, 4), 1);
    assert_eq!(resp[133], 1);
}

#[test]
fn multicast_join_events_carry_the_join() {
    let dir = temp_dir("mcast");
    let d = FakeDaemon::start(&dir, "rxu0", vec![ip("127.0.0.1")], 1);
    let e = Env::new(&dir);
    let id = e.create_id_on(e.fd, 0x77, 0x0111).unwrap();
    e.bind(id, "127.0.0.1:0").unwrap();
    let mut mc = 0xffu32;
    let mut v = hdr(cmd::JOIN_IP_MCAST, 48, 4);
    v.extend_from_slice(&(&mut mc as *mut u32 as u64).to_ne_bytes());
    v.extend_from_slice(&0x88u64.to_ne_bytes());
    let mut a = [0u8; 28];
    abi::emit_sockaddr(&mut a, Some(&sa("239.1.1.1:0")));
    v.extend_from_slice(&a);
    v.extend_from_slice(&id.to_ne_bytes());
    e.write(e.fd, &v).unwrap();
    assert_eq!(mc, 0);
    let did = match d
        .log()
        .iter()
        .find(|r| matches!(r, CmRequest::JoinMcast { .. }))
    {
        Some(CmRequest::JoinMcast { id, .. }) => *id,
        _ => panic!("no join"),
    };
    d.emit(
        d.channel_of(did),
        CmEventRecord {
            id: did,
            event: ev::MULTICAST_JOIN,
            param: CmEventParam {
                qp_num: 0xff_ffff,
                qkey: 0x0123_4567,
                ..Default::default()
            },
            mcast: Some(sa("239.1.1.1:0")),
            ..Default::default()
        },
    );
    let evt = e.get_event();
    assert_eq!((u64_at(&evt, 0), u32_at(&evt, 8)), (0x88, mc));
    assert_eq!(u32_at(&evt, 20), 0xff_ffff, "UD param");
    let mut n = 0xffu32;
    let mut v = hdr(cmd::LEAVE_MCAST, 16, 4);
    v.extend_from_slice(&(&mut n as *mut u32 as u64).to_ne_bytes());
    v.extend_from_slice(&mc.to_ne_bytes());
    v.extend_from_slice(&[0; 4]);
    e.write(e.fd, &v).unwrap();
    assert_eq!(n, 1);
    assert_eq!(e.write(e.fd, &v), Err(libc::ENOENT));
    assert_eq!(e.destroy(id), Ok(1));
}

#[test]
fn a_wildcard_bind_takes_its_port_at_once_on_every_device() {
    let dir = temp_dir("wildport");
    let d0 = FakeDaemon::start(&dir, "rxu0", vec![ip("127.0.0.1")], 1);
    let d1 = FakeDaemon::start(&dir, "rxu1", vec![ip("127.0.0.2")], 2);
    let e = Env::new(&dir);
    let id = e.create_id(0x10);
    e.bind(id, "0.0.0.0:0").unwrap();
    // The port is there for rdma_get_src_port before any listen.
    let q = e.query_route(id).unwrap();
    let src = abi::parse_sockaddr(&q[136..]).unwrap().unwrap();
    assert!(src.ip().is_unspecified() && src.port() != 0, "{src}");
    assert_eq!(&q[..8], &[0; 8], "wildcard: no device");
    let binds = |d: &FakeDaemon| -> Vec<SocketAddr> {
        d.log()
            .iter()
            .filter_map(|r| match r {
                CmRequest::Bind { addr, .. } => Some(*addr),
                _ => None,
            })
            .collect()
    };
    // The first device chose it; the second was asked for the same one.
    assert_eq!(binds(&d0), vec![sa("0.0.0.0:0")]);
    assert_eq!(binds(&d1), vec![src]);
    // Listen uses these bindings: no new Bind.
    e.simple(cmd::LISTEN, id, 1).unwrap();
    assert_eq!((binds(&d0).len(), binds(&d1).len()), (1, 1));
    assert_eq!(e.query_route(id).unwrap()[136..164], q[136..164]);
    // A wildcard-bound id that resolves keeps its port on the source's
    // device and lets the other bindings go.
    let c = e.create_id(0x11);
    e.bind(c, "0.0.0.0:0").unwrap();
    let port = abi::parse_sockaddr(&e.query_route(c).unwrap()[136..])
        .unwrap()
        .unwrap()
        .port();
    e.resolve(c, None, "127.0.0.1:7174").unwrap();
    let q = e.query_route(c).unwrap();
    assert_eq!(
        abi::parse_sockaddr(&q[136..]),
        Some(Some(SocketAddr::new(ip("127.0.0.1"), port)))
    );
    assert_eq!(&q[..8], &(GUID_BASE | 1).to_be_bytes());
    let destroyed = |d: &FakeDaemon| {
        d.log()
            .iter()
            .filter(|r| matches!(r, CmRequest::Destroy { .. }))
            .count()
    };
    assert_eq!((destroyed(&d0), destroyed(&d1)), (1, 1));
}

#[test]
fn a_device_that_does_not_serve_an_address_keeps_its_connection() {
    let dir = temp_dir("keepconn");
    let d0 = FakeDaemon::start(&dir, "rxu0", vec![ip("127.0.0.1")], 1);
    let d1 = FakeDaemon::start(&dir, "rxu1", vec![ip("127.0.0.2")], 2);
    let e = Env::new(&dir);
    let w = e.create_id(1);
    e.bind(w, "0.0.0.0:0").unwrap();
    // rxu0 answers ENODEV ("not mine") before rxu1 takes the bind: that
    // is no broken connection, so w's binding on rxu0 (a session of that
    // connection) lives on.
    let o = e.create_id(2);
    e.bind(o, "127.0.0.2:0").unwrap();
    e.simple(cmd::LISTEN, w, 1).unwrap();
    assert_eq!((d0.hellos(), d1.hellos()), (1, 1));
    assert!(d0
        .log()
        .iter()
        .any(|r| matches!(r, CmRequest::Listen { .. })));
}
