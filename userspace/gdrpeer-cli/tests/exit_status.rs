// SPDX-License-Identifier: GPL-2.0

//! The built `gdrpeer`'s exit statuses (Documentation/user/cli.rst): 0 success, 1 failure,
//! 2 usage error, 3 no CUDA driver library. On the build machine, without gdrpeer.ko or
//! libcuda.so.1.

use std::process::{Command, Output};

fn gdrpeer(args: &[&str]) -> Output {
    // An empty library path: libcuda.so.1 is not found (nor the simulator's).
    Command::new(env!("CARGO_BIN_EXE_gdrpeer"))
        .args(args)
        .env("LD_LIBRARY_PATH", "/nonexistent")
        .output()
        .unwrap()
}

fn expect(args: &[&str], status: i32, stderr_has: &str) -> Output {
    let out = gdrpeer(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(status), "{args:?}: {err}");
    assert!(err.contains(stderr_has), "{args:?}: {err}");
    out
}

#[test]
fn usage_errors_exit_2() {
    expect(&["--bogus"], 2, "unexpected argument");
    expect(&["stats", "--bogus"], 2, "unexpected argument");
    expect(&[], 2, "Usage:");
    expect(
        &["pin", "0x7f0000000000", "4096"],
        2,
        "gdrpeer: pin takes no address (0x7f0000000000): gdrpeer pins only the calling process's own GPU memory",
    );
    expect(
        &["pages", "--offset", "65536"],
        2,
        "not inside the 65536-byte allocation",
    );
    expect(&["demo", "--json"], 2, "demo has no JSON output");
}

#[test]
fn help_and_version_exit_0() {
    let out = expect(&["--help"], 0, "");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("Exit status:"), "{help}");
    expect(&["pin", "--help"], 0, "");
    expect(&["--version"], 0, "");
}

#[test]
fn failures_exit_1() {
    expect(
        &["stats", "--device", "/nonexistent/gdrpeer"],
        1,
        "gdrpeer: cannot open /nonexistent/gdrpeer",
    );
    expect(
        &["gdrdrv-info", "--json", "--path", "/nonexistent/gdrdrv"],
        1,
        "cannot open /nonexistent/gdrdrv",
    );
}

#[test]
fn no_cuda_exits_3() {
    // Where a CUDA driver is installed in the system's library path, it is found anyway.
    if gdrpeer::cuda::Cuda::load().is_ok() {
        eprintln!("libcuda.so.1 is installed here: status 3 not checked");
        return;
    }
    for cmd in ["pin", "pages", "dmabuf", "demo"] {
        expect(&[cmd], 3, "no usable CUDA driver library");
    }
    expect(&["dma-map", "--peer", "00:01.0"], 3, "need a CUDA driver");
    expect(&["events", "--alloc", "4096"], 3, "need a CUDA driver");
}

#[test]
fn doctor_exits_0_or_1_by_its_findings() {
    // An empty root: no gdrpeer, so some check FAILs; --json says the same.
    let root = std::env::temp_dir().join(format!("gdrpeer-empty-root-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    let out = expect(
        &["doctor", "--root", root.to_str().unwrap(), "--json"],
        1,
        "",
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["exit_status"], 1);
    std::fs::remove_dir_all(&root).unwrap();
}
