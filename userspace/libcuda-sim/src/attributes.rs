// SPDX-License-Identifier: GPL-2.0

//! `cuDeviceGetAttribute`'s table: every `CUdevice_attribute` of CUDA 12.9's `cuda.h` (1 to
//! 143; `CU_DEVICE_ATTRIBUTE_MAX` is 144), with each name it has there, and the simulated
//! GPU's value. CUDA answers every attribute of its enum; so does this library, and any other
//! number is `CUDA_ERROR_INVALID_VALUE`, as in CUDA.
//!
//! The values are an NVIDIA H100 SXM5 80GB's (compute capability 9.0, 132 SMs) with a CUDA 12
//! driver on an x86_64 host, alone (no NVSwitch fabric, no MPS, not a coherent platform), as
//! deviceQuery shows them; where deviceQuery does not show one, the value CUDA's
//! documentation and published property dumps give for that GPU. Every row was checked
//! against an H100 80GB HBM3 with CUDA 13 (`tests/cuda-trace`, compared in every plan by
//! `libcuda-sim-answers-as-recorded-cuda`; Documentation/dev/nvsim.rst, "Checked against
//! real CUDA"). Two kinds of row differ:
//!
//! - [`Value::PciDomain`], [`Value::PciBus`], [`Value::PciDevice`]: the PCI address of the
//!   device nvsim drives;
//! - [`Value::Sim`]: the simulation's answer where an H100's would announce what this library
//!   refuses in a call it has (shareable handles and host-NUMA locations in `cuMemCreate`) or
//!   where nvsim's model of GPUDirect RDMA differs (flush options, writes ordering); each
//!   such row keeps an H100's answer beside it.
//!
//! An attribute that announces calls this library lacks altogether (kernels, streams, memory
//! pools, managed memory, textures) is answered as an H100 answers it: a program that makes
//! those calls cannot run over this library whatever the attribute says.
//!
//! `tests/cuda-attrs/check_attrs.py` checks the table against `cuda.h` itself (NVIDIA's
//! wheel `nvidia-cuda-runtime-cu12`, pinned), through the ignored test
//! `attributes::tests::table_matches_cuda_h`.

use std::ffi::{c_int, c_uint};

/// `CU_DEVICE_ATTRIBUTE_MAX`: one past the last attribute of CUDA 12.9.
pub const CU_DEVICE_ATTRIBUTE_MAX: c_uint = 144;

/// What an attribute answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    /// An H100's answer, the simulation's too.
    H100(c_int),
    /// The simulation's answer, `value`, where an H100 answers `h100`.
    Sim { value: c_int, h100: c_int },
    /// The PCI domain of the device nvsim drives.
    PciDomain,
    /// Its PCI bus.
    PciBus,
    /// Its PCI device.
    PciDevice,
}

/// One `CUdevice_attribute` number.
#[derive(Debug)]
pub struct Attribute {
    pub number: c_uint,
    /// `cuda.h`'s names for the number, without `CU_DEVICE_ATTRIBUTE_`: the current one
    /// first, then the deprecated aliases that share its number.
    pub names: &'static [&'static str],
    pub value: Value,
}

/// `NUMBER NAME | ALIAS ... => VALUE;` rows.
macro_rules! attributes {
    ($($number:literal $($name:ident)|+ => $value:expr;)*) => {
        &[$(Attribute { number: $number, names: &[$(stringify!($name)),+], value: $value }),*]
    };
}

use Value::*;

