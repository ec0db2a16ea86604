use super::*;
use proptest::prelude::*;

/// A command as librdmacm writes it: header + `body` (in = body length).
fn cmd_bytes(c: u32, out: u16, body: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&c.to_ne_bytes());
    v.extend_from_slice(&(body.len() as u16).to_ne_bytes());
    v.extend_from_slice(&out.to_ne_bytes());
    v.extend_from_slice(body);
    v
}

fn dec(v: &[u8]) -> Result<Command, Errno> {
    decode(v, v.len())
}

fn sockaddr(a: &str) -> [u8; 28] {
    let mut b = [0u8; 28];
    abi::emit_sockaddr(&mut b, Some(&a.parse().unwrap()));
    b
}

#[test]
fn header_checks_follow_ucma_write() {
    assert_eq!(dec(&[0; 7]), Err(libc::EINVAL), "shorter than the header");
    assert_eq!(dec(&cmd_bytes(23, 0, &[])), Err(libc::EINVAL), "unknown");
    assert_eq!(dec(&cmd_bytes(u32::MAX, 0, &[])), Err(libc::EINVAL));
    let mut v = cmd_bytes(cmd::DISCONNECT, 0, &[0; 4]);
    v[4] = 5; // in = 5 > len - 8
    assert_eq!(dec(&v), Err(libc::EINVAL), "in beyond the write");
    assert_eq!(dec(&cmd_bytes(cmd::GET_OPTION, 0, &[])), Err(libc::ENOSYS));
    for c in [cmd::QUERY, cmd::BIND, cmd::RESOLVE_ADDR, cmd::JOIN_MCAST] {
        assert_eq!(dec(&cmd_bytes(c, 0, &[0; 300])), Err(libc::ENOSYS), "{c}");
    }
    // A header the buffer does not hold (the pointer ran out): EFAULT.
    assert_eq!(decode(&[0; 4], 8), Err(libc::EFAULT));
}

#[test]
fn every_command_needs_its_whole_body() {
    for c in 0..cmd::COUNT {
        let Some(n) = abi::body_len(c) else { continue };
        // The kernel copies sizeof(cmd) whatever `in` says: a buffer that
        // ends early is a fault, not a short read.
        let v = cmd_bytes(c, 400, &vec![0; n]);
        let short = &v[..v.len() - 1];
        let r = decode(short, short.len());
        assert!(
            matches!(r, Err(libc::EFAULT) | Err(libc::EINVAL)),
            "cmd {c}: {r:?}"
        );
    }
}

#[test]
fn response_sizes_are_checked_first() {
    let cases = [
        (cmd::CREATE_ID, 3u16),
        (cmd::DESTROY_ID, 3),
        (cmd::QUERY_ROUTE, 199),
        (cmd::INIT_QP_ATTR, 143),
        (cmd::GET_EVENT, 323),
        (cmd::JOIN_IP_MCAST, 3),
        (cmd::LEAVE_MCAST, 3),
    ];
    for (c, out) in cases {
        let n = abi::body_len(c).unwrap();
        assert_eq!(
            dec(&cmd_bytes(c, out, &vec![0; n])),
            Err(libc::ENOSPC),
            "{c}"
        );
        assert_ne!(dec(&cmd_bytes(c, out + 1, &vec![0; n])), Err(libc::ENOSPC));
    }
}

#[test]
fn create_id_port_spaces() {
    let mut body = [0u8; 24];
    body[0..8].copy_from_slice(&0x1234u64.to_ne_bytes());
    body[8..16].copy_from_slice(&0x5678u64.to_ne_bytes());
    for (ps, want) in [(0x0106u16, 2u8), (0x0111, 4), (0x0002, 4)] {
        body[16..18].copy_from_slice(&ps.to_ne_bytes());
        assert_eq!(
            dec(&cmd_bytes(cmd::CREATE_ID, 4, &body)),
            Ok(Command::CreateId {
                uid: 0x1234,
                response: 0x5678,
                ps,
                qp_type: want
            })
        );
    }
    body[16..18].copy_from_slice(&0x013Fu16.to_ne_bytes());
    body[18] = 3;
    assert!(matches!(
        dec(&cmd_bytes(cmd::CREATE_ID, 4, &body)),
        Ok(Command::CreateId { qp_type: 3, .. })
    ));
    body[16..18].copy_from_slice(&0x0107u16.to_ne_bytes());
    assert_eq!(dec(&cmd_bytes(cmd::CREATE_ID, 4, &body)), Err(libc::EINVAL));
}

