//! `paths::check_runtime_dir` and `check_daemon_peer`: what a client
//! refuses before it connects or sends anything (issue 19 finding 5).

use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use rxu_abi::paths::{check_daemon_peer, check_runtime_dir, TrustError};
use rxu_abi::proto::fdpass::seqpacket_pair;

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rxu-trust-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
    d
}

#[test]
fn own_dirs_of_mode_0700_and_0755_are_trusted() {
    let d = scratch("ok");
    check_runtime_dir(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
    check_runtime_dir(&d).unwrap();
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_dir_others_may_write_is_refused() {
    let d = scratch("mode");
    for mode in [0o777, 0o1777, 0o720, 0o702] {
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode)).unwrap();
        let e = check_runtime_dir(&d).unwrap_err();
        assert!(matches!(e, TrustError::Mode { .. }), "{mode:o}: {e:?}");
        assert_eq!(e.errno(), libc::EACCES);
        let msg = e.to_string();
        assert!(
            msg.contains(d.to_str().unwrap()) && msg.contains("owned by uid"),
            "{msg}"
        );
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_symlink_or_a_file_is_refused() {
    let d = scratch("link");
    let target = d.join("real");
    std::fs::create_dir(&target).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o700)).unwrap();
    let link = d.join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let e = check_runtime_dir(&link).unwrap_err();
    assert!(matches!(e, TrustError::Symlink { .. }), "{e:?}");
    assert!(e.to_string().contains("symbolic link"), "{e}");
    let file = d.join("file");
    std::fs::write(&file, b"").unwrap();
    let e = check_runtime_dir(&file).unwrap_err();
    assert!(matches!(e, TrustError::NotDir { .. }), "{e:?}");
    let e = check_runtime_dir(&d.join("absent")).unwrap_err();
    assert!(e.is_not_found(), "{e:?}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn another_users_dir_is_refused() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("not root: chown to another user is not possible; covered by multi_user");
        return;
    }
    let d = scratch("owner");
    std::os::unix::fs::chown(&d, Some(65534), Some(65534)).unwrap();
    let e = check_runtime_dir(&d).unwrap_err();
    assert!(matches!(e, TrustError::Owner { owner: 65534, .. }), "{e:?}");
    assert!(e.to_string().contains("uid 65534"), "{e}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_peer_of_this_user_is_trusted() {
    // Both ends of a pair are ours: the daemon-peer check passes.
    let (a, _b) = seqpacket_pair().unwrap();
    check_daemon_peer(a.as_fd(), std::path::Path::new("pair")).unwrap();
}