/// Every attribute, by number.
pub static ATTRIBUTES: &[Attribute] = attributes! {
    1 MAX_THREADS_PER_BLOCK => H100(1024);
    2 MAX_BLOCK_DIM_X => H100(1024);
    3 MAX_BLOCK_DIM_Y => H100(1024);
    4 MAX_BLOCK_DIM_Z => H100(64);
    5 MAX_GRID_DIM_X => H100(2147483647);
    6 MAX_GRID_DIM_Y => H100(65535);
    7 MAX_GRID_DIM_Z => H100(65535);
    8 MAX_SHARED_MEMORY_PER_BLOCK | SHARED_MEMORY_PER_BLOCK => H100(49152);
    9 TOTAL_CONSTANT_MEMORY => H100(65536);
    10 WARP_SIZE => H100(32);
    11 MAX_PITCH => H100(2147483647);
    12 MAX_REGISTERS_PER_BLOCK | REGISTERS_PER_BLOCK => H100(65536);
    // kHz: 1980 MHz boost.
    13 CLOCK_RATE => H100(1980000);
    14 TEXTURE_ALIGNMENT => H100(512);
    15 GPU_OVERLAP => H100(1);
    16 MULTIPROCESSOR_COUNT => H100(132);
    17 KERNEL_EXEC_TIMEOUT => H100(0);
    18 INTEGRATED => H100(0);
    19 CAN_MAP_HOST_MEMORY => H100(1);
    // CU_COMPUTEMODE_DEFAULT.
    20 COMPUTE_MODE => H100(0);
    21 MAXIMUM_TEXTURE1D_WIDTH => H100(131072);
    22 MAXIMUM_TEXTURE2D_WIDTH => H100(131072);
    23 MAXIMUM_TEXTURE2D_HEIGHT => H100(65536);
    24 MAXIMUM_TEXTURE3D_WIDTH => H100(16384);
    25 MAXIMUM_TEXTURE3D_HEIGHT => H100(16384);
    26 MAXIMUM_TEXTURE3D_DEPTH => H100(16384);
    27 MAXIMUM_TEXTURE2D_LAYERED_WIDTH | MAXIMUM_TEXTURE2D_ARRAY_WIDTH => H100(32768);
    28 MAXIMUM_TEXTURE2D_LAYERED_HEIGHT | MAXIMUM_TEXTURE2D_ARRAY_HEIGHT => H100(32768);
    29 MAXIMUM_TEXTURE2D_LAYERED_LAYERS | MAXIMUM_TEXTURE2D_ARRAY_NUMSLICES => H100(2048);
    30 SURFACE_ALIGNMENT => H100(512);
    31 CONCURRENT_KERNELS => H100(1);
    32 ECC_ENABLED => H100(1);
    33 PCI_BUS_ID => PciBus;
    34 PCI_DEVICE_ID => PciDevice;
    35 TCC_DRIVER => H100(0);
    // kHz: HBM3 at 2619 MHz.
    36 MEMORY_CLOCK_RATE => H100(2619000);
    37 GLOBAL_MEMORY_BUS_WIDTH => H100(5120);
    // 50 MiB.
    38 L2_CACHE_SIZE => H100(52428800);
    39 MAX_THREADS_PER_MULTIPROCESSOR => H100(2048);
    40 ASYNC_ENGINE_COUNT => H100(3);
    41 UNIFIED_ADDRESSING => H100(1);
    42 MAXIMUM_TEXTURE1D_LAYERED_WIDTH => H100(32768);
    43 MAXIMUM_TEXTURE1D_LAYERED_LAYERS => H100(2048);
    44 CAN_TEX2D_GATHER => H100(1);
    45 MAXIMUM_TEXTURE2D_GATHER_WIDTH => H100(32768);
    46 MAXIMUM_TEXTURE2D_GATHER_HEIGHT => H100(32768);
    47 MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE => H100(8192);
    48 MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE => H100(8192);
    49 MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE => H100(32768);
    50 PCI_DOMAIN_ID => PciDomain;
    51 TEXTURE_PITCH_ALIGNMENT => H100(32);
    52 MAXIMUM_TEXTURECUBEMAP_WIDTH => H100(32768);
    53 MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH => H100(32768);
    54 MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS => H100(2046);
    55 MAXIMUM_SURFACE1D_WIDTH => H100(32768);
    56 MAXIMUM_SURFACE2D_WIDTH => H100(131072);
    57 MAXIMUM_SURFACE2D_HEIGHT => H100(65536);
    58 MAXIMUM_SURFACE3D_WIDTH => H100(16384);
    59 MAXIMUM_SURFACE3D_HEIGHT => H100(16384);
    60 MAXIMUM_SURFACE3D_DEPTH => H100(16384);
    61 MAXIMUM_SURFACE1D_LAYERED_WIDTH => H100(32768);
    62 MAXIMUM_SURFACE1D_LAYERED_LAYERS => H100(2048);
    63 MAXIMUM_SURFACE2D_LAYERED_WIDTH => H100(32768);
    64 MAXIMUM_SURFACE2D_LAYERED_HEIGHT => H100(32768);
    65 MAXIMUM_SURFACE2D_LAYERED_LAYERS => H100(2048);
    66 MAXIMUM_SURFACECUBEMAP_WIDTH => H100(32768);
    67 MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH => H100(32768);
    68 MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS => H100(2046);
    69 MAXIMUM_TEXTURE1D_LINEAR_WIDTH => H100(268435456);
    70 MAXIMUM_TEXTURE2D_LINEAR_WIDTH => H100(131072);
    71 MAXIMUM_TEXTURE2D_LINEAR_HEIGHT => H100(65000);
    72 MAXIMUM_TEXTURE2D_LINEAR_PITCH => H100(2097120);
    73 MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH => H100(32768);
    74 MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT => H100(32768);
    75 COMPUTE_CAPABILITY_MAJOR => H100(9);
    76 COMPUTE_CAPABILITY_MINOR => H100(0);
    77 MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH => H100(32768);
    78 STREAM_PRIORITIES_SUPPORTED => H100(1);
    79 GLOBAL_L1_CACHE_SUPPORTED => H100(1);
    80 LOCAL_L1_CACHE_SUPPORTED => H100(1);
    // 228 KiB.
    81 MAX_SHARED_MEMORY_PER_MULTIPROCESSOR => H100(233472);
    82 MAX_REGISTERS_PER_MULTIPROCESSOR => H100(65536);
    83 MANAGED_MEMORY => H100(1);
    84 MULTI_GPU_BOARD => H100(0);
    85 MULTI_GPU_BOARD_GROUP_ID => H100(0);
    // PCIe to an x86_64 host: no native atomics.
    86 HOST_NATIVE_ATOMIC_SUPPORTED => H100(0);
    87 SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO => H100(2);
    // No HMM, no ATS: pageable host memory is not reachable from the GPU.
    88 PAGEABLE_MEMORY_ACCESS => H100(0);
    89 CONCURRENT_MANAGED_ACCESS => H100(1);
    90 COMPUTE_PREEMPTION_SUPPORTED => H100(1);
    91 CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM => H100(1);
    92 CAN_USE_STREAM_MEM_OPS_V1 => H100(0);
    93 CAN_USE_64_BIT_STREAM_MEM_OPS_V1 => H100(0);
    94 CAN_USE_STREAM_WAIT_VALUE_NOR_V1 => H100(0);
    95 COOPERATIVE_LAUNCH => H100(1);
    96 COOPERATIVE_MULTI_DEVICE_LAUNCH => H100(1);
    // 227 KiB.
    97 MAX_SHARED_MEMORY_PER_BLOCK_OPTIN => H100(232448);
    98 CAN_FLUSH_REMOTE_WRITES => H100(0);
    99 HOST_REGISTER_SUPPORTED => H100(1);
    100 PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES => H100(0);
    101 DIRECT_MANAGED_MEM_ACCESS_FROM_HOST => H100(0);
    // cuMemCreate memory, mapped with cuMemMap, can be pinned (crate::vmm).
    102 VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED | VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED => H100(1);
    // cuMemCreate refuses every shareable handle type.
    103 HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED => Sim { value: 0, h100: 1 };
    104 HANDLE_TYPE_WIN32_HANDLE_SUPPORTED => H100(0);
    105 HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED => H100(0);
    106 MAX_BLOCKS_PER_MULTIPROCESSOR => H100(32);
    // cuMemCreate accepts a compression type and ignores it.
    107 GENERIC_COMPRESSION_SUPPORTED => H100(1);
    108 MAX_PERSISTING_L2_CACHE_SIZE => H100(32768000);
    109 MAX_ACCESS_POLICY_WINDOW_SIZE => H100(134217728);
    110 GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED => H100(1);
    111 RESERVED_SHARED_MEMORY_PER_BLOCK => H100(1024);
    112 SPARSE_CUDA_ARRAY_SUPPORTED => H100(1);
    113 READ_ONLY_HOST_REGISTER_SUPPORTED => H100(1);
    114 TIMELINE_SEMAPHORE_INTEROP_SUPPORTED => H100(1);
    115 MEMORY_POOLS_SUPPORTED => H100(1);
    116 GPU_DIRECT_RDMA_SUPPORTED => H100(1);
    // No flush options (CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_HOST on an H100): this
    // library has neither cuFlushGPUDirectRDMAWrites nor stream memory operations, and needs
    // neither (see WRITES_ORDERING).
    117 GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS => Sim { value: 0, h100: 1 };
    // CU_GPU_DIRECT_RDMA_WRITES_ORDERING_OWNER, as the H100 and H200 answered
    // (`tests/cuda-trace`): here the GPU memory is the BAR itself, so a peer's write is
    // there, in order, when the peer's DMA completes.
    118 GPU_DIRECT_RDMA_WRITES_ORDERING => H100(crate::device::CU_GPU_DIRECT_RDMA_WRITES_ORDERING_OWNER);
    // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR.
    119 MEMPOOL_SUPPORTED_HANDLE_TYPES => H100(9);
    120 CLUSTER_LAUNCH => H100(1);
    121 DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED => H100(1);
    122 CAN_USE_64_BIT_STREAM_MEM_OPS => H100(1);
    123 CAN_USE_STREAM_WAIT_VALUE_NOR => H100(1);
    124 DMA_BUF_SUPPORTED => H100(1);
    125 IPC_EVENT_SUPPORTED => H100(1);
    126 MEM_SYNC_DOMAIN_COUNT => H100(4);
    127 TENSOR_MAP_ACCESS_SUPPORTED => H100(1);
    // Fabric handles need an NVSwitch fabric (IMEX).
    128 HANDLE_TYPE_FABRIC_SUPPORTED => H100(1);
    129 UNIFIED_FUNCTION_POINTERS => H100(1);
    // CU_DEVICE_NUMA_CONFIG_NONE: the GPU memory is no NUMA node.
    130 NUMA_CONFIG => H100(0);
    131 NUMA_ID => H100(-1);
    132 MULTICAST_SUPPORTED => H100(0);
    133 MPS_ENABLED => H100(0);
    134 HOST_NUMA_ID => H100(0);
    135 D3D12_CIG_SUPPORTED => H100(0);
    // Hardware decompression came with Blackwell.
    136 MEM_DECOMPRESS_ALGORITHM_MASK => H100(0);
    137 MEM_DECOMPRESS_MAXIMUM_LENGTH => H100(0);
    138 VULKAN_CIG_SUPPORTED => H100(0);
    // PCI device ID 0x2330 (H100 SXM5 80GB) in the high half, NVIDIA's vendor ID in the low.
    139 GPU_PCI_DEVICE_ID => H100(0x2330_10de);
    140 GPU_PCI_SUBSYSTEM_ID => H100(0x16c1_10de);
    // cuMemCreate takes device locations only.
    141 HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED => Sim { value: 0, h100: 1 };
    142 HOST_NUMA_MEMORY_POOLS_SUPPORTED => H100(1);
    143 HOST_NUMA_MULTINODE_IPC_SUPPORTED => H100(0);
};

