//! What rdma_cm adds on top of the IB CM for IP addressing: the 36-byte
//! header at the start of REQ / SIDR_REQ private data (the kernel's
//! `struct cma_hdr`) and service IDs made of a port space and a port.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::bits::get_bytes;
use super::WireError;

/// Length of the rdma_cm header.
pub const CMA_HDR_LEN: usize = 36;
/// `CMA_VERSION`: anything else is refused by the kernel.
pub const CMA_VERSION: u8 = 0x00;

/// Byte positions in the header.
pub mod field {
    use std::ops::Range;

    pub const CMA_VERSION: usize = 0;
    /// IP version in the high nibble (0x40, 0x60).
    pub const IP_VERSION: usize = 1;
    pub const SRC_PORT: Range<usize> = 2..4;
    /// An IPv4 address sits in the last 4 bytes, the first 12 are zero.
    pub const SRC_ADDR: usize = 4;
    pub const DST_ADDR: usize = 20;
    /// Offset of an IPv4 address inside a 16-byte address slot.
    pub const V4_IN_SLOT: usize = 12;
}

/// The rdma_cm IP header: who connects (address and port) to whom (the
/// port is in the service ID).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmaHeader {
    pub src_port: u16,
    pub src: IpAddr,
    pub dst: IpAddr,
}

impl CmaHeader {
    /// Parses the header from the start of private data. The 12 pad bytes
    /// before an IPv4 address are ignored, as the kernel ignores them.
    pub fn parse(pd: &[u8]) -> Result<CmaHeader, WireError> {
        let Some(h) = pd.get(..CMA_HDR_LEN) else {
            return Err(WireError::CmaTooShort(pd.len()));
        };
        if h[field::CMA_VERSION] != CMA_VERSION {
            return Err(WireError::CmaVersion(h[field::CMA_VERSION]));
        }
        let src_port = u16::from_be_bytes([h[field::SRC_PORT.start], h[field::SRC_PORT.start + 1]]);
        let addr = |at: usize| -> Result<IpAddr, WireError> {
            match h[field::IP_VERSION] >> 4 {
                4 => Ok(IpAddr::V4(Ipv4Addr::from(get_bytes::<4>(
                    h,
                    at + field::V4_IN_SLOT,
                )))),
                6 => Ok(IpAddr::V6(Ipv6Addr::from(get_bytes::<16>(h, at)))),
                v => Err(WireError::CmaIpVersion(v)),
            }
        };
        Ok(CmaHeader {
            src_port,
            src: addr(field::SRC_ADDR)?,
            dst: addr(field::DST_ADDR)?,
        })
    }

    /// Writes the 36-byte header to the start of `out` (private data).
    /// Both addresses must be of one family.
    pub fn emit(&self, out: &mut [u8]) -> Result<(), WireError> {
        let len = out.len();
        let Some(h) = out.get_mut(..CMA_HDR_LEN) else {
            return Err(WireError::CmaTooShort(len));
        };
        let version = match (self.src, self.dst) {
            (IpAddr::V4(_), IpAddr::V4(_)) => 4,
            (IpAddr::V6(_), IpAddr::V6(_)) => 6,
            _ => return Err(WireError::CmaMixedFamilies),
        };
        h.fill(0);
        h[field::CMA_VERSION] = CMA_VERSION;
        h[field::IP_VERSION] = version << 4;
        h[field::SRC_PORT].copy_from_slice(&self.src_port.to_be_bytes());
        for (at, a) in [(field::SRC_ADDR, self.src), (field::DST_ADDR, self.dst)] {
            match a {
                IpAddr::V4(a) => {
                    let s = at + field::V4_IN_SLOT;
                    h[s..s + 4].copy_from_slice(&a.octets());
                }
                IpAddr::V6(a) => h[at..at + 16].copy_from_slice(&a.octets()),
            }
        }
        Ok(())
    }
}

/// rdma_cm port spaces (`enum rdma_ucm_port_space`).
pub mod ps {
    pub const IPOIB: u16 = 0x0002;
    pub const TCP: u16 = 0x0106;
    pub const UDP: u16 = 0x0111;
    pub const IB: u16 = 0x013F;
}

/// The service ID rdma_cm uses for port `port` of port space `ps`.
pub const fn service_id(ps: u16, port: u16) -> u64 {
    (ps as u64) << 16 | port as u64
}

/// The port space of a service ID (bits 16..31).
pub const fn ps_of(sid: u64) -> u16 {
    (sid >> 16) as u16
}

