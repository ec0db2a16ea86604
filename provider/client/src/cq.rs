//! Completion queues: a ring the daemon produces and this process consumes.
//! Polling and arming touch only shared memory.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::channel::CompChannel;
use super::context::{take_fd, unexpected, Context};
use super::error::{Error, Result};
use super::placement::{self, RingAlloc, RingKind};
use super::queue::WorkQueues;
use super::wc::Wc;
use rxu_abi::proto::abi::{Cqe, CQE_SIZE, CQE_STAMPED_SIZE};
use rxu_abi::proto::{Request, Response};
use rxu_abi::ring::Consumer;

/// Arm values of the CQ ring's consumer-flag word.
pub const ARM_NEXT: u32 = 1;
pub const ARM_SOLICITED: u32 = 2;

/// What [`Cq::create_with`] asks for.
#[derive(Clone, Copy, Default)]
pub struct CqOptions<'a> {
    pub cqe: u32,
    pub comp_vector: u32,
    /// Events go here (if any), carrying `user_handle`.
    pub channel: Option<&'a CompChannel>,
    pub user_handle: u64,
    /// Every completion carries the times it was made
    /// ([`Wc::completion_ts`], [`Wc::completion_wallclock_ns`]).
    pub timestamps: bool,
    /// Where the ring is mapped (a parent domain's allocator).
    pub rings: Option<&'a Arc<dyn RingAlloc>>,
}

/// A completion queue. Clones share it; a QP holds clones of its CQs.
#[derive(Clone)]
pub struct Cq {
    inner: Arc<CqInner>,
}

struct CqInner {
    ctx: Context,
    handle: u32,
    user_handle: u64,
    cqe: AtomicU32,
    state: Mutex<CqState>,
    channel: Option<CompChannel>,
    /// Where its rings are mapped (a resize's too).
    rings: Option<Arc<dyn RingAlloc>>,
    events_acked: AtomicU32,
    live: AtomicBool,
}

/// The ring and the QPs completing to it.
struct CqState {
    ring: Consumer,
    qps: Vec<Attached>,
    /// Index in `qps` of the last QP a completion named (usually the next).
    last: usize,
}

struct Attached {
    qpn: u32,
    queues: Arc<WorkQueues>,
    /// This CQ is the QP's send CQ / receive CQ.
    sends: bool,
    recvs: bool,
}

impl CqState {
    /// Accounts one polled completion to its QP's queue.
    fn completed(&mut self, wc: &Wc) {
        let hit = match self.qps.get(self.last) {
            Some(a) if a.qpn == wc.qp_num => Some(self.last),
            _ => self.qps.iter().position(|a| a.qpn == wc.qp_num),
        };
        if let Some(i) = hit {
            self.last = i;
            self.qps[i].queues.completed(wc);
        }
    }

    /// WR_FLUSH_ERR completions for the outstanding work of its QPs.
    fn flush_into(&mut self, out: &mut [Wc]) -> usize {
        let mut n = 0;
        for a in &self.qps {
            if n == out.len() {
                break;
            }
            n += a.queues.flush_into(a.qpn, a.sends, a.recvs, &mut out[n..]);
        }
        n
    }
}

fn attach_cq_ring(
    fds: &mut Vec<std::os::fd::OwnedFd>,
    rings: Option<&Arc<dyn RingAlloc>>,
) -> Result<Consumer> {
    let ring = placement::attach(take_fd(fds, "CQ ring")?, rings, RingKind::Cq)?;
    if (ring.slot_size() as usize) < CQE_SIZE {
        return Err(Error::Protocol(format!(
            "CQ ring slots of {} bytes",
            ring.slot_size()
        )));
    }
    Ok(ring.into_consumer())
}

