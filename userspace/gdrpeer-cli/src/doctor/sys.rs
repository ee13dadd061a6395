// SPDX-License-Identifier: GPL-2.0

//! The machine as `doctor` reads it: files under a root (`/`, or a fake tree for tests) and,
//! on the live machine only, a few commands (`modinfo`, `mokutil`, `nvidia-smi`, `gzip`).

use std::{
    collections::VecDeque,
    fs,
    io::Read,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

/// How long a command may run before `doctor` gives up on it and kills it: `nvidia-smi`
/// can hang on a wedged GPU, which is when `doctor` is run.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a killed command may take to end before `doctor` goes on without it.
const KILL_GRACE: Duration = Duration::from_secs(1);

/// Where `doctor` looks.
pub struct Sys {
    root: PathBuf,
    live: bool,
}

impl Sys {
    /// The running machine: files from `/`, commands allowed.
    pub fn live() -> Self {
        Self {
            root: PathBuf::from("/"),
            live: true,
        }
    }

    /// A tree standing for `/` (tests): files only, no commands, no ioctls.
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            live: false,
        }
    }

    /// Whether this is the running machine (commands and ioctls may be used).
    pub fn is_live(&self) -> bool {
        self.live
    }

    /// The host path of `path` (absolute, as on the machine).
    pub fn path(&self, path: &str) -> PathBuf {
        // In a tree, links are followed inside it (an absolute target is the tree's).
        let path = match self.live {
            true => None,
            false => self.resolve(path),
        }
        .unwrap_or_else(|| path.to_string());
        self.root.join(path.trim_start_matches('/'))
    }

    /// A file's text without its trailing white space.
    pub fn read(&self, path: &str) -> Option<String> {
        fs::read_to_string(self.path(path))
            .ok()
            .map(|s| s.trim_end().to_string())
    }

    pub fn read_bytes(&self, path: &str) -> Option<Vec<u8>> {
        fs::read(self.path(path)).ok()
    }

    pub fn exists(&self, path: &str) -> bool {
        self.path(path).exists()
    }

    /// The names in a directory, sorted (none if it cannot be read).
    pub fn names(&self, path: &str) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(self.path(path))
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    /// `path` with every symbolic link followed, inside the root (an absolute link
    /// target starts again at the root): what `realpath` gives on the machine.
    pub fn resolve(&self, path: &str) -> Option<String> {
        let mut todo: VecDeque<String> = parts(path).collect();
        let mut cur: Vec<String> = Vec::new();
        let mut hops = 0;
        while let Some(c) = todo.pop_front() {
            match c.as_str() {
                "." => continue,
                ".." => {
                    cur.pop();
                    continue;
                }
                _ => cur.push(c),
            }
            let here = self.root.join(cur.join("/"));
            let meta = fs::symlink_metadata(&here).ok()?;
            if meta.file_type().is_symlink() {
                hops += 1;
                if hops > 40 {
                    return None;
                }
                let target = fs::read_link(&here).ok()?;
                let target = target.to_str()?;
                cur.pop();
                if target.starts_with('/') {
                    cur.clear();
                }
                for p in parts(target).collect::<Vec<_>>().into_iter().rev() {
                    todo.push_front(p);
                }
            }
        }
        Some(format!("/{}", cur.join("/")))
    }

    /// The last component of where the link `path` leads (a driver's name, a group's number).
    pub fn link_name(&self, path: &str) -> Option<String> {
        let r = self.resolve(path)?;
        Path::new(&r)
            .file_name()
            .and_then(|n| n.to_str())
            .map(String::from)
    }

    /// A command's standard output, when it ran and succeeded (live machine only).
    pub fn run(&self, prog: &str, args: &[&str]) -> Option<String> {
        if !self.live {
            return None;
        }
        output_within(Command::new(prog).args(args), COMMAND_TIMEOUT)
    }

    /// The running kernel's release (`uname -r`).
    pub fn release(&self) -> Option<String> {
        self.read("/proc/sys/kernel/osrelease")
    }
}

fn parts(path: &str) -> impl Iterator<Item = String> + '_ {
    path.split('/').filter(|p| !p.is_empty()).map(String::from)
}

/// `cmd`'s standard output, when it ran, succeeded and ended within `timeout`; a command
/// still running then is killed. Its output is read as it comes, so a long one cannot fill
/// the pipe and stall.
pub fn output_within(cmd: &mut Command, timeout: Duration) -> Option<String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut stdout = child.stdout.take()?;
    let (send, output) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = send.send(stdout.read_to_end(&mut out).map(|_| out));
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                // Killed and reaped, unless it sleeps uninterruptibly (a command stuck in
                // a wedged driver ends only when the driver lets it): then it is left
                // behind after a short grace, not waited for.
                let _ = child.kill();
                let grace = Instant::now() + KILL_GRACE;
                while matches!(child.try_wait(), Ok(None)) && Instant::now() < grace {
                    std::thread::sleep(Duration::from_millis(10));
                }
                break None;
            }
        }
    };
    if !status?.success() {
        return None;
    }
    // The output ends with the command's, unless a process it started still holds the
    // pipe: that one is not waited for past the deadline (its reader is left behind).
    let left = deadline.saturating_duration_since(Instant::now());
    let out = output.recv_timeout(left).ok()?.ok()?;
    Some(String::from_utf8_lossy(&out).trim_end().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `script` run by sh with a 300 ms limit gives nothing, well before its 30 s sleep.
    fn given_up_in_time(script: &str) {
        let start = Instant::now();
        let out = output_within(
            Command::new("sh").args(["-c", script]),
            Duration::from_millis(300),
        );
        assert_eq!(out, None, "{script}");
        let took = start.elapsed();
        assert!(took < Duration::from_secs(5), "{script}: waited {took:?}");
    }

    #[test]
    fn a_command_past_its_time_is_killed() {
        given_up_in_time("echo early; exec sleep 30");
    }

    #[test]
    fn a_process_left_holding_the_output_is_not_waited_for() {
        given_up_in_time("sleep 30 & echo done");
    }

    #[test]
    fn a_long_output_is_read_whole() {
        let out = output_within(
            Command::new("sh").args(["-c", "head -c 1000000 /dev/zero | tr '\\0' x"]),
            Duration::from_secs(10),
        );
        assert_eq!(out.map(|o| o.len()), Some(1_000_000));
    }
}
