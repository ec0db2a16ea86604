//! parse's refusals: short input, wrong header values, LAP/APR, unknown
//! attributes. Longer input is read as its first 256 bytes.

use crate::wire::*;

fn good() -> [u8; MAD_LEN] {
    let m = CmMad {
        tid: 7,
        attr_mod: 0,
        msg: CmMsg::Rtu(Box::new(Rtu {
            local_comm_id: 1,
            remote_comm_id: 2,
            private_data: [0; RTU_PRIVATE],
        })),
    };
    let mut b = [0u8; MAD_LEN];
    emit(&m, &mut b);
    b
}

#[test]
fn refusals() {
    let b = good();
    assert!(parse(&b).is_ok());
    assert_eq!(parse(&b[..255]), Err(WireError::TooShort(255)));
    assert_eq!(parse(&[]), Err(WireError::TooShort(0)));
    let with = |at: usize, v: u8| {
        let mut c = b;
        c[at] = v;
        parse(&c)
    };
    assert_eq!(with(0, 2), Err(WireError::BaseVersion(2)));
    assert_eq!(with(1, 0x81), Err(WireError::MgmtClass(0x81)));
    assert_eq!(with(2, 1), Err(WireError::ClassVersion(1)));
    assert_eq!(with(3, 0x83), Err(WireError::Method(0x83)));
    assert_eq!(with(3, 0x01), Err(WireError::Method(0x01)));
    assert_eq!(with(17, 0x19), Err(WireError::Unsupported(AttrId::Lap)));
    assert_eq!(with(17, 0x1a), Err(WireError::Unsupported(AttrId::Apr)));
    assert_eq!(with(17, 0x1b), Err(WireError::UnknownAttr(0x1b)));
    assert_eq!(with(16, 0x01), Err(WireError::UnknownAttr(0x0114)));
    assert_eq!(
        WireError::Unsupported(AttrId::Lap).to_string(),
        "CM LAP is not supported"
    );
}

#[test]
fn longer_payload_reads_the_first_256_bytes() {
    let mut long = good().to_vec();
    long.extend_from_slice(&[0xff; 24]);
    assert_eq!(parse(&long), parse(&good()));
}

#[test]
fn status_class_specific_and_reserved_are_ignored_on_receive() {
    let mut b = good();
    b[4..8].copy_from_slice(&[1, 2, 3, 4]);
    b[18..20].copy_from_slice(&[5, 6]);
    assert_eq!(parse(&b), parse(&good()));
}
