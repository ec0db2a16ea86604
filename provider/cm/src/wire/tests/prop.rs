//! Round trips and robustness over arbitrary values and bytes.

use proptest::prelude::*;

use super::arb;
use crate::wire::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Every message, any field values within their widths.
    #[test]
    fn parse_emit_round_trips(m in arb::mad()) {
        let mut b = [0u8; MAD_LEN];
        emit(&m, &mut b);
        prop_assert_eq!(parse(&b).unwrap(), m);
    }

    #[test]
    fn parse_never_panics(b in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = parse(&b);
    }

    /// Arbitrary bytes behind a valid header: always a message, and
    /// re-emitting it gives the same message (only reserved bits may be
    /// lost, so the bytes are compared through parse).
    #[test]
    fn any_data_area_parses_and_re_emits(
        attr in 0x10u16..=0x18,
        tid: u64,
        data in proptest::collection::vec(any::<u8>(), DATA_LEN..=DATA_LEN + 16),
    ) {
        let mut b = vec![1, 0x07, 2, 0x03, 0, 0, 0, 0];
        b.extend_from_slice(&tid.to_be_bytes());
        b.extend_from_slice(&attr.to_be_bytes());
        b.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
        b.extend_from_slice(&data);
        let m = parse(&b).unwrap();
        prop_assert_eq!(m.msg.attr_id() as u16, attr);
        let mut out = [0u8; MAD_LEN];
        emit(&m, &mut out);
        let _ = m.summary().to_string();
        prop_assert_eq!(parse(&out).unwrap(), m);
    }
}