#[test]
fn bind_and_resolve_addresses() {
    let mut body = [0u8; 40];
    body[8..36].copy_from_slice(&sockaddr("127.0.0.1:7174"));
    body[36..40].copy_from_slice(&9u32.to_ne_bytes());
    assert_eq!(
        dec(&cmd_bytes(cmd::BIND_IP, 0, &body)),
        Ok(Command::BindIp {
            addr: "127.0.0.1:7174".parse().unwrap(),
            id: 9
        })
    );
    body[8..36].fill(0);
    assert_eq!(
        dec(&cmd_bytes(cmd::BIND_IP, 0, &body)),
        Err(libc::EINVAL),
        "family 0"
    );
    body[8] = 27; // AF_IB
    assert_eq!(dec(&cmd_bytes(cmd::BIND_IP, 0, &body)), Err(libc::EINVAL));

    let mut r = [0u8; 64];
    r[28..56].copy_from_slice(&sockaddr("[::1]:5"));
    r[60..64].copy_from_slice(&2000u32.to_ne_bytes());
    assert_eq!(
        dec(&cmd_bytes(cmd::RESOLVE_IP, 0, &r)),
        Ok(Command::ResolveIp {
            src: None,
            dst: "[::1]:5".parse().unwrap(),
            id: 0,
            timeout_ms: 2000
        })
    );
    r[0] = 99;
    assert_eq!(
        dec(&cmd_bytes(cmd::RESOLVE_IP, 0, &r)),
        Err(libc::EINVAL),
        "bad src"
    );
    r[0] = 0;
    r[28..56].fill(0);
    assert_eq!(
        dec(&cmd_bytes(cmd::RESOLVE_IP, 0, &r)),
        Err(libc::EINVAL),
        "no dst"
    );
}

fn conn_body(valid: u8) -> [u8; 272] {
    let mut p = [0u8; 272];
    p[0..4].copy_from_slice(&0xff00_0011u32.to_ne_bytes());
    p[8..11].copy_from_slice(b"abc");
    p[264] = 3;
    p[266] = 1; // responder resources
    p[267] = 2; // initiator depth
    p[269] = 7;
    p[270] = 6;
    p[271] = valid;
    p
}

#[test]
fn connect_needs_valid_param_and_takes_ece_when_present() {
    let mut body = vec![0u8; 288];
    body[..272].copy_from_slice(&conn_body(1));
    body[272..276].copy_from_slice(&4u32.to_ne_bytes());
    body[280..284].copy_from_slice(&0x15b3u32.to_ne_bytes());
    let Ok(Command::Connect { param, id, ece }) = dec(&cmd_bytes(cmd::CONNECT, 0, &body)) else {
        panic!("connect")
    };
    assert_eq!(id, 4);
    assert_eq!(param.qp_num, 0x11, "24-bit QPN");
    assert_eq!(param.private_data, b"abc");
    assert_eq!((param.responder_resources, param.initiator_depth), (1, 2));
    assert_eq!((param.retry_count, param.rnr_retry_count), (7, 6));
    assert_eq!(ece.vendor_id, 0x15b3);
    // An old library without the ECE field: in = 280.
    let old = cmd_bytes(cmd::CONNECT, 0, &body[..280]);
    let Ok(Command::Connect { ece, .. }) = dec(&old) else {
        panic!("old connect")
    };
    assert_eq!(ece, Ece::default());
    assert_eq!(
        dec(&cmd_bytes(cmd::CONNECT, 0, &body[..279])),
        Err(libc::EINVAL)
    );
    body[271] = 0;
    assert_eq!(
        dec(&cmd_bytes(cmd::CONNECT, 0, &body)),
        Err(libc::EINVAL),
        "!valid"
    );
}

