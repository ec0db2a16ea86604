//! The libc entry points librdmacm and libibverbs reach the devices
//! through: `open` (and its variants) of `/dev/infiniband/rdma_cm` makes a
//! channel, `fstat` of one says "character device", `write` is a ucma
//! command and `close` destroys the channel's ids; `write` and `ioctl` on
//! an rxu context's `cmd_fd` go to the uverbs emulation, and `close` of
//! one of its completion channels forgets it. `dup2`, `dup3`,
//! `close_range` and `closefrom` close fds too (the number then names
//! another file, or nothing): each is a `close` of what it replaces. Every other call goes to
//! the next definition (libc, or another preload) after a bitmap load or
//! two.

use std::ffi::{c_char, c_int, c_uint, c_ulong, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use crate::fdset::FdSet;
use crate::shim::Shim;
use crate::uverbs::{abi as uverbs_abi, shim::Device};

/// The device librdmacm opens (`RDMA_CDEV_DIR "/rdma_cm"`).
const RDMA_CM: &[u8] = b"/dev/infiniband/rdma_cm\0";
/// The misc device numbers the kernel's ucma usually gets.
const UCMA_MAJOR: u32 = 10;
const UCMA_MINOR: u32 = 58;

/// The uverbs device's one ioctl request number.
const VERBS_IOCTL: c_ulong = uverbs_abi::RDMA_VERBS_IOCTL as c_ulong;

/// rdma_cm channel fds.
static CHANNELS: FdSet = FdSet::new();
/// The uverbs emulation (cmd_fds of rxu contexts, completion channels).
static UVERBS: Device = Device::new();

fn is_channel(fd: c_int) -> bool {
    CHANNELS.contains(fd)
}

fn mark(fd: c_int, on: bool) {
    if on {
        crate::owner::note();
        CHANNELS.insert(fd);
    } else {
        CHANNELS.remove(fd);
    }
}

pub(crate) fn uverbs() -> &'static Device {
    &UVERBS
}

fn shim() -> &'static Shim {
    static SHIM: OnceLock<Shim> = OnceLock::new();
    SHIM.get_or_init(|| Shim::new(rxu_abi::paths::runtime_dir()))
}

fn set_errno(e: i32) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// The next definition of a libc symbol, resolved once (0: none).
fn next(slot: &AtomicUsize, name: &'static [u8]) -> usize {
    let p = slot.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: `name` is a NUL-terminated literal; dlsym has no other
    // precondition and returns NULL when there is no next definition.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) } as usize;
    slot.store(p, Ordering::Relaxed);
    p
}

/// Declares `$fn` as the next definition of `$name` with type `$ty`.
macro_rules! next_fn {
    ($fn:ident, $name:literal, $ty:ty) => {
        fn $fn() -> Option<$ty> {
            static SLOT: AtomicUsize = AtomicUsize::new(0);
            let p = next(&SLOT, concat!($name, "\0").as_bytes());
            // SAFETY: a non-zero address dlsym returned for this libc
            // symbol, whose C type is $ty.
            (p != 0).then(|| unsafe { std::mem::transmute::<usize, $ty>(p) })
        }
    };
}

type OpenFn = unsafe extern "C" fn(*const c_char, c_int, c_uint) -> c_int;
type OpenatFn = unsafe extern "C" fn(c_int, *const c_char, c_int, c_uint) -> c_int;
type Open2Fn = unsafe extern "C" fn(*const c_char, c_int) -> c_int;
type FstatFn = unsafe extern "C" fn(c_int, *mut libc::stat) -> c_int;
type Fstat64Fn = unsafe extern "C" fn(c_int, *mut libc::stat64) -> c_int;
type FxstatFn = unsafe extern "C" fn(c_int, c_int, *mut libc::stat) -> c_int;
type Fxstat64Fn = unsafe extern "C" fn(c_int, c_int, *mut libc::stat64) -> c_int;
type WriteFn = unsafe extern "C" fn(c_int, *const c_void, usize) -> isize;
type CloseFn = unsafe extern "C" fn(c_int) -> c_int;
type IoctlFn = unsafe extern "C" fn(c_int, c_ulong, *mut c_void) -> c_int;
type Dup2Fn = unsafe extern "C" fn(c_int, c_int) -> c_int;
type Dup3Fn = unsafe extern "C" fn(c_int, c_int, c_int) -> c_int;
type CloseRangeFn = unsafe extern "C" fn(c_uint, c_uint, c_int) -> c_int;
type ClosefromFn = unsafe extern "C" fn(c_int);

