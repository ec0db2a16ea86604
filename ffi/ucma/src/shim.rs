//! The device as the interposed libc calls see it: one lock around the
//! core, and GET_EVENT, which blocks in `recv` on the channel fd without
//! the lock (a CM thread waits there while others issue commands).

use std::os::fd::RawFd;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use crate::abi;
use crate::command::{self, Command, Errno};
use crate::core::Ucma;
use crate::event::{self, MAX_RECORD};
use crate::mem;

/// GET_EVENT found the channel's other end gone: the application closed
/// the fd while this thread waited in GET_EVENT (rping's CM thread does).
/// The kernel's file lives on while the write is in progress and no event
/// ever comes: the thread waits until the process ends, as it would there.
fn closed_meanwhile(fd: RawFd) -> Result<(), Errno> {
    // SAFETY: F_GETFL only reads the descriptor's flags (or fails).
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if fl >= 0 && fl & libc::O_NONBLOCK != 0 {
        return Err(libc::EAGAIN);
    }
    loop {
        // SAFETY: pause has no preconditions; it returns after a signal
        // handler ran, and the wait goes on (a restarted GET_EVENT).
        unsafe { libc::pause() };
    }
}

pub struct Shim {
    ucma: Mutex<Ucma>,
}

impl Shim {
    pub fn new(runtime_dir: PathBuf) -> Self {
        Shim {
            ucma: Mutex::new(Ucma::new(runtime_dir)),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, Ucma> {
        self.ucma.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An open of the device with open(2) `flags`.
    pub fn open(&self, flags: i32) -> Result<RawFd, Errno> {
        self.lock()
            .open(flags & libc::O_CLOEXEC != 0, flags & libc::O_NONBLOCK != 0)
    }

    pub fn close(&self, fd: RawFd) {
        self.lock().close(fd)
    }

    /// One `write(fd, buf, len)` on a channel: Ok means the kernel would
    /// have returned `len`.
    pub fn write(&self, fd: RawFd, buf: u64, len: usize) -> Result<(), Errno> {
        let mut bytes = [0u8; abi::HDR_LEN + 296];
        if len < abi::HDR_LEN {
            return Err(libc::EINVAL);
        }
        mem::read(buf, &mut bytes[..abi::HDR_LEN])?;
        let h = command::header(&bytes[..abi::HDR_LEN], len)?;
        // The kernel copies sizeof(cmd) bytes; fall back to the write's
        // own length for a buffer that ends early (ECE-less CONNECT).
        let full = command::wire_len(&h);
        let got = [full, len.min(full)]
            .into_iter()
            .find(|&n| mem::read(buf, &mut bytes[..n]).is_ok())
            .unwrap_or(abi::HDR_LEN);
        match command::decode(&bytes[..got], len)? {
            Command::GetEvent { response, out_len } => self.get_event(fd, response, out_len),
            c => self.lock().command(fd, c),
        }
    }

    /// GET_EVENT: the next record on the channel that is still an event
    /// (records of destroyed ids are dropped), blocking unless the fd is
    /// O_NONBLOCK (then EAGAIN), as the kernel.
    fn get_event(&self, fd: RawFd, response: u64, out_len: usize) -> Result<(), Errno> {
        let n = out_len.min(abi::EVENT_RESP_LEN);
        // The kernel keeps the event when the copy faults: check first.
        mem::probe_writable(response, n)?;
        let mut buf = [0u8; MAX_RECORD];
        loop {
            let len = match event::recv_raw(fd, &mut buf, 0) {
                Ok(0) => return closed_meanwhile(fd),
                Ok(len) => len,
                Err(libc::EINTR) => return Err(libc::EINTR),
                Err(e) => return Err(e),
            };
            if let Some(resp) = self.lock().translate(fd, &buf[..len]) {
                return mem::write(response, &resp[..n]);
            }
        }
    }
}