impl Cq {
    /// Creates a CQ of at least `cqe` entries. Events go to `channel` (if
    /// any) carrying `user_handle`, which async events carry too.
    pub fn create(
        ctx: &Context,
        cqe: u32,
        comp_vector: u32,
        channel: Option<&CompChannel>,
        user_handle: u64,
    ) -> Result<Cq> {
        Self::create_with(
            ctx,
            &CqOptions {
                cqe,
                comp_vector,
                channel,
                user_handle,
                ..CqOptions::default()
            },
        )
    }

    /// Creates a CQ as [`Cq::create`] does, with the extended options.
    pub fn create_with(ctx: &Context, o: &CqOptions<'_>) -> Result<Cq> {
        let CqOptions {
            cqe,
            comp_vector,
            channel,
            user_handle,
            timestamps,
            rings,
        } = *o;
        ctx.doorbell()?;
        let req = Request::CreateCq {
            cqe,
            comp_vector,
            user_handle,
            channel: channel.is_some(),
            timestamps,
        };
        let fds: Vec<_> = channel.iter().map(|c| c.write_end()).collect();
        let (resp, mut rfds) = ctx.call(&req, &fds)?;
        let Response::Cq { cq, cqe } = resp else {
            return Err(unexpected("Cq", &resp));
        };
        let consumer = match attach_cq_ring(&mut rfds, rings) {
            Ok(c) => c,
            Err(e) => {
                let _ = ctx.call_ok(&Request::DestroyCq { cq });
                return Err(e);
            }
        };
        if let (Some(h), Some(ch)) = (ctx.health(), channel) {
            h.watch_channel(ch);
        }
        Ok(Cq {
            inner: Arc::new(CqInner {
                ctx: ctx.clone(),
                handle: cq,
                user_handle,
                cqe: AtomicU32::new(cqe),
                state: Mutex::new(CqState {
                    ring: consumer,
                    qps: Vec::new(),
                    last: 0,
                }),
                channel: channel.cloned(),
                rings: rings.cloned(),
                events_acked: AtomicU32::new(0),
                live: AtomicBool::new(true),
            }),
        })
    }

    /// The daemon's CQ handle.
    pub fn handle(&self) -> u32 {
        self.inner.handle
    }

    pub fn user_handle(&self) -> u64 {
        self.inner.user_handle
    }

    /// Entries the CQ holds (at least what was asked for).
    pub fn cqe(&self) -> u32 {
        self.inner.cqe.load(Ordering::Relaxed)
    }

    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    pub fn channel(&self) -> Option<&CompChannel> {
        self.inner.channel.as_ref()
    }

    fn state(&self) -> MutexGuard<'_, CqState> {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `other` is this same CQ.
    pub fn same(&self, other: &Cq) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// A QP completes to this CQ (its sends, its receives or both).
    pub(crate) fn attach(&self, qpn: u32, queues: &Arc<WorkQueues>, sends: bool, recvs: bool) {
        let mut st = self.state();
        match st.qps.iter_mut().find(|a| a.qpn == qpn) {
            Some(a) => {
                a.sends |= sends;
                a.recvs |= recvs;
            }
            None => st.qps.push(Attached {
                qpn,
                queues: queues.clone(),
                sends,
                recvs,
            }),
        }
    }

    /// The QP is gone.
    pub(crate) fn detach(&self, qpn: u32) {
        let mut st = self.state();
        st.qps.retain(|a| a.qpn != qpn);
        st.last = 0;
    }

    /// Drops the unpolled completions of QP `qpn` (moved to RESET), as
    /// mlx4, mlx5 and hns clean their CQs: a QP restarted from RESET does
    /// not find its old work's completions (the daemon dropped those it had
    /// not written yet). Returns how many.
    pub(crate) fn clean(&self, qpn: u32) -> Result<u32> {
        let mut st = self.state();
        let mut buf = vec![0u8; st.ring.slot_size()];
        Ok(st
            .ring
            .retain(&mut buf, |b| Cqe::new_unchecked(b).qp_num() != qpn)?)
    }

