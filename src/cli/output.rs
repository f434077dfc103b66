//! What the subcommands print. A closed standard output (its reader gone: `apf-monitor check | head -1`) ends the
//! program as it ends `cat` and `kubectl`: quietly, by SIGPIPE (a shell sees 141), never with a panic. Rust ignores
//! SIGPIPE so that a server's sockets (the simulator's, the daemon's) get EPIPE instead of a fatal signal: the
//! signal is raised only once the command has returned and stopped what it ran. Standard error, when closed, is
//! let go: warnings are lost, the work goes on.
use std::io::Write;

use anyhow::anyhow;

/// Standard output's reader has gone: the command stops, and the program ends by SIGPIPE.
#[derive(Debug, thiserror::Error)]
#[error("standard output is closed")]
pub struct StdoutClosed;

/// `print!` that returns [`StdoutClosed`] (or another write error) instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::output::write(format_args!($($arg)*))
    };
}

/// `println!` that returns [`StdoutClosed`] (or another write error) instead of panicking.
macro_rules! outln {
    () => {
        $crate::cli::output::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::cli::output::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `eprintln!` that never panics: a closed standard error loses the line.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::cli::output::write_stderr(format_args!("{}\n", format_args!($($arg)*)))
    };
}

pub(crate) use {errln, out, outln};

/// Writes to standard output now (flushed: a closed pipe is found at once).
pub fn write(text: std::fmt::Arguments) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_fmt(text).and_then(|()| stdout.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(StdoutClosed.into()),
        Err(e) => Err(anyhow!("cannot write to standard output: {e}")),
    }
}

pub fn write_stderr(text: std::fmt::Arguments) {
    let _ = std::io::stderr().lock().write_fmt(text);
}

/// Whether `e` is (or was caused by) a closed standard output.
pub fn is_stdout_closed(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.is::<StdoutClosed>())
}

/// Ends the program as a closed pipe ends `cat`: by SIGPIPE, its default action restored.
pub fn end_by_sigpipe() -> std::process::ExitCode {
    #[cfg(unix)]
    // SAFETY: signal and raise with constants; the default action of SIGPIPE ends the process here.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::raise(libc::SIGPIPE);
    }
    // Where there is no SIGPIPE: the exit status a shell gives a process it ended.
    std::process::ExitCode::from(141)
}

/// Resolves once standard output's reader has gone (a pipe whose reader exited), without writing to it: for a
/// command that has said everything and runs on (`simulate`). Never resolves for a terminal that stays, a file or
/// /dev/null.
pub async fn closed() {
    #[cfg(unix)]
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        // A thread of its own, not the runtime's blocking pool: the runtime does not wait for it at exit.
        let watch = std::thread::Builder::new()
            .name("stdout-watch".into())
            .spawn(move || {
                // No events asked: poll returns only on POLLERR (a pipe without reader) or POLLHUP.
                let mut fd = libc::pollfd {
                    fd: libc::STDOUT_FILENO,
                    events: 0,
                    revents: 0,
                };
                loop {
                    // SAFETY: one pollfd, owned by this frame, for the duration of the call.
                    let n = unsafe { libc::poll(&mut fd, 1, -1) };
                    if n < 0 {
                        if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
                        {
                            continue;
                        }
                        return;
                    }
                    // POLLNVAL: no stdout at all (`>&-`), which nothing reads anyway.
                    if fd.revents & (libc::POLLERR | libc::POLLHUP) != 0 {
                        let _ = tx.send(());
                        return;
                    }
                    if fd.revents & libc::POLLNVAL != 0 {
                        return;
                    }
                }
            });
        if watch.is_ok() && rx.await.is_ok() {
            return;
        }
    }
    std::future::pending::<()>().await
}
