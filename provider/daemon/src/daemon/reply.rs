//! What a request handler gives back: a reply (with the fds that go with
//! it), or a refusal with the errno rdma-core users know.

use std::os::fd::OwnedFd;

use rxu_abi::proto::Response;

/// What one request produced: the response, the fds that go with it,
/// and whether the connection is to be closed after sending it.
pub struct Reply {
    pub resp: Response,
    pub fds: Vec<OwnedFd>,
    pub close: bool,
}

impl Reply {
    pub fn ok(resp: Response) -> Reply {
        Reply {
            resp,
            fds: Vec::new(),
            close: false,
        }
    }

    pub fn with_fds(resp: Response, fds: Vec<OwnedFd>) -> Reply {
        Reply {
            resp,
            fds,
            close: false,
        }
    }
}

/// A refused request: errno (as rdma-core users know it) and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    pub errno: i32,
    pub msg: String,
}

pub type Handled = Result<Reply, Refused>;

pub fn refuse<T>(errno: i32, msg: impl Into<String>) -> Result<T, Refused> {
    Err(Refused {
        errno,
        msg: msg.into(),
    })
}