    /// Moves up to `wc.len()` completions into `wc`; returns how many. No
    /// system call. A corrupt ring is a protocol error. Once the device's
    /// daemon is gone: the completions it wrote, then WR_FLUSH_ERR ones for
    /// the work still outstanding on this CQ's QPs, then
    /// [`Error::DeviceFatal`].
    pub fn poll(&self, wc: &mut [Wc]) -> Result<usize> {
        let mut st = self.state();
        let st = &mut *st;
        let mut buf = [0u8; CQE_STAMPED_SIZE];
        // The entry with its timestamps, if the slots have room for them.
        let len = st.ring.slot_size().min(CQE_STAMPED_SIZE);
        let buf = &mut buf[..len];
        let mut n = 0;
        while n < wc.len() {
            let Some(slot) = st.ring.peek()? else {
                break;
            };
            slot.read(0, buf)?;
            slot.release();
            // At least CQE_SIZE bytes (attach checks): the view cannot run
            // short.
            let w = Wc::from_cqe(&Cqe::new_unchecked(&*buf));
            if !st.qps.is_empty() {
                st.completed(&w);
            }
            wc[n] = w;
            n += 1;
        }
        // Only a dead daemon's ring is final: flush after it is drained.
        if n < wc.len() && self.inner.ctx.is_dead() {
            n += st.flush_into(&mut wc[n..]);
            if n == 0 {
                return Err(Error::DeviceFatal);
            }
        }
        Ok(n)
    }

    /// Arms the CQ: the next completion (or, with `solicited_only`, the
    /// next solicited one) sends one event to the channel. No system call.
    /// Poll again after arming: completions already queued send nothing.
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        if self.inner.channel.is_none() {
            // As the kernel: arming a CQ without a channel is allowed and
            // simply never signals.
            return Ok(());
        }
        let v = if solicited_only {
            ARM_SOLICITED
        } else {
            ARM_NEXT
        };
        self.state().ring.set_flag(v);
        Ok(())
    }

    /// Counts `n` events of this CQ as handled (`ibv_ack_cq_events`).
    pub fn ack_events(&self, n: u32) {
        self.inner.events_acked.fetch_add(n, Ordering::Relaxed);
    }

    pub fn events_acked(&self) -> u32 {
        self.inner.events_acked.load(Ordering::Relaxed)
    }

    /// Resizes to at least `cqe` entries; returns the new size. The daemon
    /// moves unpolled completions into the new ring, which replaces the
    /// old one once the reply is in (polling waits meanwhile).
    pub fn resize(&self, cqe: u32) -> Result<u32> {
        let mut st = self.state();
        let (resp, mut fds) = self.inner.ctx.call(
            &Request::ResizeCq {
                cq: self.inner.handle,
                cqe,
            },
            &[],
        )?;
        let Response::Cq { cqe, .. } = resp else {
            return Err(unexpected("Cq", &resp));
        };
        st.ring = attach_cq_ring(&mut fds, self.inner.rings.as_ref())?;
        self.inner.cqe.store(cqe, Ordering::Relaxed);
        Ok(cqe)
    }

    /// Destroys now, reporting errors (EBUSY while a QP uses it). On
    /// failure the CQ is handed back unchanged.
    pub fn destroy(self) -> Result<(), (Cq, Error)> {
        match self.inner.destroy() {
            Ok(()) => Ok(()),
            Err(e) => Err((self, e)),
        }
    }
}

impl CqInner {
    fn destroy(&self) -> Result<()> {
        self.ctx.call_ok(&Request::DestroyCq { cq: self.handle })?;
        self.live.store(false, Ordering::Relaxed);
        // As the kernel: events of a destroyed CQ are dropped unread.
        if let Some(ch) = &self.channel {
            ch.purge(self.user_handle);
        }
        Ok(())
    }
}

impl Drop for CqInner {
    fn drop(&mut self) {
        if self.live.load(Ordering::Relaxed) {
            let _ = self.destroy();
        }
    }
}
