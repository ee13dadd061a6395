// SPDX-License-Identifier: GPL-2.0

//! `CUresult` codes, and `cuGetErrorName` / `cuGetErrorString` for every code this library
//! returns, with CUDA's names and texts.

use crate::CUresult;
use std::ffi::{c_char, CStr};

pub const CUDA_SUCCESS: CUresult = 0;
pub const CUDA_ERROR_INVALID_VALUE: CUresult = 1;
pub const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
pub const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
pub const CUDA_ERROR_NO_DEVICE: CUresult = 100;
pub const CUDA_ERROR_INVALID_DEVICE: CUresult = 101;
pub const CUDA_ERROR_INVALID_CONTEXT: CUresult = 201;
pub const CUDA_ERROR_NOT_FOUND: CUresult = 500;
pub const CUDA_ERROR_CONTEXT_IS_DESTROYED: CUresult = 709;
pub const CUDA_ERROR_NOT_SUPPORTED: CUresult = 801;
pub const CUDA_ERROR_UNKNOWN: CUresult = 999;

/// The code for nvsim's answer to an allocation: `CUDA_ERROR_OUT_OF_MEMORY` when it ran out
/// of memory, `CUDA_ERROR_INVALID_VALUE` for anything else (a size it refused).
pub(crate) fn alloc_error(e: rustix::io::Errno) -> CUresult {
    match e {
        rustix::io::Errno::NOMEM => CUDA_ERROR_OUT_OF_MEMORY,
        _ => CUDA_ERROR_INVALID_VALUE,
    }
}

/// Every code this library returns: (code, `cuGetErrorName`, `cuGetErrorString`).
const ERRORS: &[(CUresult, &CStr, &CStr)] = &[
    (CUDA_SUCCESS, c"CUDA_SUCCESS", c"no error"),
    (
        CUDA_ERROR_INVALID_VALUE,
        c"CUDA_ERROR_INVALID_VALUE",
        c"invalid argument",
    ),
    (
        CUDA_ERROR_OUT_OF_MEMORY,
        c"CUDA_ERROR_OUT_OF_MEMORY",
        c"out of memory",
    ),
    (
        CUDA_ERROR_NOT_INITIALIZED,
        c"CUDA_ERROR_NOT_INITIALIZED",
        c"initialization error",
    ),
    (
        CUDA_ERROR_NO_DEVICE,
        c"CUDA_ERROR_NO_DEVICE",
        c"no CUDA-capable device is detected",
    ),
    (
        CUDA_ERROR_INVALID_DEVICE,
        c"CUDA_ERROR_INVALID_DEVICE",
        c"invalid device ordinal",
    ),
    (
        CUDA_ERROR_INVALID_CONTEXT,
        c"CUDA_ERROR_INVALID_CONTEXT",
        c"invalid device context",
    ),
    (
        CUDA_ERROR_NOT_FOUND,
        c"CUDA_ERROR_NOT_FOUND",
        c"named symbol not found",
    ),
    (
        CUDA_ERROR_CONTEXT_IS_DESTROYED,
        c"CUDA_ERROR_CONTEXT_IS_DESTROYED",
        c"context is destroyed",
    ),
    (
        CUDA_ERROR_NOT_SUPPORTED,
        c"CUDA_ERROR_NOT_SUPPORTED",
        c"operation not supported",
    ),
    (CUDA_ERROR_UNKNOWN, c"CUDA_ERROR_UNKNOWN", c"unknown error"),
];

/// The name and the description of `r`, if this library returns it.
fn error_text(r: CUresult) -> Option<(&'static CStr, &'static CStr)> {
    ERRORS
        .iter()
        .find(|e| e.0 == r)
        .map(|&(_, name, text)| (name, text))
}

/// Stores the name (`pick` = 0) or the description (1) of `r` in `*out`.
unsafe fn put_error_text(r: CUresult, out: *mut *const c_char, pick: usize) -> CUresult {
    match (error_text(r), out.is_null()) {
        (Some(texts), false) => {
            let text = if pick == 0 { texts.0 } else { texts.1 };
            // SAFETY: checked non-null; the caller passes a valid pointer.
            unsafe { *out = text.as_ptr() };
            CUDA_SUCCESS
        }
        _ => CUDA_ERROR_INVALID_VALUE,
    }
}

/// `cuGetErrorString`: CUDA's description of `r`. Knows only the codes this library
/// returns (CUDA knows them all); another gives `CUDA_ERROR_INVALID_VALUE`, as CUDA does
/// for a code it does not know. Needs no `cuInit`.
#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(r: CUresult, out: *mut *const c_char) -> CUresult {
    // SAFETY: forwarded caller contract.
    unsafe { put_error_text(r, out, 1) }
}

/// `cuGetErrorName`: the enum name of `r`, on the same terms as [`cuGetErrorString`].
#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(r: CUresult, out: *mut *const c_char) -> CUresult {
    // SAFETY: forwarded caller contract.
    unsafe { put_error_text(r, out, 0) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_cudas() {
        // cuda.h's cudaError_enum.
        let codes = [
            CUDA_SUCCESS,
            CUDA_ERROR_INVALID_VALUE,
            CUDA_ERROR_OUT_OF_MEMORY,
            CUDA_ERROR_NOT_INITIALIZED,
            CUDA_ERROR_NO_DEVICE,
            CUDA_ERROR_INVALID_DEVICE,
            CUDA_ERROR_INVALID_CONTEXT,
            CUDA_ERROR_NOT_FOUND,
            CUDA_ERROR_CONTEXT_IS_DESTROYED,
            CUDA_ERROR_NOT_SUPPORTED,
            CUDA_ERROR_UNKNOWN,
        ];
        assert_eq!(codes, [0, 1, 2, 3, 100, 101, 201, 500, 709, 801, 999]);
        for c in codes {
            assert!(error_text(c).is_some(), "no text for {c}");
        }
    }

    #[test]
    fn names_are_unique_and_match_their_codes() {
        for (i, (code, name, text)) in ERRORS.iter().enumerate() {
            let name = name.to_str().unwrap();
            assert!(name.starts_with("CUDA_"), "{name}");
            assert!(!text.is_empty(), "{name}");
            for (other, other_name, _) in &ERRORS[i + 1..] {
                assert_ne!(code, other, "{name}");
                assert_ne!(name, other_name.to_str().unwrap());
            }
        }
    }

    fn text(
        f: unsafe extern "C" fn(CUresult, *mut *const c_char) -> CUresult,
        r: CUresult,
    ) -> String {
        let mut s = std::ptr::null();
        // SAFETY: a valid out pointer; the result is a static C string.
        assert_eq!(unsafe { f(r, &mut s) }, CUDA_SUCCESS);
        // SAFETY: as above.
        unsafe { CStr::from_ptr(s) }.to_str().unwrap().to_string()
    }

    #[test]
    fn name_and_string_through_the_exports() {
        assert_eq!(text(cuGetErrorName, 201), "CUDA_ERROR_INVALID_CONTEXT");
        assert_eq!(text(cuGetErrorString, 201), "invalid device context");
        assert_eq!(text(cuGetErrorString, 1), "invalid argument");
        let mut s = std::ptr::null();
        // SAFETY: a valid out pointer.
        assert_eq!(
            unsafe { cuGetErrorName(12345, &mut s) },
            CUDA_ERROR_INVALID_VALUE
        );
        // SAFETY: a null out pointer is refused before use.
        assert_eq!(
            unsafe { cuGetErrorString(0, std::ptr::null_mut()) },
            CUDA_ERROR_INVALID_VALUE
        );
    }
}
