//! Scatter/gather lists: copying a message to or from a list of SGEs at a
//! byte offset. A cursor remembers where the last copy ended so that
//! sequential packets cost O(1); any other offset walks from the start
//! (retries only).

use super::memory::{MemError, Memory};
use super::types::{Payload, Sge};

/// Position in an SGE list: byte `pos` of the message is byte `off` of
/// SGE `idx`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SgCursor {
    pos: u64,
    idx: usize,
    off: u64,
}

impl SgCursor {
    fn seek(&mut self, sges: &[Sge], pos: u64) {
        if self.pos == pos {
            return;
        }
        let (mut idx, mut rem) = (0, pos);
        while idx < sges.len() && rem >= u64::from(sges[idx].length) {
            rem -= u64::from(sges[idx].length);
            idx += 1;
        }
        *self = SgCursor { pos, idx, off: rem };
    }

    /// Calls `f(sge, addr, range, rest)` for each piece of `len` bytes at
    /// message offset `pos`; `range` indexes the caller's buffer, `rest`
    /// is what the SGE holds after the piece.
    fn walk(
        &mut self,
        sges: &[Sge],
        pos: u64,
        len: usize,
        mut f: impl FnMut(&Sge, u64, std::ops::Range<usize>, u64) -> Result<(), MemError>,
    ) -> Result<(), MemError> {
        self.seek(sges, pos);
        let mut done = 0usize;
        while done < len {
            let sge = sges.get(self.idx).ok_or(MemError::OutOfBounds)?;
            let avail = u64::from(sge.length) - self.off;
            if avail == 0 {
                self.idx += 1;
                self.off = 0;
                continue;
            }
            let n = avail.min((len - done) as u64) as usize;
            let addr = sge
                .addr
                .checked_add(self.off)
                .ok_or(MemError::OutOfBounds)?;
            f(sge, addr, done..done + n, avail - n as u64)?;
            done += n;
            self.off += n as u64;
            self.pos += n as u64;
        }
        Ok(())
    }
}

/// Total bytes an SGE list holds.
pub(crate) fn capacity(sges: &[Sge]) -> u64 {
    sges.iter().map(|s| u64::from(s.length)).sum()
}

/// Reads `dst.len()` bytes of the message at offset `pos` into `dst`.
pub(crate) fn gather(
    mem: &mut dyn Memory,
    pd: u32,
    payload: &Payload,
    cur: &mut SgCursor,
    pos: u64,
    dst: &mut [u8],
) -> Result<(), MemError> {
    match payload {
        Payload::Inline(v) => {
            let start = usize::try_from(pos).map_err(|_| MemError::OutOfBounds)?;
            let src = start
                .checked_add(dst.len())
                .and_then(|end| v.get(start..end))
                .ok_or(MemError::OutOfBounds)?;
            dst.copy_from_slice(src);
            Ok(())
        }
        Payload::Sges(sges) => {
            let len = dst.len();
            cur.walk(sges, pos, len, |sge, addr, r, rest| {
                mem.read_local_ahead(pd, sge.lkey, addr, &mut dst[r], rest)
            })
        }
    }
}

/// Writes `src` into the SGE list at message offset `pos`.
pub(crate) fn scatter(
    mem: &mut dyn Memory,
    pd: u32,
    sges: &[Sge],
    cur: &mut SgCursor,
    pos: u64,
    src: &[u8],
) -> Result<(), MemError> {
    cur.walk(sges, pos, src.len(), |sge, addr, r, _| {
        mem.write_local(pd, sge.lkey, addr, &src[r])
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qp::memory::BufferMemory;
    use crate::qp::types::access;

    #[test]
    fn gather_scatter_across_sges() {
        let mut mem = BufferMemory::new();
        let k = mem.register(1, 0x1000, (0..100u8).collect(), access::LOCAL_WRITE);
        let sges = vec![
            Sge {
                addr: 0x1000,
                length: 10,
                lkey: k,
            },
            Sge {
                addr: 0x1000,
                length: 0,
                lkey: 0,
            },
            Sge {
                addr: 0x1020,
                length: 20,
                lkey: k,
            },
        ];
        let p = Payload::Sges(sges.clone());
        let mut cur = SgCursor::default();
        let mut out = [0u8; 15];
        gather(&mut mem, 1, &p, &mut cur, 0, &mut out[..7]).unwrap();
        gather(&mut mem, 1, &p, &mut cur, 7, &mut out[7..]).unwrap();
        let want: Vec<u8> = (0..10).chain(0x20..0x25).collect();
        assert_eq!(&out[..], &want[..]);
        // Out of order: walks again from the start.
        let mut two = [0u8; 2];
        gather(&mut mem, 1, &p, &mut SgCursor::default(), 9, &mut two).unwrap();
        assert_eq!(two, [9, 0x20]);
        // Past the end of the list.
        assert_eq!(
            gather(&mut mem, 1, &p, &mut cur, 25, &mut [0u8; 8]),
            Err(MemError::OutOfBounds)
        );
        let mut cur = SgCursor::default();
        scatter(&mut mem, 1, &sges, &mut cur, 8, &[0xAA; 4]).unwrap();
        let d = &mem.region(k).unwrap().data;
        assert_eq!(&d[8..10], &[0xAA, 0xAA]);
        assert_eq!(&d[0x20..0x23], &[0xAA, 0xAA, 0x22]);
        assert_eq!(capacity(&sges), 30);
    }

    #[test]
    fn inline_bounds() {
        let mut mem = BufferMemory::new();
        let p = Payload::Inline(vec![1, 2, 3]);
        let mut out = [0u8; 2];
        gather(&mut mem, 0, &p, &mut SgCursor::default(), 1, &mut out).unwrap();
        assert_eq!(out, [2, 3]);
        assert!(gather(&mut mem, 0, &p, &mut SgCursor::default(), 2, &mut out).is_err());
        assert!(gather(
            &mut mem,
            0,
            &p,
            &mut SgCursor::default(),
            u64::MAX,
            &mut out
        )
        .is_err());
    }
}
