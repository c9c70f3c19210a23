//! The listening socket of a server's egress proxy, made inside the
//! server's own network namespace and handed to the gateway
//! (`network = ["host:port", ...]`).
//!
//! The gateway cannot enter a network namespace an unprivileged child made
//! (`setns` needs a capability over it), so the child makes the socket:
//! between fork and exec, right after it unshared its user and network
//! namespace (and so still holds every capability of that namespace), it
//! brings its loopback up, listens on [`PROXY_ADDRESS`] there, and sends the
//! listening descriptor to the gateway over a Unix socket pair made before
//! fork (`SCM_RIGHTS`); then it closes its own copies. The server never
//! holds the listener: it can only connect to it, and what it connects to
//! is the gateway, which decides where each connection goes.
//!
//! The socket keeps the namespace's loopback alive for the gateway: a
//! socket holds a reference to the network namespace it was made in, so
//! the gateway's accepted connections are in the server's namespace, and
//! the gateway's own connections out are in the gateway's.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// The port the egress proxy listens on inside the server's namespace. The
/// namespace is new and empty, so any port is free there; this one is the
/// conventional port of an HTTP proxy.
pub(crate) const PROXY_PORT: u16 = 3128;

/// The proxy's address as the server's environment names it.
pub(crate) const PROXY_URL: &str = "http://127.0.0.1:3128";

/// The most connections waiting to be accepted (the kernel's backlog).
const BACKLOG: libc::c_int = 128;

/// The two ends of the socket pair, made before fork.
#[derive(Debug)]
pub(crate) struct Channel {
    /// The gateway's end, through which the listener arrives.
    gateway: OwnedFd,
    /// The child's end: held until the child was started (it is
    /// close-on-exec, so no program keeps it), then closed.
    child: Option<OwnedFd>,
}

/// What the child needs to make the listener: the raw descriptor of its
/// end of the channel (valid in the child, which inherited it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChildEnd {
    channel: RawFd,
}

// === impl Channel ===

impl Channel {
    /// Makes the socket pair.
    pub(crate) fn new() -> io::Result<(Self, ChildEnd)> {
        let mut fds = [-1 as libc::c_int; 2];
        // SAFETY: `fds` is a valid, writable array of two ints.
        let made = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        };
        if made != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: socketpair succeeded: both descriptors are open and owned
        // by nothing else.
        let (gateway, child) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let end = ChildEnd {
            channel: child.as_raw_fd(),
        };
        Ok((
            Self {
                gateway,
                child: Some(child),
            },
            end,
        ))
    }

    /// Takes the listener the child sent, once it was started (the child
    /// sends it before it execs, so it is there when the start succeeded).
    /// Never waits: a listener that is not there is an error.
    pub(crate) fn receive(&mut self) -> io::Result<std::net::TcpListener> {
        drop(self.child.take());
        let mut byte = [0_u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: byte.len(),
        };
        let mut control = [0_u64; 8];
        // SAFETY: `msghdr` is plain data for which all zeroes is valid.
        let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
        message.msg_iov = &raw mut iov;
        message.msg_iovlen = 1;
        message.msg_control = control.as_mut_ptr().cast();
        message.msg_controllen = std::mem::size_of_val(&control);
        // SAFETY: `message` points at `iov` and `control`, both valid and
        // writable for the lengths it gives.
        let got = unsafe {
            libc::recvmsg(
                self.gateway.as_raw_fd(),
                &raw mut message,
                libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
            )
        };
        if got < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `message` was filled by recvmsg; the macros only read
        // within `msg_control` and `msg_controllen`.
        let header = unsafe { libc::CMSG_FIRSTHDR(&raw const message) };
        if got == 0 || header.is_null() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the sandbox sent no listening socket for the egress proxy",
            ));
        }
        // SAFETY: `header` is non-null and within `control`.
        let (level, kind, len) = unsafe {
            (
                (*header).cmsg_level,
                (*header).cmsg_type,
                (*header).cmsg_len,
            )
        };
        // SAFETY: CMSG_LEN is a pure computation.
        let one = unsafe {
            libc::CMSG_LEN(u32::try_from(std::mem::size_of::<libc::c_int>()).unwrap_or(4))
        };
        if level != libc::SOL_SOCKET || kind != libc::SCM_RIGHTS || len as u64 != u64::from(one) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the sandbox sent something other than one listening socket",
            ));
        }
        // SAFETY: the header carries exactly one descriptor (checked
        // above); CMSG_DATA points at it, possibly unaligned.
        let fd = unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(header).cast::<libc::c_int>()) };
        // SAFETY: the kernel installed `fd` in this process for us; nothing
        // else owns it.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(std::net::TcpListener::from(owned))
    }
}