/// The port of a service ID (bits 0..15).
pub const fn port_of(sid: u64) -> u16 {
    sid as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ipv4_header_bytes() {
        let h = CmaHeader {
            src_port: 0xc001,
            src: "10.0.0.1".parse().unwrap(),
            dst: "10.0.0.2".parse().unwrap(),
        };
        let mut b = [0xaau8; 40];
        h.emit(&mut b).unwrap();
        let mut want = [0u8; 36];
        want[1] = 0x40;
        want[2..4].copy_from_slice(&[0xc0, 0x01]);
        want[16..20].copy_from_slice(&[10, 0, 0, 1]);
        want[32..36].copy_from_slice(&[10, 0, 0, 2]);
        assert_eq!(&b[..36], &want);
        assert_eq!(&b[36..], &[0xaa; 4], "bytes after the header are kept");
        assert_eq!(CmaHeader::parse(&b).unwrap(), h);
    }

    #[test]
    fn ipv6_header_bytes() {
        let h = CmaHeader {
            src_port: 7,
            src: "fe80::1".parse().unwrap(),
            dst: "::ffff:10.0.0.2".parse().unwrap(),
        };
        let mut b = [0u8; 36];
        h.emit(&mut b).unwrap();
        assert_eq!(b[1], 0x60);
        assert_eq!(&b[4..6], &[0xfe, 0x80]);
        assert_eq!(&b[30..36], &[0xff, 0xff, 10, 0, 0, 2]);
        assert_eq!(CmaHeader::parse(&b).unwrap(), h);
    }

    #[test]
    fn refusals() {
        let mut b = [0u8; 36];
        b[1] = 0x40;
        assert!(CmaHeader::parse(&b).is_ok());
        assert_eq!(CmaHeader::parse(&b[..35]), Err(WireError::CmaTooShort(35)));
        b[0] = 1;
        assert_eq!(CmaHeader::parse(&b), Err(WireError::CmaVersion(1)));
        b[0] = 0;
        b[1] = 0x50;
        assert_eq!(CmaHeader::parse(&b), Err(WireError::CmaIpVersion(5)));
        let mixed = CmaHeader {
            src_port: 1,
            src: "10.0.0.1".parse().unwrap(),
            dst: "::1".parse().unwrap(),
        };
        assert_eq!(mixed.emit(&mut b), Err(WireError::CmaMixedFamilies));
        let ok = CmaHeader {
            dst: "10.0.0.2".parse().unwrap(),
            ..mixed
        };
        assert_eq!(ok.emit(&mut b[..20]), Err(WireError::CmaTooShort(20)));
    }

    #[test]
    fn service_ids() {
        // rping's default port and perftest's, in the TCP port space.
        assert_eq!(service_id(ps::TCP, 7174), 0x0000_0000_0106_1C06);
        assert_eq!(service_id(ps::TCP, 18515), 0x0000_0000_0106_4853);
        assert_eq!(service_id(ps::UDP, 1), 0x0111_0001);
        assert_eq!(ps_of(0x0000_0000_0106_1C06), ps::TCP);
        assert_eq!(port_of(0x0000_0000_0106_1C06), 7174);
    }

    fn arb_ip(v6: bool) -> impl Strategy<Value = IpAddr> {
        if v6 {
            any::<[u8; 16]>()
                .prop_map(|b| IpAddr::V6(Ipv6Addr::from(b)))
                .boxed()
        } else {
            any::<[u8; 4]>()
                .prop_map(|b| IpAddr::V4(Ipv4Addr::from(b)))
                .boxed()
        }
    }

    proptest! {
        #[test]
        fn header_round_trips(
            (src, dst) in any::<bool>().prop_flat_map(|v6| (arb_ip(v6), arb_ip(v6))),
            src_port: u16,
        ) {
            let h = CmaHeader { src_port, src, dst };
            let mut b = [0u8; 56];
            h.emit(&mut b).unwrap();
            prop_assert_eq!(CmaHeader::parse(&b).unwrap(), h);
        }

        #[test]
        fn header_parse_never_panics(b in proptest::collection::vec(any::<u8>(), 0..60)) {
            let _ = CmaHeader::parse(&b);
        }

        #[test]
        fn service_id_splits(ps: u16, port: u16) {
            let sid = service_id(ps, port);
            prop_assert_eq!((ps_of(sid), port_of(sid)), (ps, port));
        }
    }
}
