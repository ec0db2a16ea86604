//! One scatter/gather element as stored after a slot header, and the
//! iterator that reads a slot's SGE array in place.

use transport::verbs::Sge;

use super::{get_u32, get_u64, put, SGE_SIZE};

/// One SGE as stored after a slot header: `{ u64 addr, u32 length, u32 lkey }`.
pub mod sge_field {
    use super::super::Field;
    pub const ADDR: Field = 0..8;
    pub const LENGTH: Field = 8..12;
    pub const LKEY: Field = 12..16;
}

/// The bytes of one SGE.
pub fn emit_sge(s: &Sge) -> [u8; SGE_SIZE] {
    let mut b = [0u8; SGE_SIZE];
    put(&mut b, sge_field::ADDR, &s.addr.to_le_bytes());
    put(&mut b, sge_field::LENGTH, &s.length.to_le_bytes());
    put(&mut b, sge_field::LKEY, &s.lkey.to_le_bytes());
    b
}

pub(super) fn parse_sge(b: &[u8; SGE_SIZE]) -> Sge {
    Sge {
        addr: get_u64(b, sge_field::ADDR),
        length: get_u32(b, sge_field::LENGTH),
        lkey: get_u32(b, sge_field::LKEY),
    }
}

/// The SGEs of a slot body, read in place (no allocation). Stops early,
/// rather than panicking, if the body is shorter than the count says.
#[derive(Clone, Debug)]
pub struct Sges<'a> {
    chunks: std::slice::ChunksExact<'a, u8>,
    left: usize,
}

impl<'a> Sges<'a> {
    pub(super) fn new(body: &'a [u8], n: usize) -> Sges<'a> {
        Sges {
            chunks: body.chunks_exact(SGE_SIZE),
            left: n,
        }
    }
}

impl Iterator for Sges<'_> {
    type Item = Sge;
    fn next(&mut self) -> Option<Sge> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let c: &[u8; SGE_SIZE] = self.chunks.next()?.try_into().ok()?;
        Some(parse_sge(c))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.left.min(self.chunks.len());
        (n, Some(n))
    }
}

impl ExactSizeIterator for Sges<'_> {}

pub(super) fn put_sges(body: &mut [u8], sges: &[Sge]) {
    for (c, s) in body.chunks_exact_mut(SGE_SIZE).zip(sges) {
        c.copy_from_slice(&emit_sge(s));
    }
}