/// The attribute numbered `number`, if CUDA 12.9 has one.
pub fn find(number: c_uint) -> Option<&'static Attribute> {
    ATTRIBUTES.iter().find(|a| a.number == number)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `cuda.h`'s `CUdevice_attribute_enum`: every (name without `CU_DEVICE_ATTRIBUTE_`,
    /// number), aliases included, and the value of `CU_DEVICE_ATTRIBUTE_MAX`. An enumerator
    /// without `= N` is one more than the one before, as in C.
    fn parse_cuda_h(text: &str) -> Result<(Vec<(String, c_uint)>, c_uint), String> {
        const PREFIX: &str = "CU_DEVICE_ATTRIBUTE_";
        let start = text
            .find("typedef enum CUdevice_attribute_enum {")
            .ok_or("no CUdevice_attribute_enum")?;
        let body = &text[start..];
        let end = body
            .find("} CUdevice_attribute;")
            .ok_or("unterminated enum")?;
        let (mut enumerators, mut max, mut next) = (Vec::new(), None, 0);
        for line in body[..end].lines().skip(1) {
            let code = line.split("/*").next().unwrap_or("").trim();
            let Some(rest) = code.strip_prefix(PREFIX) else {
                continue;
            };
            let rest = rest.trim_end_matches(',');
            let (name, number) = match rest.split_once('=') {
                Some((name, n)) => {
                    let n = n.trim();
                    let number = n.parse().map_err(|_| format!("not a number: {line}"))?;
                    (name.trim(), number)
                }
                None => (rest.trim(), next),
            };
            next = number + 1;
            if name == "MAX" {
                max = Some(number);
            } else {
                enumerators.push((name.to_string(), number));
            }
        }
        Ok((enumerators, max.ok_or("no CU_DEVICE_ATTRIBUTE_MAX")?))
    }

    /// The (name, number) pairs of `a` that `b` lacks, one line each, with the number `b` gives
    /// the name.
    fn lacking(a: &[(&str, c_uint)], b: &[(&str, c_uint)], in_a: &str, in_b: &str) -> Vec<String> {
        let a_only = a.iter().filter(|pair| !b.contains(pair));
        a_only
            .map(|&(name, number)| {
                let has = b.iter().find(|(n, _)| *n == name);
                let has = has.map_or("absent".to_string(), |(_, v)| v.to_string());
                format!("CU_DEVICE_ATTRIBUTE_{name} = {number} in {in_a}; in {in_b}: {has}")
            })
            .collect()
    }

    /// How the table and `cuda.h`'s enumerators (and its MAX) differ, one line each; empty
    /// where they agree.
    fn differences(cuda_h: &[(String, c_uint)], max: c_uint) -> Vec<String> {
        let table: Vec<(&str, c_uint)> = ATTRIBUTES
            .iter()
            .flat_map(|a| a.names.iter().map(move |n| (*n, a.number)))
            .collect();
        let cuda_h: Vec<(&str, c_uint)> = cuda_h.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        let mut out = lacking(&cuda_h, &table, "cuda.h", "the table");
        out.extend(lacking(&table, &cuda_h, "the table", "cuda.h"));
        if max != CU_DEVICE_ATTRIBUTE_MAX {
            out.push(format!(
                "CU_DEVICE_ATTRIBUTE_MAX = {max} in cuda.h, {CU_DEVICE_ATTRIBUTE_MAX} here"
            ));
        }
        out
    }

    #[test]
    fn numbers_are_one_to_max_once_each() {
        let numbers: Vec<c_uint> = ATTRIBUTES.iter().map(|a| a.number).collect();
        assert_eq!(numbers, (1..CU_DEVICE_ATTRIBUTE_MAX).collect::<Vec<_>>());
        let mut names: Vec<&str> = ATTRIBUTES.iter().flat_map(|a| a.names).copied().collect();
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n, "a name twice");
    }

    #[test]
    fn lookup() {
        for a in ATTRIBUTES {
            assert!(std::ptr::eq(find(a.number).unwrap(), a), "{}", a.number);
        }
        for unknown in [0, CU_DEVICE_ATTRIBUTE_MAX, 9999, c_uint::MAX] {
            assert!(find(unknown).is_none(), "{unknown}");
        }
        let named = |name| {
            let a = ATTRIBUTES.iter().find(|a| a.names.contains(&name)).unwrap();
            (a.number, a.value)
        };
        assert_eq!(named("COMPUTE_MODE"), (20, H100(0)));
        assert_eq!(
            named("PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES"),
            (100, H100(0))
        );
        assert_eq!(named("SHARED_MEMORY_PER_BLOCK"), (8, H100(49152)));
        assert_eq!(named("MULTIPROCESSOR_COUNT"), (16, H100(132)));
    }

    /// Where the simulation answers otherwise than an H100, it says so: no `Sim` row carries
    /// an H100's own answer.
    #[test]
    fn sim_rows_differ_from_h100() {
        for a in ATTRIBUTES {
            if let Sim { value, h100 } = a.value {
                assert_ne!(value, h100, "{}", a.names[0]);
            }
        }
    }

    /// The table's H100 answers (an `H100` row's value, a `Sim` row's `h100`) are the
    /// recorded H100's (`tests/cuda-trace`), which the guest's comparison checks only where
    /// the simulation answers the same: a `Sim` row's note of the H100 would go unchecked.
    #[test]
    fn h100_answers_are_the_recorded_ones() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/cuda-trace/h100-580.159.04.txt"
        );
        let record = std::fs::read_to_string(path).unwrap();
        let recorded = |n: c_uint| {
            record
                .lines()
                .find_map(|l| l.strip_prefix(&format!("attributes.{n}: ")))
                .and_then(|v| v.parse::<c_int>().ok())
        };
        let mut checked = 0;
        for a in ATTRIBUTES {
            let h100 = match a.value {
                H100(v) | Sim { h100: v, .. } => v,
                PciDomain | PciBus | PciDevice => continue,
            };
            if let Some(r) = recorded(a.number) {
                assert_eq!(h100, r, "{} ({})", a.names[0], a.number);
                checked += 1;
            }
        }
        assert!(checked > 100, "{checked} attributes found in the record");
    }

    const ENUM: &str = "
