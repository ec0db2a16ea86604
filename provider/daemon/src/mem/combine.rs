//! Combining the writes of a receive batch.
//!
//! A multi-packet RDMA WRITE or SEND places its packets one MTU after the
//! other, and every pwrite of `/proc/<pid>/mem` costs a fixed 1.3-2 us
//! here: one pwrite of 64 KiB costs what 7 of 4 KiB do (measured: 16 x
//! 4 KiB 24 us, 1 x 64 KiB 11 us). So the first piece of a run is written
//! at once (its error, an unmapped page, is that packet's: the responder
//! NAKs it as before), and the pieces that follow it directly in the same
//! file are kept and written together, up to [`MAX_RUN`] bytes.
//!
//! What is kept lands before anything can observe it: before any read or
//! atomic through the daemon (`DeviceMemory` flushes first), before the
//! endpoint reports a completion (`Memory::flush_writes`), at the end of
//! every receive batch (before ACKs are sent) and send batch, and before a
//! region is deregistered or a client removed. A kept piece whose pwrite
//! fails later (the client unmapped part of a registered region between
//! two packets of one message) is lost and counted (`failed`), as a pinned
//! page the process no longer maps would swallow it on a kernel device.

use std::fs::File;
use std::sync::Arc;

use super::fileio::write;
use transport::qp::MemError;

/// Most bytes kept back in one run.
pub const MAX_RUN: usize = 64 * 1024;

/// The run being combined: bytes for `[at, at + buf.len())` of `mem`.
#[derive(Default)]
pub struct Combine {
    run: Option<(Arc<File>, u64)>,
    buf: Vec<u8>,
    /// Pieces written together with the one before them.
    pub combined: u64,
    /// Kept pieces whose write failed at the flush.
    pub failed: u64,
}

impl Combine {
    /// Writes `src` at `at` of `mem`: kept, if it continues the run, else
    /// (after the run is flushed) at once, starting a new run.
    pub fn write(&mut self, mem: Arc<File>, at: u64, src: &[u8]) -> Result<(), MemError> {
        if let Some((f, start)) = &self.run {
            let end = start.saturating_add(self.buf.len() as u64);
            if Arc::ptr_eq(f, &mem) && end == at && self.buf.len() + src.len() <= MAX_RUN {
                self.buf.extend_from_slice(src);
                self.combined += 1;
                return Ok(());
            }
        }
        self.flush();
        write(&mem, at, src)?;
        self.run = Some((mem, at.saturating_add(src.len() as u64)));
        Ok(())
    }

    /// Writes what is kept.
    pub fn flush(&mut self) {
        let Some((mem, at)) = self.run.take() else {
            return;
        };
        if !self.buf.is_empty() && write(&mem, at, &self.buf).is_err() {
            self.failed += 1;
        }
        self.buf.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    fn scratch(len: usize) -> Arc<File> {
        super::super::fileio::scratch_file(&vec![0u8; len])
    }

    fn contents(f: &File, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        f.read_exact_at(&mut v, 0).unwrap();
        v
    }

    #[test]
    fn a_run_lands_at_the_flush_and_its_first_piece_at_once() {
        let f = scratch(12_000);
        let mut c = Combine::default();
        c.write(Arc::clone(&f), 100, &[1; 4000]).unwrap();
        assert_eq!(&contents(&f, 12_000)[100..4100], &[1; 4000][..]);
        c.write(Arc::clone(&f), 4100, &[2; 4000]).unwrap();
        c.write(Arc::clone(&f), 8100, &[3; 100]).unwrap();
        assert_eq!(c.combined, 2);
        // Kept, not yet written.
        assert_eq!(contents(&f, 12_000)[4100], 0);
        c.flush();
        let v = contents(&f, 12_000);
        assert_eq!(&v[4100..8100], &[2; 4000][..]);
        assert_eq!(&v[8100..8200], &[3; 100][..]);
        assert_eq!(v[8200], 0);
        assert_eq!(c.failed, 0);
    }

    #[test]
    fn a_gap_another_file_or_a_full_run_starts_anew() {
        let f = scratch(200_000);
        let g = scratch(1000);
        let mut c = Combine::default();
        c.write(Arc::clone(&f), 0, &[1; 10]).unwrap();
        // A gap: the run is flushed, this piece written at once.
        c.write(Arc::clone(&f), 20, &[2; 10]).unwrap();
        assert_eq!(contents(&f, 30)[20..30], [2; 10]);
        // Another file: the same.
        c.write(Arc::clone(&g), 30, &[3; 10]).unwrap();
        assert_eq!(contents(&g, 40)[30..40], [3; 10]);
        assert_eq!(c.combined, 0);
        // A run never grows past MAX_RUN: the piece that would is written.
        c.write(Arc::clone(&f), 1000, &[4; 1000]).unwrap();
        for i in 0..(MAX_RUN / 1000) {
            c.write(Arc::clone(&f), 2000 + 1000 * i as u64, &[5; 1000])
                .unwrap();
        }
        c.flush();
        let v = contents(&f, 200_000);
        assert!(v[2000..2000 + MAX_RUN / 1000 * 1000]
            .iter()
            .all(|&b| b == 5));
    }

    #[test]
    fn a_first_piece_that_cannot_be_written_is_its_own_error() {
        let f = scratch(10);
        // A file opened read-only stands in for an unmapped page.
        let ro = Arc::new(std::fs::File::open(std::env::current_exe().unwrap()).unwrap());
        let mut c = Combine::default();
        assert!(c.write(Arc::clone(&ro), 0, &[1; 10]).is_err());
        // No run was started by the failed piece.
        c.write(Arc::clone(&f), 0, &[2; 5]).unwrap();
        assert_eq!(c.combined, 0);
    }
}
