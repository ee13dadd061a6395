// SPDX-License-Identifier: GPL-2.0

//! Process plumbing for the tests: fork and reap a child, pass files and sync bytes over a
//! Unix socket, run this program as a child in a mode of its own and kill it, and rmmod.

use nvsim::testing::{errno, TestResult};
use nvsim::{check, check_eq};
use rustix::{
    fd::{BorrowedFd, OwnedFd},
    net::{
        self, RecvAncillaryBuffer, RecvAncillaryMessage, SendAncillaryBuffer, SendAncillaryMessage,
    },
};
use std::{
    io::{BufRead, BufReader, Read, Write},
    mem::MaybeUninit,
    process::{Child, Command, ExitCode, Stdio},
};

/// Forks; the child runs `child` and exits with 0 if it returns Ok (printing the error
/// otherwise). Returns the child's pid.
pub fn fork(child: impl FnOnce() -> TestResult) -> Result<libc::pid_t, String> {
    // SAFETY: the test program is single-threaded here; the child only makes system calls
    // and exits without unwinding.
    match unsafe { libc::fork() } {
        -1 => Err(std::io::Error::last_os_error().to_string()),
        0 => {
            let code = match child() {
                Ok(()) => 0,
                Err(e) => {
                    println!("child: {e}");
                    1
                }
            };
            let _ = std::io::stdout().flush();
            // SAFETY: ends the child without running the parent's destructors twice.
            unsafe { libc::_exit(code) }
        }
        pid => Ok(pid),
    }
}

/// Reaps the child `pid`: Ok if it exited with 0.
pub fn wait(pid: libc::pid_t) -> TestResult {
    let mut status = 0;
    // SAFETY: waits for our own child.
    check!(
        unsafe { libc::waitpid(pid, &mut status, 0) } == pid,
        "waitpid"
    );
    check!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child failed (status {status:#x})"
    );
    Ok(())
}

/// Forks a child that runs `child` and must die of SIGBUS before it returns (`child` ends
/// with the access that must fault): Ok if it did. `what` names the child in the error.
pub fn dies_of_sigbus(what: &str, child: impl FnOnce() -> TestResult) -> TestResult {
    let pid = fork(child)?;
    check_eq!(wait_status(pid)?, Err(libc::SIGBUS), what);
    Ok(())
}

/// How a child ended: `Ok(code)` if it exited, `Err(signal)` if a signal killed it.
pub fn wait_status(pid: libc::pid_t) -> Result<Result<i32, i32>, String> {
    let mut status = 0;
    // SAFETY: waits for our own child.
    check!(
        unsafe { libc::waitpid(pid, &mut status, 0) } == pid,
        "waitpid"
    );
    if libc::WIFSIGNALED(status) {
        Ok(Err(libc::WTERMSIG(status)))
    } else {
        Ok(Ok(libc::WEXITSTATUS(status)))
    }
}

/// Sends the file `fd` over the Unix socket `sock` (SCM_RIGHTS).
pub fn send_fd(sock: BorrowedFd<'_>, fd: BorrowedFd<'_>) -> TestResult {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut cmsg = SendAncillaryBuffer::new(&mut space);
    let fds = [fd];
    check!(
        cmsg.push(SendAncillaryMessage::ScmRights(&fds)),
        "cmsg space"
    );
    net::sendmsg(
        sock,
        &[std::io::IoSlice::new(b"f")],
        &mut cmsg,
        net::SendFlags::empty(),
    )
    .map_err(errno)?;
    Ok(())
}

/// Receives a file over the Unix socket `sock` (SCM_RIGHTS).
pub fn recv_fd(sock: BorrowedFd<'_>) -> Result<OwnedFd, String> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut cmsg = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    net::recvmsg(
        sock,
        &mut [std::io::IoSliceMut::new(&mut byte)],
        &mut cmsg,
        net::RecvFlags::empty(),
    )
    .map_err(errno)?;
    for msg in cmsg.drain() {
        if let RecvAncillaryMessage::ScmRights(mut fds) = msg {
            return fds.next().ok_or_else(|| "no fd".to_string());
        }
    }
    Err("no SCM_RIGHTS message".into())
}

/// Waits for a sync byte from the other end of `sock`.
pub fn byte(sock: BorrowedFd<'_>) -> TestResult {
    let mut b = [0u8; 1];
    check_eq!(
        rustix::io::read(sock, &mut b).map_err(errno)?,
        1,
        "sync byte"
    );
    Ok(())
}

/// Sends a sync byte to the other end of `sock`.
pub fn send_byte(sock: BorrowedFd<'_>) -> TestResult {
    rustix::io::write(sock, b"s").map_err(errno)?;
    Ok(())
}

/// A connected pair of Unix stream sockets, to pass files with SCM_RIGHTS.
pub fn unix_pair() -> Result<(OwnedFd, OwnedFd), String> {
    net::socketpair(
        net::AddressFamily::UNIX,
        net::SocketType::STREAM,
        net::SocketFlags::CLOEXEC,
        None,
    )
    .map_err(errno)
}

/// Whether `rmmod gdrpeer` succeeded.
pub fn rmmod_gdrpeer() -> Result<bool, String> {
    let out = Command::new("rmmod")
        .arg("gdrpeer")
        .output()
        .map_err(|e| format!("rmmod: {e}"))?;
    Ok(out.status.success())
}

/// Runs this program as a child in `mode` and waits until it prints "ready", returning the
/// rest of that line.
pub fn spawn_ready(mode: &str) -> Result<(Child, String), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .arg(mode)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    let Some(rest) = line.trim().strip_prefix("ready") else {
        let _ = kill_and_wait(child);
        return Err(format!("child {mode}: '{}'", line.trim()));
    };
    let rest = rest.trim().to_string();
    Ok((child, rest))
}

/// Kills a child with SIGKILL and reaps it.
pub fn kill_and_wait(mut child: Child) -> TestResult {
    child.kill().map_err(|e| e.to_string())?;
    child.wait().map_err(|e| e.to_string())?;
    let mut rest = String::new();
    let _ = child.stdout.take().unwrap().read_to_string(&mut rest);
    Ok(())
}

/// Prints "ready" and sleeps until killed.
pub fn ready_and_wait() -> TestResult {
    ready_and_wait_with("")
}

/// Prints "ready WHAT" and sleeps until killed.
pub fn ready_and_wait_with(what: &str) -> TestResult {
    println!("ready {what}");
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    std::thread::sleep(std::time::Duration::from_secs(60));
    Ok(())
}

/// A mode in which the tests run this program as a child: its option, and what it runs.
pub type ChildMode = (&'static str, fn() -> TestResult);

/// The child mode `args` names, run if it is one of `modes` and nothing follows it: the
/// program's exit status.
pub fn child_main(args: &[String], modes: &[ChildMode]) -> Option<ExitCode> {
    let [mode] = args else {
        return None;
    };
    let (_, run) = modes.iter().find(|(m, _)| m == mode)?;
    Some(match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            println!("{e}");
            ExitCode::FAILURE
        }
    })
}
