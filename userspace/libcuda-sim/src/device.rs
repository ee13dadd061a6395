// SPDX-License-Identifier: GPL-2.0

//! The device: one simulated GPU, described as one plausible model, H100-like (compute
//! capability 9.0), at the PCI address of the device nvsim drives.

use crate::attributes::{find, Value};
use crate::context::{answer, with_gpu};
use crate::errors::*;
use crate::{CUdevice, CUresult};
use std::ffi::{c_char, c_int, c_uint, CStr};

pub const CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: c_uint = 33;
pub const CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: c_uint = 34;
pub const CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: c_uint = 41;
pub const CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: c_uint = 50;
pub const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: c_uint = 75;
pub const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: c_uint = 76;
pub const CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: c_uint = 102;
pub const CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED: c_uint = 110;
pub const CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED: c_uint = 116;
pub const CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS: c_uint = 117;
pub const CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING: c_uint = 118;

/// `CUGPUDirectRDMAWritesOrdering`: the device consumes remote writes in order itself.
pub const CU_GPU_DIRECT_RDMA_WRITES_ORDERING_OWNER: c_int = 100;

/// `cuDeviceGetName`'s answer: says both what the device simulates and that it is nvsim.
const NAME: &CStr = c"nvsim simulated GPU (H100-like, sm_90)";

/// Where nvsim's driver directory lists the device it is bound to.
const NVSIM_DRIVER_DIR: &str = "/sys/bus/pci/drivers/nvsim";

/// A PCI address, `domain:bus:device.function`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PciAddress {
    pub domain: u32,
    pub bus: u8,
    pub device: u8,
    pub function: u8,
}

impl std::fmt::Display for PciAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let PciAddress {
            domain,
            bus,
            device,
            function,
        } = self;
        write!(f, "{domain:04x}:{bus:02x}:{device:02x}.{function:x}")
    }
}

/// Parses sysfs's name of a PCI device, `0000:00:04.0`.
pub(crate) fn parse_pci_address(s: &str) -> Option<PciAddress> {
    let (domain, rest) = s.split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (device, function) = rest.split_once('.')?;
    let hex8 = |t: &str| (t.len() == 2).then(|| u8::from_str_radix(t, 16).ok())?;
    let a = PciAddress {
        domain: u32::from_str_radix(domain, 16).ok()?,
        bus: hex8(bus)?,
        device: hex8(device)?,
        function: u8::from_str_radix(function, 16).ok()?,
    };
    (domain.len() >= 4 && a.device < 32 && a.function < 8 && function.len() == 1).then_some(a)
}

/// The PCI address of the device nvsim drives, from sysfs; None where sysfs does not list
/// one (not in the test guest).
pub(crate) fn nvsim_pci_address() -> Option<PciAddress> {
    std::fs::read_dir(NVSIM_DRIVER_DIR)
        .ok()?
        .filter_map(|e| parse_pci_address(e.ok()?.file_name().to_str()?))
        .next()
}

/// The value of `attr` for the simulated GPU ([`crate::attributes`]), or None for a number
/// that is no `CUdevice_attribute`. `pci` is asked only for the PCI attributes.
fn attribute(attr: c_uint, pci: impl FnOnce() -> PciAddress) -> Option<c_int> {
    Some(match find(attr)?.value {
        Value::H100(v) | Value::Sim { value: v, .. } => v,
        Value::PciBus => pci().bus.into(),
        Value::PciDevice => pci().device.into(),
        Value::PciDomain => c_int::try_from(pci().domain).ok()?,
    })
}

/// `cuDeviceGetCount`: 1.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CUresult {
    // SAFETY: the caller passes a valid pointer or null.
    unsafe { answer(count, false, |_| Ok(1)) }
}

/// `cuDeviceGet`: device 0 for ordinal 0; any other ordinal is `CUDA_ERROR_INVALID_DEVICE`.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> CUresult {
    let device_of = |ordinal| (ordinal == 0).then_some(0).ok_or(CUDA_ERROR_INVALID_DEVICE);
    // SAFETY: the caller passes a valid pointer or null.
    unsafe { answer(device, false, |_| device_of(ordinal)) }
}

/// `cuDeviceGetName`: "nvsim simulated GPU (H100-like, sm_90)", cut to `len` bytes with its
/// NUL as CUDA cuts it. A real H100 calls itself "NVIDIA H100 ...".
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    if name.is_null() || len <= 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    with_gpu(|_| {
        if dev != 0 {
            return CUDA_ERROR_INVALID_DEVICE;
        }
        let bytes = NAME.to_bytes_with_nul();
        let n = bytes.len().min(len as usize);
        // SAFETY: the caller's buffer holds `len` bytes; we write at most that, NUL-terminated.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), name as *mut u8, n);
            *name.add(n - 1) = 0;
        }
        CUDA_SUCCESS
    })
}