next_fn!(next_open, "open", OpenFn);
next_fn!(next_open64, "open64", OpenFn);
next_fn!(next_openat, "openat", OpenatFn);
next_fn!(next_openat64, "openat64", OpenatFn);
next_fn!(next_open_2, "__open_2", Open2Fn);
next_fn!(next_open64_2, "__open64_2", Open2Fn);
next_fn!(next_fstat, "fstat", FstatFn);
next_fn!(next_fstat64, "fstat64", Fstat64Fn);
next_fn!(next_fxstat, "__fxstat", FxstatFn);
next_fn!(next_fxstat64, "__fxstat64", Fxstat64Fn);
next_fn!(next_write, "write", WriteFn);
next_fn!(next_close, "close", CloseFn);
next_fn!(next_ioctl, "ioctl", IoctlFn);
next_fn!(next_dup2, "dup2", Dup2Fn);
next_fn!(next_dup3, "dup3", Dup3Fn);
next_fn!(next_close_range, "close_range", CloseRangeFn);
next_fn!(next_closefrom, "closefrom", ClosefromFn);

/// Whether `path` is exactly the ucma device.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string (what open(2) requires).
unsafe fn is_rdma_cm(path: *const c_char) -> bool {
    if path.is_null() {
        return false;
    }
    for (i, &want) in RDMA_CM.iter().enumerate() {
        // SAFETY: every byte up to and including the first mismatch or the
        // terminating NUL lies inside the caller's string.
        if unsafe { *path.add(i) } as u8 != want {
            return false;
        }
    }
    true
}

/// Mode is an argument only with O_CREAT or O_TMPFILE (it is garbage
/// otherwise and must not be passed on as if it meant something).
fn mode_of(flags: c_int, mode: c_uint) -> c_uint {
    if flags & libc::O_CREAT != 0 || flags & libc::O_TMPFILE == libc::O_TMPFILE {
        mode
    } else {
        0
    }
}

fn open_channel(flags: c_int) -> c_int {
    match shim().open(flags) {
        Ok(fd) => {
            mark(fd, true);
            fd
        }
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

fn raw_openat(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: the openat syscall with the caller's arguments.
    unsafe { libc::syscall(libc::SYS_openat, dirfd, path, flags, mode) as c_int }
}

/// # Safety
/// As open(2). The third argument is variadic in C; on the supported ABIs
/// (x86_64, aarch64 Linux) a fixed integer parameter reads the same
/// register, and it is used only when the flags say a mode was passed.
// Rust 1.99+ checks definitions of the C library's own symbols; these are
// variadic in C and take a fixed integer here on purpose (see `open`).
#[allow(unknown_lints)]
#[allow(invalid_runtime_symbol_definitions)]
#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: the caller passes a path as open(2) requires.
    if unsafe { is_rdma_cm(path) } {
        return open_channel(flags);
    }
    let mode = mode_of(flags, mode);
    match next_open() {
        // SAFETY: the next `open` with the caller's arguments.
        Some(f) => unsafe { f(path, flags, mode) },
        None => raw_openat(libc::AT_FDCWD, path, flags, mode),
    }
}

/// # Safety
/// As open64(2); see [`open`].
// Rust 1.99+ checks definitions of the C library's own symbols; these are
// variadic in C and take a fixed integer here on purpose (see `open`).
#[allow(unknown_lints)]
#[allow(invalid_runtime_symbol_definitions)]
#[no_mangle]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: the caller passes a path as open(2) requires.
    if unsafe { is_rdma_cm(path) } {
        return open_channel(flags);
    }
    let mode = mode_of(flags, mode);
    match next_open64() {
        // SAFETY: the next `open64` with the caller's arguments.
        Some(f) => unsafe { f(path, flags, mode) },
        None => raw_openat(libc::AT_FDCWD, path, flags | libc::O_LARGEFILE, mode),
    }
}