#[test]
fn accept_without_param_is_the_rtu() {
    let mut body = vec![0u8; 296];
    body[0..8].copy_from_slice(&77u64.to_ne_bytes());
    body[280..284].copy_from_slice(&5u32.to_ne_bytes());
    assert_eq!(
        dec(&cmd_bytes(cmd::ACCEPT, 0, &body)),
        Ok(Command::Accept {
            uid: 77,
            param: None,
            id: 5,
            ece: Ece::default()
        })
    );
    body[8..280].copy_from_slice(&conn_body(1));
    assert!(matches!(
        dec(&cmd_bytes(cmd::ACCEPT, 0, &body)),
        Ok(Command::Accept { param: Some(_), .. })
    ));
    assert_eq!(
        dec(&cmd_bytes(cmd::ACCEPT, 0, &body[..287])),
        Err(libc::EINVAL)
    );
}

#[test]
fn reject_reasons() {
    let mut body = [0u8; 264];
    body[4] = 2;
    body[8] = 0xaa;
    body[9] = 0xbb;
    let Ok(Command::Reject {
        reason,
        private_data,
        ..
    }) = dec(&cmd_bytes(cmd::REJECT, 0, &body))
    else {
        panic!("reject")
    };
    assert_eq!((reason, private_data), (28, vec![0xaa, 0xbb]));
    body[5] = 35;
    assert!(matches!(
        dec(&cmd_bytes(cmd::REJECT, 0, &body)),
        Ok(Command::Reject { reason: 35, .. })
    ));
    body[5] = 8;
    assert_eq!(dec(&cmd_bytes(cmd::REJECT, 0, &body)), Err(libc::EINVAL));
}

#[test]
fn listen_backlog_is_clamped() {
    for (given, want) in [(0i32, 1024), (-3, 1024), (5000, 1024), (3, 3)] {
        let mut body = [0u8; 8];
        body[4..8].copy_from_slice(&given.to_ne_bytes());
        assert_eq!(
            dec(&cmd_bytes(cmd::LISTEN, 0, &body)),
            Ok(Command::Listen {
                id: 0,
                backlog: want
            })
        );
    }
}

#[test]
fn init_qp_attr_state_range() {
    let mut body = [0u8; 16];
    body[12] = 6;
    assert!(dec(&cmd_bytes(cmd::INIT_QP_ATTR, 144, &body)).is_ok());
    body[12] = 7;
    assert_eq!(
        dec(&cmd_bytes(cmd::INIT_QP_ATTR, 144, &body)),
        Err(libc::EINVAL)
    );
}

#[test]
fn set_option_and_migrate_fields() {
    let mut body = [0u8; 24];
    body[0..8].copy_from_slice(&0xdead_0000u64.to_ne_bytes());
    body[8..12].copy_from_slice(&3u32.to_ne_bytes());
    body[16..20].copy_from_slice(&1u32.to_ne_bytes());
    body[20..24].copy_from_slice(&4u32.to_ne_bytes());
    assert_eq!(
        dec(&cmd_bytes(cmd::SET_OPTION, 0, &body)),
        Ok(Command::SetOption {
            optval: 0xdead_0000,
            id: 3,
            level: 0,
            optname: 1,
            optlen: 4
        })
    );
    body[20..24].copy_from_slice(&u32::MAX.to_ne_bytes());
    assert_eq!(
        dec(&cmd_bytes(cmd::SET_OPTION, 0, &body)),
        Err(libc::EINVAL)
    );
    let mut m = [0u8; 16];
    m[8..12].copy_from_slice(&7u32.to_ne_bytes());
    m[12..16].copy_from_slice(&12i32.to_ne_bytes());
    assert_eq!(
        dec(&cmd_bytes(cmd::MIGRATE_ID, 4, &m)),
        Ok(Command::MigrateId {
            response: 0,
            id: 7,
            fd: 12
        })
    );
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400), extra in 0usize..64) {
        let _ = decode(&bytes, bytes.len());
        let _ = decode(&bytes, bytes.len() + extra);
        let _ = decode(&bytes, bytes.len().saturating_sub(extra));
    }

    #[test]
    fn arbitrary_bodies_of_real_commands_never_panic(c in 0u32..24, out in any::<u16>(), body in proptest::collection::vec(any::<u8>(), 0..320)) {
        let v = cmd_bytes(c, out, &body);
        let _ = decode(&v, v.len());
    }
}
