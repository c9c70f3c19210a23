//! The host's side over this process's standard input and output.
//!
//! Tokio reads a plain stdin on a blocking thread and hands every read back
//! to the event loop: two thread wake-ups per read, on the path of every
//! call. A host nearly always connects through a pipe (or, for hosts built
//! on libuv such as Node.js, a socket pair), and both can be read and
//! written without blocking from the event loop itself. So [`host_streams`]
//! registers them with the runtime, and falls back to tokio's blocking
//! stdin and stdout for anything else (a terminal, a file).

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileTypeExt;

use tokio::io::{AsyncRead, AsyncWrite};

/// The host's input.
pub type HostReader = Box<dyn AsyncRead + Unpin + Send>;

/// The host's output.
pub type HostWriter = Box<dyn AsyncWrite + Unpin + Send>;

/// This process's stdin and stdout as streams for the gateway. Must be
/// called inside a tokio runtime with I/O enabled.
pub fn host_streams() -> (HostReader, HostWriter) {
    let reader = duplicate(std::io::stdin().as_fd())
        .and_then(reader_of)
        .unwrap_or_else(|| Box::new(tokio::io::stdin()));
    let writer = duplicate(std::io::stdout().as_fd())
        .and_then(writer_of)
        .unwrap_or_else(|| Box::new(tokio::io::stdout()));
    (reader, writer)
}

fn duplicate(fd: std::os::fd::BorrowedFd<'_>) -> Option<OwnedFd> {
    fd.try_clone_to_owned().ok()
}

/// What kind of file a descriptor is.
enum Kind {
    Fifo,
    Socket,
    Other,
}

fn kind_of(fd: &OwnedFd) -> Kind {
    let Ok(file) = fd.try_clone().map(std::fs::File::from) else {
        return Kind::Other;
    };
    match file.metadata().map(|metadata| metadata.file_type()) {
        Ok(kind) if kind.is_fifo() => Kind::Fifo,
        Ok(kind) if kind.is_socket() => Kind::Socket,
        _ => Kind::Other,
    }
}

fn reader_of(fd: OwnedFd) -> Option<HostReader> {
    match kind_of(&fd) {
        Kind::Fifo => tokio::net::unix::pipe::Receiver::from_owned_fd(fd)
            .ok()
            .map(|pipe| Box::new(pipe) as HostReader),
        Kind::Socket => socket(fd).map(|stream| Box::new(stream) as HostReader),
        Kind::Other => None,
    }
}

fn writer_of(fd: OwnedFd) -> Option<HostWriter> {
    match kind_of(&fd) {
        Kind::Fifo => tokio::net::unix::pipe::Sender::from_owned_fd(fd)
            .ok()
            .map(|pipe| Box::new(pipe) as HostWriter),
        Kind::Socket => socket(fd).map(|stream| Box::new(stream) as HostWriter),
        Kind::Other => None,
    }
}

fn socket(fd: OwnedFd) -> Option<tokio::net::UnixStream> {
    let stream = std::os::unix::net::UnixStream::from(fd);
    stream.set_nonblocking(true).ok()?;
    tokio::net::UnixStream::from_std(stream).ok()
}