/// # Safety
/// As openat(2); see [`open`]. Only the absolute path is recognised.
// Rust 1.99+ checks definitions of the C library's own symbols; these are
// variadic in C and take a fixed integer here on purpose (see `open`).
#[allow(unknown_lints)]
#[allow(invalid_runtime_symbol_definitions)]
#[no_mangle]
pub unsafe extern "C" fn openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    // SAFETY: the caller passes a path as openat(2) requires.
    if unsafe { is_rdma_cm(path) } {
        return open_channel(flags);
    }
    let mode = mode_of(flags, mode);
    match next_openat() {
        // SAFETY: the next `openat` with the caller's arguments.
        Some(f) => unsafe { f(dirfd, path, flags, mode) },
        None => raw_openat(dirfd, path, flags, mode),
    }
}

/// # Safety
/// As openat64(2); see [`open`].
// Rust 1.99+ checks definitions of the C library's own symbols; these are
// variadic in C and take a fixed integer here on purpose (see `open`).
#[allow(unknown_lints)]
#[allow(invalid_runtime_symbol_definitions)]
#[no_mangle]
pub unsafe extern "C" fn openat64(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    // SAFETY: the caller passes a path as openat(2) requires.
    if unsafe { is_rdma_cm(path) } {
        return open_channel(flags);
    }
    let mode = mode_of(flags, mode);
    match next_openat64() {
        // SAFETY: the next `openat64` with the caller's arguments.
        Some(f) => unsafe { f(dirfd, path, flags, mode) },
        None => raw_openat(dirfd, path, flags | libc::O_LARGEFILE, mode),
    }
}

/// # Safety
/// As glibc's fortified `__open_2` (no mode argument).
#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the caller passes a path as open(2) requires.
    if unsafe { is_rdma_cm(path) } {
        return open_channel(flags);
    }
    match next_open_2() {
        // SAFETY: the next `__open_2` with the caller's arguments.
        Some(f) => unsafe { f(path, flags) },
        None => raw_openat(libc::AT_FDCWD, path, flags, 0),
    }
}

/// # Safety
/// As glibc's fortified `__open64_2`.
#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: the caller passes a path as open(2) requires.
    if unsafe { is_rdma_cm(path) } {
        return open_channel(flags);
    }
    match next_open64_2() {
        // SAFETY: the next `__open64_2` with the caller's arguments.
        Some(f) => unsafe { f(path, flags) },
        None => raw_openat(libc::AT_FDCWD, path, flags | libc::O_LARGEFILE, 0),
    }
}

/// What fstat says about a channel: a character device, like the kernel's
/// misc device (librdmacm checks S_ISCHR).
fn as_chardev(mode: &mut libc::mode_t, rdev: &mut libc::dev_t) {
    *mode = libc::S_IFCHR | 0o666;
    *rdev = libc::makedev(UCMA_MAJOR, UCMA_MINOR);
}

fn raw_fstat(fd: c_int, buf: *mut c_void) -> c_int {
    // SAFETY: the fstat syscall with the caller's buffer (struct stat and
    // stat64 are the same on the supported 64-bit ABIs).
    unsafe { libc::syscall(libc::SYS_fstat, fd, buf) as c_int }
}

/// # Safety
/// As fstat(2).
#[no_mangle]
pub unsafe extern "C" fn fstat(fd: c_int, buf: *mut libc::stat) -> c_int {
    let r = match next_fstat() {
        // SAFETY: the next `fstat` with the caller's arguments.
        Some(f) => unsafe { f(fd, buf) },
        None => raw_fstat(fd, buf.cast()),
    };
    if r == 0 && is_channel(fd) && !buf.is_null() {
        // SAFETY: fstat just filled *buf, so it is a valid struct stat.
        let s = unsafe { &mut *buf };
        as_chardev(&mut s.st_mode, &mut s.st_rdev);
    }
    r
}

