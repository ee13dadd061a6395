// SPDX-License-Identifier: GPL-2.0

//! The module parameters (the `module!` block in the crate root), read in one place: the
//! cache limits the engine applies, the longest pin, and the invalidate-callback warning.

use kernel::fmt;

use crate::policy::Limits;

/// Reads a module parameter. The kernel crate's `value()` returns a reference up to 7.2 and
/// the value from 7.3 on (`param_value_owned`, set by src/Kbuild).
macro_rules! param {
    ($name:ident) => {{
        #[cfg(param_value_owned)]
        let value = crate::module_parameters::$name.value();
        #[cfg(not(param_value_owned))]
        let value = *crate::module_parameters::$name.value();
        value
    }};
}

/// The longest pin request, in bytes (`max_pin_bytes`).
pub(crate) fn max_pin_bytes() -> u64 {
    param!(max_pin_bytes)
}

/// The cache limits (`cache_max_bytes`, `cache_max_regions`, `global_max_bytes`).
pub(crate) fn limits() -> Limits {
    Limits {
        ctx_bytes: param!(cache_max_bytes),
        ctx_regions: param!(cache_max_regions),
        global_bytes: param!(global_max_bytes),
    }
}

/// How long a peer driver's invalidate callback may take before it is reported
/// (`invalidate_warn_ms`).
pub(crate) fn invalidate_warn_ms() -> u64 {
    param!(invalidate_warn_ms)
}

/// Whether to register `/dev/gdrdrv` when the name is free (`gdrdrv`).
pub(crate) fn gdrdrv() -> bool {
    param!(gdrdrv) != 0
}

/// Whether a region keeps its DMA mapping for a peer after the last registration or
/// dma-buf attachment that used it goes, until the region is unpinned (`dma_map_keep`).
pub(crate) fn dma_map_keep() -> bool {
    param!(dma_map_keep) != 0
}

/// Formats the parameters (debugfs `gdrpeer/params`: module parameters are not in sysfs).
pub(crate) fn show(f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let limits = limits();
    writeln!(f, "max_pin_bytes {}", max_pin_bytes())?;
    writeln!(f, "cache_max_bytes {}", limits.ctx_bytes)?;
    writeln!(f, "cache_max_regions {}", limits.ctx_regions)?;
    writeln!(f, "global_max_bytes {}", limits.global_bytes)?;
    writeln!(f, "invalidate_warn_ms {}", invalidate_warn_ms())?;
    writeln!(f, "gdrdrv {}", u32::from(gdrdrv()))?;
    writeln!(f, "dma_map_keep {}", u32::from(dma_map_keep()))
}
