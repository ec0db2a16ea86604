//! Arbitrary bytes as a CM MAD (the UD payload rxud's CM receives on QP1).
//!
//! [`run`] panics on a finding: a panic in `parse`, `emit`, the rdma_cm
//! header codec or the summary; or a MAD that parses but does not come
//! back unchanged through emit -> parse (likewise for the rdma_cm header
//! found in REQ / SIDR_REQ private data).

use rxu_cm::wire::{emit, parse, CmMsg, CmaHeader, MAD_LEN};

/// What one input did.
#[derive(Clone, Copy, Debug, Default)]
pub struct Outcome {
    /// Inputs that parsed as a CM MAD.
    pub parsed: u64,
    /// Inputs parse refused.
    pub refused: u64,
    /// rdma_cm headers that parsed (and round-tripped).
    pub cma: u64,
}

impl Outcome {
    pub fn add(&mut self, o: Outcome) {
        self.parsed += o.parsed;
        self.refused += o.refused;
        self.cma += o.cma;
    }
}

/// Checks one input.
pub fn run(data: &[u8]) -> Outcome {
    let mut o = Outcome::default();
    let _ = CmaHeader::parse(data);
    let mad = match parse(data) {
        Ok(m) => m,
        Err(e) => {
            let _ = e.to_string();
            o.refused = 1;
            return o;
        }
    };
    o.parsed = 1;
    let _ = mad.summary().to_string();
    let mut out = [0u8; MAD_LEN];
    emit(&mad, &mut out);
    let again = parse(&out).expect("an emitted MAD parses");
    assert_eq!(again, mad, "emit -> parse changed the MAD");
    let pd: Option<&[u8]> = match &mad.msg {
        CmMsg::Req(r) => Some(&r.private_data),
        CmMsg::SidrReq(r) => Some(&r.private_data),
        _ => None,
    };
    if let Some(Ok(h)) = pd.map(CmaHeader::parse) {
        let mut b = [0u8; 36];
        h.emit(&mut b).expect("a parsed header re-emits");
        assert_eq!(CmaHeader::parse(&b), Ok(h), "rdma_cm header round trip");
        o.cma = 1;
    }
    o
}