/// # Safety
/// As fstat64(2).
#[no_mangle]
pub unsafe extern "C" fn fstat64(fd: c_int, buf: *mut libc::stat64) -> c_int {
    let r = match next_fstat64() {
        // SAFETY: the next `fstat64` with the caller's arguments.
        Some(f) => unsafe { f(fd, buf) },
        None => raw_fstat(fd, buf.cast()),
    };
    if r == 0 && is_channel(fd) && !buf.is_null() {
        // SAFETY: fstat64 just filled *buf.
        let s = unsafe { &mut *buf };
        as_chardev(&mut s.st_mode, &mut s.st_rdev);
    }
    r
}

/// # Safety
/// As glibc's `__fxstat` (the fstat of glibc before 2.33).
#[no_mangle]
pub unsafe extern "C" fn __fxstat(ver: c_int, fd: c_int, buf: *mut libc::stat) -> c_int {
    let r = match next_fxstat() {
        // SAFETY: the next `__fxstat` with the caller's arguments.
        Some(f) => unsafe { f(ver, fd, buf) },
        None => raw_fstat(fd, buf.cast()),
    };
    if r == 0 && is_channel(fd) && !buf.is_null() {
        // SAFETY: __fxstat just filled *buf.
        let s = unsafe { &mut *buf };
        as_chardev(&mut s.st_mode, &mut s.st_rdev);
    }
    r
}

/// # Safety
/// As glibc's `__fxstat64`.
#[no_mangle]
pub unsafe extern "C" fn __fxstat64(ver: c_int, fd: c_int, buf: *mut libc::stat64) -> c_int {
    let r = match next_fxstat64() {
        // SAFETY: the next `__fxstat64` with the caller's arguments.
        Some(f) => unsafe { f(ver, fd, buf) },
        None => raw_fstat(fd, buf.cast()),
    };
    if r == 0 && is_channel(fd) && !buf.is_null() {
        // SAFETY: __fxstat64 just filled *buf.
        let s = unsafe { &mut *buf };
        as_chardev(&mut s.st_mode, &mut s.st_rdev);
    }
    r
}

/// # Safety
/// As write(2).
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: usize) -> isize {
    if is_channel(fd) {
        return match shim().write(fd, buf as u64, n) {
            Ok(()) => n as isize,
            Err(e) => {
                set_errno(e);
                -1
            }
        };
    }
    if UVERBS.is_cmd_fd(fd) {
        match UVERBS.write(buf as u64, n) {
            Ok(Some(r)) => return r,
            Ok(None) => {}
            Err(e) => {
                set_errno(e);
                return -1;
            }
        }
    }
    match next_write() {
        // SAFETY: the next `write` with the caller's arguments.
        Some(f) => unsafe { f(fd, buf, n) },
        // SAFETY: the write syscall with the caller's arguments.
        None => unsafe { libc::syscall(libc::SYS_write, fd, buf, n) as isize },
    }
}

/// # Safety
/// As close(2).
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    forget(fd);
    match next_close() {
        // SAFETY: the next `close` with the caller's argument.
        Some(f) => unsafe { f(fd) },
        // SAFETY: the close syscall with the caller's argument.
        None => unsafe { libc::syscall(libc::SYS_close, fd) as c_int },
    }
}

