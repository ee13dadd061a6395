// SPDX-License-Identifier: GPL-2.0

//! The default run (`gdrpeer-test [FILTER]`): gdrpeer against nvsim, one file per subject,
//! each with its table of tests. [`all`] puts the tables together in the order they run.

pub mod badinput;
mod cache;
mod callback;
mod events;
pub mod failnth;
mod gdrdrv_abi;
mod gdrdrv_device;
mod mmap;
mod pinning;
pub mod processes;
mod regcache;

use nvsim::testing::Test;

/// The subjects' tables, in the order they run.
const SUBJECTS: [&[Test]; 11] = [
    pinning::TESTS,
    cache::TESTS,
    callback::TESTS,
    processes::TESTS,
    badinput::TESTS,
    regcache::TESTS,
    mmap::TESTS,
    events::TESTS,
    gdrdrv_device::TESTS,
    gdrdrv_abi::TESTS,
    failnth::TESTS,
];

/// The cases of `gdrpeer-test --large`, too long for the test kernel's sanitizers (not in
/// the default run).
pub const LARGE: &[Test] = events::LARGE_TESTS;

/// Every test of the default run, in order.
pub fn all() -> Vec<Test> {
    SUBJECTS.concat()
}
