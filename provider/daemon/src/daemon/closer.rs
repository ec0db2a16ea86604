//! Closes the fds rxud refuses because they are files on FUSE: a close
//! sends FLUSH to the file system's server and waits for the answer, so
//! it runs on this thread, watched by the watchdog (which ends the wait
//! on the sender's own FUSE connection), never on the loop.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::mem::watch::{self, Slot};

pub struct Closer {
    tx: Option<Sender<(OwnedFd, u64, u32)>>,
    thread: Option<JoinHandle<()>>,
    pub slot: Arc<Slot>,
}

impl Closer {
    pub fn start() -> std::io::Result<Closer> {
        let (tx, rx) = channel::<(OwnedFd, u64, u32)>();
        let slot = Arc::new(Slot::default());
        let mine = Arc::clone(&slot);
        let thread = std::thread::Builder::new()
            .name("rxud-closer".into())
            .spawn(move || {
                // A close needs no capability (they are per thread).
                let _ = super::privs::drop_to(0);
                watch::install(mine);
                for (fd, conn, uid) in rx {
                    let raw = fd.as_raw_fd();
                    let _ = watch::closing(raw, conn, uid, move || drop(fd));
                }
            })?;
        Ok(Closer {
            tx: Some(tx),
            thread: Some(thread),
            slot,
        })
    }

    /// Closes `fd`, a file on FUSE connection `conn` that `uid` passed.
    pub fn close(&self, fd: OwnedFd, conn: u64, uid: u32) {
        if let Some(tx) = &self.tx {
            // The thread only ends when the Closer drops.
            let _ = tx.send((fd, conn, uid));
        }
    }
}

impl Drop for Closer {
    fn drop(&mut self) {
        // The thread ends once it has closed what it was given. Not
        // joined: a close may wait on a FUSE server the watchdog could not
        // end, and rxud must still be able to stop.
        self.tx = None;
        drop(self.thread.take());
    }
}
