// SPDX-License-Identifier: GPL-2.0

//! Gives the shared library the soname it is installed under.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libgdrpeer.so.0");
}