/// # Safety
/// As ioctl(2). The third argument is variadic in C; on the supported ABIs
/// a pointer-sized parameter reads the same register (see [`open`]).
// Rust 1.99+ checks definitions of the C library's own symbols; these are
// variadic in C and take a fixed integer here on purpose (see `open`).
#[allow(unknown_lints)]
#[allow(invalid_runtime_symbol_definitions)]
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    if request == VERBS_IOCTL && UVERBS.is_cmd_fd(fd) {
        match UVERBS.ioctl(fd, arg as u64) {
            Ok(Some(r)) => return r,
            Ok(None) => {}
            Err(e) => {
                set_errno(e);
                return -1;
            }
        }
    }
    match next_ioctl() {
        // SAFETY: the next `ioctl` with the caller's arguments.
        Some(f) => unsafe { f(fd, request, arg) },
        // SAFETY: the ioctl syscall with the caller's arguments.
        None => unsafe { libc::syscall(libc::SYS_ioctl, fd, request, arg) as c_int },
    }
}

/// `fd` is being closed (by close, or by another file put on its number):
/// what it was to us goes, as closing the kernel's file would end it.
/// Done before the fd number can be handed out again.
fn forget(fd: c_int) {
    if crate::owner::in_forked_child() {
        mark(fd, false);
        UVERBS.unmark(fd);
        return;
    }
    if is_channel(fd) {
        shim().close(fd);
        mark(fd, false);
    }
    if UVERBS.is_cmd_fd(fd) || UVERBS.is_channel(fd) {
        UVERBS.close(fd);
    }
}

/// Forgets every fd of ours in `[first, last]`.
fn forget_range(first: c_uint, last: c_uint) {
    let mut fds = CHANNELS.members_in(first, last);
    fds.extend(UVERBS.fds_in(first, last));
    for fd in fds {
        forget(fd);
    }
}

/// Whether `fd` is open (dup2 and dup3 fail without closing anything
/// when the old fd is not).
fn is_open(fd: c_int) -> bool {
    // SAFETY: F_GETFD only reads the descriptor's flags (or fails).
    unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
}

/// # Safety
/// As dup2(2).
#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if old != new && is_open(old) {
        forget(new);
    }
    match next_dup2() {
        // SAFETY: the next `dup2` with the caller's arguments.
        Some(f) => unsafe { f(old, new) },
        None if old == new => {
            if is_open(old) {
                new
            } else {
                set_errno(libc::EBADF);
                -1
            }
        }
        // SAFETY: dup3 with no flags is dup2 for distinct fds.
        None => unsafe { libc::syscall(libc::SYS_dup3, old, new, 0) as c_int },
    }
}

/// # Safety
/// As dup3(2).
#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    if old != new && flags & !libc::O_CLOEXEC == 0 && is_open(old) {
        forget(new);
    }
    match next_dup3() {
        // SAFETY: the next `dup3` with the caller's arguments.
        Some(f) => unsafe { f(old, new, flags) },
        // SAFETY: the dup3 syscall with the caller's arguments.
        None => unsafe { libc::syscall(libc::SYS_dup3, old, new, flags) as c_int },
    }
}

/// # Safety
/// As close_range(2).
#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    let known = libc::CLOSE_RANGE_CLOEXEC as c_int | libc::CLOSE_RANGE_UNSHARE as c_int;
    // With CLOSE_RANGE_CLOEXEC nothing is closed now (and exec ends the
    // emulation with the process image).
    if first <= last && flags & !known == 0 && flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 {
        forget_range(first, last);
    }
    match next_close_range() {
        // SAFETY: the next `close_range` with the caller's arguments.
        Some(f) => unsafe { f(first, last, flags) },
        // SAFETY: the close_range syscall with the caller's arguments.
        None => unsafe { libc::syscall(libc::SYS_close_range, first, last, flags) as c_int },
    }
}

/// # Safety
/// As closefrom(3).
#[no_mangle]
pub unsafe extern "C" fn closefrom(low: c_int) {
    forget_range(c_uint::try_from(low).unwrap_or(0), c_uint::MAX);
    match next_closefrom() {
        // SAFETY: the next `closefrom` with the caller's argument.
        Some(f) => unsafe { f(low) },
        None => {
            // SAFETY: the close_range syscall over [low, max].
            unsafe { libc::syscall(libc::SYS_close_range, low.max(0), c_uint::MAX, 0) };
        }
    }
}