/// `cuDeviceGetAttribute`: every attribute of CUDA 12.9's `CUdevice_attribute`, with an
/// H100's values except where [`crate::attributes`] says otherwise (the PCI domain, bus and
/// device of the device nvsim drives, 0 where sysfs does not list it; GPUDirect RDMA's flush
/// options and writes ordering; what `cuMemCreate` refuses). Any other number is
/// `CUDA_ERROR_INVALID_VALUE`, as in CUDA.
/// Needs `cuInit`, not a current context.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    pi: *mut c_int,
    attrib: c_uint,
    dev: CUdevice,
) -> CUresult {
    let value = || match dev {
        0 => attribute(attrib, || nvsim_pci_address().unwrap_or_default())
            .ok_or(CUDA_ERROR_INVALID_VALUE),
        _ => Err(CUDA_ERROR_INVALID_DEVICE),
    };
    // SAFETY: the caller passes a valid pointer or null.
    unsafe { answer(pi, false, |_| value()) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attributes::{ATTRIBUTES, CU_DEVICE_ATTRIBUTE_MAX};
    use crate::test_util::no_nvsim;

    #[test]
    fn attribute_numbers_are_cudas() {
        // The constants, by the table's names (the table is checked against cuda.h).
        let consts = [
            (CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, "PCI_BUS_ID"),
            (CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, "PCI_DEVICE_ID"),
            (CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, "UNIFIED_ADDRESSING"),
            (CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, "PCI_DOMAIN_ID"),
            (
                CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                "COMPUTE_CAPABILITY_MAJOR",
            ),
            (
                CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                "COMPUTE_CAPABILITY_MINOR",
            ),
            (
                CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                "VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED",
            ),
            (
                CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED,
                "GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED",
            ),
            (
                CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED,
                "GPU_DIRECT_RDMA_SUPPORTED",
            ),
            (
                CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS,
                "GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS",
            ),
            (
                CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING,
                "GPU_DIRECT_RDMA_WRITES_ORDERING",
            ),
        ];
        for (number, name) in consts {
            assert_eq!(find(number).map(|a| a.names[0]), Some(name), "{number}");
        }
        assert_eq!(CU_GPU_DIRECT_RDMA_WRITES_ORDERING_OWNER, 100);
    }

    #[test]
    fn attribute_table() {
        let pci = || PciAddress {
            domain: 1,
            bus: 0x3b,
            device: 4,
            function: 0,
        };
        let expected = [
            (75, 9),
            (76, 0),
            (41, 1),
            (116, 1),
            (102, 1),
            (110, 1),
            (117, 0),
            (118, 100),
            (33, 0x3b),
            (34, 4),
            (50, 1),
            // COMPUTE_MODE: CU_COMPUTEMODE_DEFAULT.
            (20, 0),
            (100, 0),
            (16, 132),
            (10, 32),
            (1, 1024),
        ];
        for (attr, value) in expected {
            assert_eq!(attribute(attr, pci), Some(value), "attribute {attr}");
        }
        let no_pci = || -> PciAddress { panic!("PCI address asked for") };
        for unknown in [0, CU_DEVICE_ATTRIBUTE_MAX, 9999, c_uint::MAX] {
            assert_eq!(attribute(unknown, no_pci), None, "attribute {unknown}");
        }
        assert_eq!(attribute(75, no_pci), Some(9));
    }

    /// Every number of the table answers; the PCI rows from the PCI address, the others
    /// without asking for it.
    #[test]
    fn every_attribute_answered() {
        let pci = || PciAddress {
            domain: 0x10000,
            bus: 0xe1,
            device: 0x1f,
            function: 7,
        };
        for a in ATTRIBUTES {
            let asked = std::cell::Cell::new(false);
            let v = attribute(a.number, || {
                asked.set(true);
                pci()
            });
            assert!(v.is_some(), "{} unanswered", a.names[0]);
            let from_pci = matches!(a.value, Value::PciBus | Value::PciDevice | Value::PciDomain);
            assert_eq!(asked.get(), from_pci, "{}", a.names[0]);
        }
        assert_eq!(attribute(50, pci), Some(0x10000));
    }

    #[test]
    fn pci_addresses() {
        let a = parse_pci_address("0000:00:04.0").unwrap();
        assert_eq!((a.domain, a.bus, a.device, a.function), (0, 0, 4, 0));
        let a = parse_pci_address("10000:e1:1f.7").unwrap();
        assert_eq!(
            (a.domain, a.bus, a.device, a.function),
            (0x10000, 0xe1, 0x1f, 7)
        );
        assert_eq!(a.to_string(), "10000:e1:1f.7");
        assert_eq!(
            parse_pci_address("0000:3b:00.0").unwrap().to_string(),
            "0000:3b:00.0"
        );
        for bad in [
            "bind",
            "new_id",
            "module",
            "0000:00:20.0",
            "0000:00:04.8",
            "0:0:4.0",
            "",
        ] {
            assert_eq!(parse_pci_address(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn argument_checks_and_no_device() {
        let mut v = -1;
        let mut name = [0 as c_char; 8];
        // SAFETY (all calls): null pointers are refused before use; others are valid.
        unsafe {
            assert_eq!(
                cuDeviceGetAttribute(std::ptr::null_mut(), 75, 0),
                CUDA_ERROR_INVALID_VALUE
            );
            assert_eq!(
                cuDeviceGetCount(std::ptr::null_mut()),
                CUDA_ERROR_INVALID_VALUE
            );
            assert_eq!(
                cuDeviceGet(std::ptr::null_mut(), 0),
                CUDA_ERROR_INVALID_VALUE
            );
            assert_eq!(
                cuDeviceGetName(name.as_mut_ptr(), 0, 0),
                CUDA_ERROR_INVALID_VALUE
            );
            if no_nvsim() {
                assert_eq!(
                    cuDeviceGetAttribute(&mut v, 75, 0),
                    CUDA_ERROR_NOT_INITIALIZED
                );
                assert_eq!(cuDeviceGetCount(&mut v), CUDA_ERROR_NOT_INITIALIZED);
                assert_eq!(cuDeviceGet(&mut v, 0), CUDA_ERROR_NOT_INITIALIZED);
                assert_eq!(
                    cuDeviceGetName(name.as_mut_ptr(), 8, 0),
                    CUDA_ERROR_NOT_INITIALIZED
                );
            }
        }
        assert_eq!(v, -1);
    }
}
