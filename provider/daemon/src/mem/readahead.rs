//! Reading ahead in a client's memory within one send batch.
//!
//! Every pread of `/proc/<pid>/mem` costs a fixed 1.3-2 us on these
//! machines, the same for 8 bytes as for 4 KiB, while one pread of 64 KiB
//! costs about what 7 of 4 KiB do (measured: 16 x 4 KiB 23 us, 1 x 64 KiB
//! 10 us). A multi-packet message reads its SGE one MTU at a time, so
//! when a piece of at least [`MIN_PIECE`] bytes has more of its SGE after
//! it, the rest (up to [`MAX_AHEAD`], never past the region) is read with
//! it and the following packets are served from the copy.
//!
//! The copy lives for one send batch (`Memory::end_batch`) and is dropped
//! at once when anything writes to that client's memory through the
//! daemon. Within a batch no new WQE is taken from a ring, and the bytes
//! of a posted WQE's buffer may not change until it completes, so the
//! copy is what a pread would have returned. Key, PD, access and bounds
//! are checked for every access before the copy is consulted.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

/// Smallest read that reads ahead: an MTU-sized packet's payload, not
/// a small message (which would pay for a long read it never uses).
pub const MIN_PIECE: usize = 1024;
/// Most bytes one read-ahead takes.
pub const MAX_AHEAD: usize = 64 * 1024;

/// The bytes at `[at, at + len)` of one client's memory file.
#[derive(Default)]
pub struct ReadAhead {
    kept: Option<(Arc<File>, u64)>,
    /// [`MAX_AHEAD`] bytes once first used (allocated and zeroed once,
    /// not per read); the first `len` are the kept ones.
    buf: Vec<u8>,
    len: usize,
    /// Reads served from the copy (for `rxu stats`).
    pub hits: u64,
}

impl ReadAhead {
    /// Copies `dst.len()` bytes at `at` from the kept bytes, if they hold
    /// them.
    pub fn serve(&mut self, mem: &Arc<File>, at: u64, dst: &mut [u8]) -> bool {
        let Some((f, start)) = &self.kept else {
            return false;
        };
        if !Arc::ptr_eq(f, mem) || at < *start {
            return false;
        }
        let off = (at - start) as usize;
        let Some(src) = off
            .checked_add(dst.len())
            .and_then(|end| self.buf[..self.len].get(off..end))
        else {
            return false;
        };
        dst.copy_from_slice(src);
        self.hits += 1;
        true
    }

    /// Reads `dst` at `at` and, in the same call, up to `ahead` more
    /// bytes (clipped to [`MAX_AHEAD`] in all and to `limit`, the end of
    /// the region in the file), keeping them. False when the long read
    /// failed (some of the bytes ahead are not mapped): the caller reads
    /// `dst` alone, which reports the right error for it.
    pub fn fill(
        &mut self,
        mem: &Arc<File>,
        at: u64,
        dst: &mut [u8],
        ahead: u64,
        limit: u64,
    ) -> bool {
        let room = limit.saturating_sub(at);
        let want = (dst.len() as u64)
            .saturating_add(ahead)
            .min(MAX_AHEAD as u64)
            .min(room) as usize;
        if dst.len() < MIN_PIECE || want <= dst.len() {
            return false;
        }
        self.clear();
        if self.buf.len() < MAX_AHEAD {
            self.buf.resize(MAX_AHEAD, 0);
        }
        let buf = &mut self.buf[..want];
        let fd = std::os::fd::AsRawFd::as_raw_fd(&**mem);
        match super::watch::memory(fd, at, || mem.read_exact_at(buf, at)) {
            (Ok(()), false) => {}
            _ => return false,
        }
        dst.copy_from_slice(&self.buf[..dst.len()]);
        self.len = want;
        self.kept = Some((Arc::clone(mem), at));
        true
    }

    /// Something wrote to `mem`: the copy may be stale.
    pub fn wrote(&mut self, mem: &Arc<File>) {
        if self.kept.as_ref().is_some_and(|(f, _)| Arc::ptr_eq(f, mem)) {
            self.clear();
        }
    }

    /// Forgets the kept bytes.
    pub fn clear(&mut self) {
        self.kept = None;
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_with(data: &[u8]) -> Arc<File> {
        super::super::fileio::scratch_file(data)
    }

    #[test]
    fn serves_the_rest_of_a_piece_and_nothing_else() {
        let data: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        let f = file_with(&data);
        let mut ra = ReadAhead::default();
        let mut a = vec![0u8; 4096];
        assert!(ra.fill(&f, 100, &mut a, 8192, data.len() as u64));
        assert_eq!(a, data[100..4196]);
        let mut b = vec![0u8; 4096];
        assert!(ra.serve(&f, 4196, &mut b));
        assert_eq!(b, data[4196..8292]);
        // The piece and the 8192 bytes ahead were read: up to 12388.
        let mut c = vec![0u8; 4096];
        assert!(ra.serve(&f, 8292, &mut c));
        assert_eq!(c, data[8292..12388]);
        // Past what was read, before it, or another file: no.
        assert!(!ra.serve(&f, 8293, &mut c));
        assert!(!ra.serve(&f, 99, &mut c[..1]));
        let g = file_with(&data);
        assert!(!ra.serve(&g, 200, &mut c[..1]));
        assert_eq!(ra.hits, 2);
        // A write to the file drops the copy; one to another does not.
        ra.wrote(&g);
        assert!(ra.serve(&f, 200, &mut c[..1]));
        ra.wrote(&f);
        assert!(!ra.serve(&f, 200, &mut c[..1]));
    }

    #[test]
    fn small_pieces_and_the_region_end_do_not_read_ahead() {
        let data = vec![7u8; 10_000];
        let f = file_with(&data);
        let mut ra = ReadAhead::default();
        let mut small = vec![0u8; 64];
        assert!(!ra.fill(&f, 0, &mut small, 8192, 10_000));
        let mut a = vec![0u8; 4096];
        // The region ends right after the piece.
        assert!(!ra.fill(&f, 0, &mut a, 8192, 4096));
        // Clipped to the region: the bytes past its end are not kept.
        assert!(ra.fill(&f, 0, &mut a, 8192, 6000));
        assert!(ra.serve(&f, 4096, &mut vec![0u8; 1904]));
        assert!(!ra.serve(&f, 4096, &mut vec![0u8; 1905]));
        // Past the end of the file (unmapped): the long read fails.
        assert!(!ra.fill(&f, 8000, &mut a, 8192, u64::MAX));
        assert!(!ra.serve(&f, 8000, &mut a));
    }
}
