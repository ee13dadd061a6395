// SPDX-License-Identifier: GPL-2.0

//! `gdrpeer-vmtool`: helpers the test plans need and busybox lacks.
//!
//! - `insmod FILE [PARAMS...]`: one finit_module(2) call. On failure prints
//!   the errno's name (e.g. `EINVAL`) and exits 1, so negative tests can
//!   check exactly why a module was refused (busybox insmod retries with
//!   init_module and reports only a generic message).

use std::{ffi::CString, fs::File, os::fd::AsRawFd, process::ExitCode};

fn errno_name(e: i32) -> String {
    let name = match e {
        libc::EINVAL => "EINVAL",
        libc::ENOEXEC => "ENOEXEC",
        libc::ENOENT => "ENOENT",
        libc::EEXIST => "EEXIST",
        libc::EPERM => "EPERM",
        libc::EBUSY => "EBUSY",
        libc::ENODEV => "ENODEV",
        libc::ENOMEM => "ENOMEM",
        libc::EKEYREJECTED => "EKEYREJECTED",
        _ => return format!("errno {e}"),
    };
    name.to_string()
}

fn insmod(args: &[String]) -> ExitCode {
    let Some((path, params)) = args.split_first() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("{path}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let params = CString::new(params.join(" ")).expect("no NUL in parameters");
    // SAFETY: finit_module reads the open fd and the NUL-terminated parameter string, both of
    // which outlive the call.
    let ret =
        unsafe { libc::syscall(libc::SYS_finit_module, file.as_raw_fd(), params.as_ptr(), 0) };
    if ret == 0 {
        return ExitCode::SUCCESS;
    }
    let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    println!("{}", errno_name(errno));
    ExitCode::FAILURE
}

/// Writes every scalar of a JSON value as `PATH<TAB>VALUE`, PATH made of object keys and
/// array indices joined by dots (`checks.3.status\tok`); strings without their quotes.
fn flatten(path: &str, v: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    let join = |k: &str| match path {
        "" => k.to_string(),
        p => format!("{p}.{k}"),
    };
    match v {
        Value::Object(m) => m.iter().for_each(|(k, v)| flatten(&join(k), v, out)),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .for_each(|(i, v)| flatten(&join(&i.to_string()), v, out)),
        Value::String(s) => *out += &format!("{path}\t{s}\n"),
        v => *out += &format!("{path}\t{v}\n"),
    }
}

/// `json`: parses standard input as one JSON document (status 1 if it is not) and prints
/// it flattened, for shell tests without jq.
fn json() -> ExitCode {
    match serde_json::from_reader::<_, serde_json::Value>(std::io::stdin().lock()) {
        Ok(v) => {
            let mut out = String::new();
            flatten("", &v, &mut out);
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gdrpeer-vmtool json: {e}");
            ExitCode::FAILURE
        }
    }
}

const USAGE: &str = "usage: gdrpeer-vmtool insmod FILE [PARAM=VALUE...] | json <DOCUMENT";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.split_first() {
        Some((cmd, rest)) if cmd == "insmod" => insmod(rest),
        Some((cmd, [])) if cmd == "json" => json(),
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}
