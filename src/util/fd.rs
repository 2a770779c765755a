//! Taking over a file descriptor made on another thread (boot makes sockets; each executor
//! turns its own into a glommio type).

use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};

/// `fd` as a `T` that now owns it (and closes it on drop).
pub fn adopt<T: FromRawFd>(fd: OwnedFd) -> T {
    // SAFETY: `into_raw_fd` gives up the only owner of an open descriptor, so `T` becomes its
    // sole owner: nothing else can use or close it.
    unsafe { T::from_raw_fd(fd.into_raw_fd()) }
}