typedef enum CUdevice_attribute_enum {
    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,  /**< Maximum number of threads */
    CU_DEVICE_ATTRIBUTE_SHARED_MEMORY_PER_BLOCK = 8, /**< Deprecated, use X */
    CU_DEVICE_ATTRIBUTE_VULKAN_CIG_SUPPORTED = 138,
    CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID    = 139, /**< combined */
    CU_DEVICE_ATTRIBUTE_MAX
} CUdevice_attribute;
";

    #[test]
    fn parses_cuda_h_enum() {
        let text = format!("#define CU_DEVICE_ATTRIBUTE_FOO 3\n{ENUM}");
        let (e, max) = parse_cuda_h(&text).unwrap();
        let e: Vec<(&str, c_uint)> = e.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        assert_eq!(
            e,
            [
                ("MAX_THREADS_PER_BLOCK", 1),
                ("SHARED_MEMORY_PER_BLOCK", 8),
                ("VULKAN_CIG_SUPPORTED", 138),
                ("GPU_PCI_DEVICE_ID", 139)
            ]
        );
        assert_eq!(max, 140);
        assert!(parse_cuda_h("enum {}").is_err());
    }

    #[test]
    fn differences_name_each_attribute() {
        let all: Vec<(String, c_uint)> = ATTRIBUTES
            .iter()
            .flat_map(|a| a.names.iter().map(|n| (n.to_string(), a.number)))
            .collect();
        assert_eq!(
            differences(&all, CU_DEVICE_ATTRIBUTE_MAX),
            Vec::<String>::new()
        );

        let mut changed = all.clone();
        changed.retain(|(n, _)| n != "COMPUTE_MODE");
        changed.push(("NEW_ONE".into(), 144));
        changed
            .iter_mut()
            .find(|(n, _)| n == "WARP_SIZE")
            .unwrap()
            .1 = 11;
        let d = differences(&changed, 145);
        assert_eq!(
            d,
            [
                "CU_DEVICE_ATTRIBUTE_WARP_SIZE = 11 in cuda.h; in the table: 10",
                "CU_DEVICE_ATTRIBUTE_NEW_ONE = 144 in cuda.h; in the table: absent",
                "CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10 in the table; in cuda.h: 11",
                "CU_DEVICE_ATTRIBUTE_COMPUTE_MODE = 20 in the table; in cuda.h: absent",
                "CU_DEVICE_ATTRIBUTE_MAX = 145 in cuda.h, 144 here",
            ]
        );
    }

    /// The table against CUDA's own `cuda.h`, named by `LIBCUDA_SIM_CUDA_H`:
    /// `tests/cuda-attrs/check_attrs.py` fetches it and runs this test.
    #[test]
    #[ignore = "needs cuda.h: run by tests/cuda-attrs/check_attrs.py"]
    fn table_matches_cuda_h() {
        let path = std::env::var("LIBCUDA_SIM_CUDA_H").expect("LIBCUDA_SIM_CUDA_H: cuda.h");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let (enumerators, max) = parse_cuda_h(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
        let d = differences(&enumerators, max);
        assert!(
            d.is_empty(),
            "the attribute table and {path} differ:\n{}",
            d.join("\n")
        );
        println!(
            "{} enumerators of {path}, MAX {max}: all in the table",
            enumerators.len()
        );
    }
}
