// SPDX-License-Identifier: GPL-2.0

//! What the examples share.

use std::process::ExitCode;

/// The example's outcome as its exit status; an error is printed by its message (its
/// Display, which names the cause), not its Debug form.
pub fn exit(r: Result<(), Box<dyn std::error::Error>>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