// === impl ChildEnd ===

impl ChildEnd {
    /// In the child, in its new network namespace: brings the loopback up,
    /// listens on [`PROXY_PORT`] of 127.0.0.1, sends the listener to the
    /// gateway and closes its own copies. Makes only system calls on this
    /// stack's memory (async-signal-safe).
    pub(crate) fn open(self) -> io::Result<()> {
        let result = self.listen_and_send();
        // SAFETY: the child's end is closed once, here; the child never
        // uses it again.
        unsafe {
            libc::close(self.channel);
        }
        result
    }

    fn listen_and_send(self) -> io::Result<()> {
        loopback_up()?;
        // SAFETY: socket(2) takes no pointer.
        let listener =
            unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
        super::check(listener)?;
        let result = bind_and_listen(listener).and_then(|()| send_fd(self.channel, listener));
        // SAFETY: the child's copy of the listener is closed once; the
        // gateway holds its own (or none, on failure).
        unsafe {
            libc::close(listener);
        }
        result
    }
}

/// Sets `IFF_UP` on `lo` (the kernel makes it down in a new namespace).
fn loopback_up() -> io::Result<()> {
    // SAFETY: socket(2) takes no pointer.
    let probe = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    super::check(probe)?;
    // SAFETY: `ifreq` is plain data for which all zeroes is valid.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo\0") {
        *slot = *byte as libc::c_char;
    }
    // SAFETY: `request` is a valid ifreq naming `lo`; the kernel reads and
    // writes only it.
    let mut result =
        super::check(unsafe { libc::ioctl(probe, libc::SIOCGIFFLAGS, &raw mut request) });
    if result.is_ok() {
        // SAFETY: SIOCGIFFLAGS filled the flags member of the union.
        unsafe {
            request.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        }
        // SAFETY: as above.
        result =
            super::check(unsafe { libc::ioctl(probe, libc::SIOCSIFFLAGS, &raw const request) });
    }
    // SAFETY: `probe` was opened above and is closed once.
    unsafe {
        libc::close(probe);
    }
    result
}

/// Binds `listener` to 127.0.0.1:[`PROXY_PORT`] and listens.
fn bind_and_listen(listener: RawFd) -> io::Result<()> {
    // SAFETY: `sockaddr_in` is plain data for which all zeroes is valid.
    let mut address: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    address.sin_family = libc::AF_INET as libc::sa_family_t;
    address.sin_port = PROXY_PORT.to_be();
    address.sin_addr = libc::in_addr {
        s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be(),
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: `address` is a valid sockaddr_in of `len` bytes.
    super::check(unsafe {
        libc::bind(listener, (&raw const address).cast::<libc::sockaddr>(), len)
    })?;
    // SAFETY: listen(2) takes no pointer.
    super::check(unsafe { libc::listen(listener, BACKLOG) })
}

/// Sends `fd` over `channel` with `SCM_RIGHTS`, with one byte of data.
fn send_fd(channel: RawFd, fd: RawFd) -> io::Result<()> {
    let byte = [0_u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_ptr().cast_mut().cast(),
        iov_len: byte.len(),
    };
    let mut control = [0_u64; 8];
    // SAFETY: `msghdr` is plain data for which all zeroes is valid.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = &raw mut iov;
    message.msg_iovlen = 1;
    message.msg_control = control.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE and CMSG_LEN are pure computations.
    let (space, len) = unsafe {
        let size = std::mem::size_of::<libc::c_int>() as u32;
        (libc::CMSG_SPACE(size), libc::CMSG_LEN(size))
    };
    message.msg_controllen = space as usize;
    // SAFETY: `message.msg_control` points at `control`, which is larger
    // than `space`; CMSG_FIRSTHDR returns a pointer within it.
    unsafe {
        let header = libc::CMSG_FIRSTHDR(&raw const message);
        if header.is_null() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        (*header).cmsg_level = libc::SOL_SOCKET;
        (*header).cmsg_type = libc::SCM_RIGHTS;
        (*header).cmsg_len = len as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(header).cast::<libc::c_int>(), fd);
    }
    // SAFETY: `message` points at valid memory for the lengths it gives.
    let sent = unsafe { libc::sendmsg(channel, &raw const message, libc::MSG_NOSIGNAL) };
    if sent == 1 {
        Ok(())
    } else {
        Err(super::last_error_or(libc::EIO))
    }
}
