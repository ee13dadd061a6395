// SPDX-License-Identifier: GPL-2.0

//! What `doctor` reads, parsed, and the rules it judges by: pure functions, tested on text.

use serde::Serialize;

/// The value of `CONFIG_<key>` in a kernel configuration: `Some("y")`, a string without
/// its quotes, `Some("n")` for `# CONFIG_<key> is not set`, `None` when absent.
pub fn config_value<'a>(config: &'a str, key: &str) -> Option<&'a str> {
    let set = format!("CONFIG_{key}=");
    let unset = format!("# CONFIG_{key} is not set");
    for line in config.lines() {
        if let Some(v) = line.strip_prefix(&set) {
            return Some(v.trim_matches('"'));
        }
        if line == unset {
            return Some("n");
        }
    }
    None
}

/// The files a kernel build tree needs for out-of-tree Rust modules, as
/// `scripts/prepare-kdir --check` names them (its `RMETA` list and `target.json` on x86_64).
pub fn rust_metadata_files(x86_64: bool) -> Vec<String> {
    let mut v: Vec<String> = [
        "core",
        "compiler_builtins",
        "ffi",
        "build_error",
        "pin_init",
        "macros",
        "bindings",
        "uapi",
        "kernel",
    ]
    .iter()
    .map(|c| match *c {
        "macros" => "rust/libmacros.so".to_string(),
        c => format!("rust/lib{c}.rmeta"),
    })
    .collect();
    if x86_64 {
        v.push("scripts/target.json".into());
    }
    v
}

/// The NVIDIA kernel modules' flavour, from a module's license or its taint flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Flavour {
    /// NVIDIA's open kernel modules ("Dual MIT/GPL"): what gdrpeer needs.
    Open,
    /// The proprietary modules ("NVIDIA"): the kernel refuses gdrpeer beside them.
    Proprietary,
}

/// The flavour a `MODULE_LICENSE` string means to the kernel: the licenses
/// `license_is_gpl_compatible()` accepts are open, anything else taints (P).
pub fn flavour_of_license(license: &str) -> Flavour {
    match license.trim() {
        "GPL"
        | "GPL v2"
        | "GPL and additional rights"
        | "Dual BSD/GPL"
        | "Dual MIT/GPL"
        | "Dual MPL/GPL" => Flavour::Open,
        _ => Flavour::Proprietary,
    }
}

/// The flavour a loaded module's `taint` file (`/sys/module/M/taint`) shows: `P` is
/// the proprietary-module taint.
pub fn flavour_of_taint(taint: &str) -> Flavour {
    if taint.contains('P') {
        Flavour::Proprietary
    } else {
        Flavour::Open
    }
}

/// The flavour of a loaded module, from its `taint` (a proprietary module always taints
/// `P`), and that of its installed file, from `modinfo`'s `license`, where the two differ:
/// a driver replaced on disk and not reloaded yet. The loaded one is what gdrpeer meets.
pub fn loaded_flavour(license: Option<&str>, taint: &str) -> (Flavour, Option<Flavour>) {
    let loaded = flavour_of_taint(taint);
    let installed = license.map(flavour_of_license).filter(|f| *f != loaded);
    (loaded, installed)
}

/// The modules exporting each nv-p2p function named in `/proc/kallsyms`: (symbol, module).
pub fn nv_p2p_exports(kallsyms: &str) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = kallsyms
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_addr, _kind, sym) = (f.next()?, f.next()?, f.next()?);
            let module = f.next()?.strip_prefix('[')?.strip_suffix(']')?;
            sym.starts_with("nvidia_p2p_")
                .then(|| (sym.to_string(), module.to_string()))
        })
        .collect();
    v.sort();
    v.dedup();
    v
}

/// A version word as nv-p2p writes it (0x00020000 is 2.0).
pub fn nv_version(word: u32) -> String {
    format!("{}.{}", word >> 16, word & 0xffff)
}

/// A number as sysfs writes a module parameter (decimal) or a register (0x hex).
pub fn parse_int(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// The size of BAR `index` from a PCI function's sysfs `resource` file (one line per
/// resource: start, end, flags); `None` for an unassigned BAR.
pub fn bar_size(resource: &str, index: usize) -> Option<u64> {
    let line = resource.lines().nth(index)?;
    let mut f = line.split_whitespace().map(parse_int);
    let (start, end) = (f.next()??, f.next()??);
    (end > start || (end == start && start != 0)).then(|| end - start + 1)
}

/// The size of an NVIDIA GPU's BAR1 (the framebuffer aperture peers reach) from its sysfs
/// `resource` file: the second assigned BAR of the six, in order. BAR 0 (the registers) comes
/// first; where it is 32-bit, BAR1 is at index 1, and where it is 64-bit it takes indexes 0
/// and 1 and BAR1 is at index 2 (an H200 passed through to a virtual machine, 2026-11-28).
pub fn nvidia_bar1_size(resource: &str) -> Option<u64> {
    (0..6).filter_map(|i| bar_size(resource, i)).nth(1)
}

/// `key value` lines (nvsim's debugfs stats, gdrpeer's debugfs params).
pub fn key_values(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// BAR1 use of each GPU from `nvidia-smi -q -d MEMORY`: (bus id as sysfs writes it,
/// total bytes, used bytes).
pub fn nvidia_smi_bar1(text: &str) -> Vec<(String, u64, u64)> {
    let mut out = Vec::new();
    let mut gpu: Option<String> = None;
    let mut in_bar1 = false;
    let (mut total, mut used) = (None, None);
    for line in text.lines() {
        let t = line.trim();
        if let Some(id) = t.strip_prefix("GPU ") {
            gpu = Some(sysfs_bus_id(id.trim()));
            in_bar1 = false;
            continue;
        }
        if t.starts_with("BAR1 Memory Usage") {
            in_bar1 = true;
            (total, used) = (None, None);
            continue;
        }
        if in_bar1 {
            let Some((k, v)) = t.split_once(':') else {
                in_bar1 = false;
                continue;
            };
            let mib = v.trim().trim_end_matches("MiB").trim().parse::<u64>().ok();
            match k.trim() {
                "Total" => total = mib,
                "Used" => used = mib,
                _ => {}
            }
            if let (Some(g), Some(tt), Some(u)) = (&gpu, total, used) {
                out.push((g.clone(), tt << 20, u << 20));
                in_bar1 = false;
            }
        }
    }
    out
}

/// nvidia-smi's bus id (00000000:3B:00.0) as sysfs names the function (0000:3b:00.0).
pub fn sysfs_bus_id(id: &str) -> String {
    let id = id.to_ascii_lowercase();
    match id.split_once(':') {
        Some((dom, rest)) if dom.len() == 8 => format!("{}:{rest}", &dom[4..]),
        _ => id,
    }
}

/// Whether `s` is a PCI function's name: DDDD:BB:DD.F.
pub fn is_pci_address(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && s.chars()
            .enumerate()
            .all(|(i, c)| [4, 7, 10].contains(&i) || c.is_ascii_hexdigit())
}

/// A PCI function's place in the hierarchy, from its sysfs path
/// (/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/...): its host bridge (pci0000:00)
/// and the functions from the root port down to itself.
pub fn pci_chain(path: &str) -> Option<(String, Vec<String>)> {
    let mut comps = path.split('/').filter(|c| !c.is_empty());
    let host = comps.find(|c| c.starts_with("pci") && c.len() > 3)?;
    let chain: Vec<String> = comps
        .take_while(|c| is_pci_address(c))
        .map(String::from)
        .collect();
    (!chain.is_empty()).then(|| (host.to_string(), chain))
}

/// What lies between a GPU and a peer device, in the terms of NVIDIA's GPUDirect RDMA
/// guide ("Supported Systems") and `nvidia-smi topo -m`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PciLink {
    /// Only PCIe switches on the path (PIX/PXB): the best case.
    Switch,
    /// Both below one root port, no switch between them.
    RootPort,
    /// Through the host bridge, one CPU/IOH (PHB): works, peer reads may be slow.
    HostBridge,
    /// Between host bridges of one NUMA node (NODE): may work, may be slow or fail.
    AcrossHostBridges,
    /// Across the CPU interconnect, QPI/UPI/HT (SYS): not supported.
    AcrossSockets,
}

impl PciLink {
    pub fn describe(self) -> &'static str {
        match self {
            Self::Switch => "through PCIe switches only (PIX/PXB)",
            Self::RootPort => "below one root port, without a switch",
            Self::HostBridge => "through the host bridge, one CPU (PHB)",
            Self::AcrossHostBridges => "between host bridges of one CPU socket (NODE)",
            Self::AcrossSockets => "across CPU sockets (SYS)",
        }
    }
}

/// The link between two functions given their sysfs paths and CPU sockets (-1: unknown;
/// a NUMA node where the socket is not known).
pub fn pci_link(a: &str, a_node: i32, b: &str, b_node: i32) -> Option<PciLink> {
    let (ha, ca) = pci_chain(a)?;
    let (hb, cb) = pci_chain(b)?;
    if ha != hb {
        return Some(if a_node >= 0 && b_node >= 0 && a_node != b_node {
            PciLink::AcrossSockets
        } else {
            PciLink::AcrossHostBridges
        });
    }
    // Their common ancestors: the bridges both sit under.
    let common = ca[..ca.len() - 1]
        .iter()
        .zip(&cb[..cb.len() - 1])
        .take_while(|(x, y)| x == y)
        .count();
    Some(match common {
        0 => PciLink::HostBridge,
        1 => PciLink::RootPort,
        _ => PciLink::Switch,
    })
}

/// How the IOMMU handles a device's DMA.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum IommuMode {
    /// No IOMMU (or disabled): DMA address = bus address.
    Off,
    /// An identity domain: DMA address = bus address.
    Passthrough,
    /// DMA domains: DMA addresses are IOVAs. `strict`: an unmapped IOVA is unusable at
    /// once (DMA); lazy (DMA-FQ): until the flush queue is flushed; None: not known.
    Translated { strict: Option<bool> },
    /// The device belongs to another user (vfio: unmanaged, blocked).
    Other,
}

/// A kernel command line's IOMMU words: (enabled, passthrough, strict), each if said.
pub fn iommu_cmdline(cmdline: &str) -> (Option<bool>, Option<bool>, Option<bool>) {
    let (mut on, mut pt, mut strict) = (None, None, None);
    let flag = |v: &str| match v {
        "1" | "on" | "y" | "Y" => Some(true),
        "0" | "off" | "n" | "N" => Some(false),
        _ => None,
    };
    for w in cmdline.split_whitespace() {
        let (k, v) = w.split_once('=').unwrap_or((w, ""));
        match k {
            "iommu.passthrough" => pt = flag(v).or(pt),
            "iommu.strict" => strict = flag(v).or(strict),
            "intel_iommu" | "amd_iommu" => {
                for o in v.split(',') {
                    match o {
                        "on" => on = Some(true),
                        "off" => on = Some(false),
                        "strict" => strict = Some(true),
                        _ => {}
                    }
                }
            }
            "iommu" => match v {
                "pt" => pt = Some(true),
                "nopt" => pt = Some(false),
                "off" => on = Some(false),
                "force" | "on" => on = Some(true),
                _ => {}
            },
            _ => {}
        }
    }
    (on, pt, strict)
}

/// The mode of an IOMMU group's default domain (`/sys/kernel/iommu_groups/N/type`).
pub fn iommu_group_mode(domain: &str) -> IommuMode {
    match domain.trim() {
        "identity" => IommuMode::Passthrough,
        "DMA" => IommuMode::Translated { strict: Some(true) },
        "DMA-FQ" => IommuMode::Translated {
            strict: Some(false),
        },
        _ => IommuMode::Other,
    }
}

/// The mode when no device of interest has a group: from the IOMMU units present and the
/// command line.
pub fn iommu_mode_without_groups(units: usize, groups: usize, cmdline: &str) -> IommuMode {
    let (on, pt, strict) = iommu_cmdline(cmdline);
    if (units == 0 && groups == 0) || on == Some(false) {
        IommuMode::Off
    } else if pt == Some(true) {
        IommuMode::Passthrough
    } else if units == 0 {
        // Groups without a translating unit (virtio-iommu aside): nothing translates.
        IommuMode::Off
    } else {
        IommuMode::Translated { strict }
    }
}

/// The key id modinfo gives a module's signature (`sig_key`, "AB:CD:...") as the
/// kernel's key descriptions write it (lower-case hex, no colons).
pub fn key_id_hex(sig_key: &str) -> String {
    sig_key
        .chars()
        .filter(|c| c.is_ascii_hexdigit())
        .collect::<String>()
        .to_ascii_lowercase()
}

/// Whether a key list (`/proc/keys`, or `mokutil --list-enrolled`) names the key that
/// signed a module: by its key id (a description "Signer: <hex id>" ends in it) or,
/// weaker, by the signer's name. Returns how it matched.
pub fn key_enrolled(keys: &str, signer: &str, sig_key: &str) -> Option<&'static str> {
    let id = key_id_hex(sig_key);
    let compact = |l: &str| key_id_hex(l);
    if id.len() >= 8 && keys.lines().any(|l| compact(l).contains(&id)) {
        return Some("key id");
    }
    if !signer.is_empty()
        && keys
            .lines()
            .any(|l| l.contains(&format!("{signer}:")) || l.contains(&format!("CN={signer}")))
    {
        return Some("signer name");
    }
    None
}

/// The module-signature marker that ends a signed module (`MODULE_SIG_STRING`).
pub const MODULE_SIG_MAGIC: &[u8] = b"~Module signature appended~\n";

/// The state a SecureBoot EFI variable holds (4 bytes of attributes, then the value).
pub fn efi_secure_boot(var: &[u8]) -> Option<bool> {
    var.get(4).map(|&b| b == 1)
}

/// `mokutil --sb-state`: "SecureBoot enabled" / "SecureBoot disabled".
pub fn mokutil_sb_state(text: &str) -> Option<bool> {
    let t = text.to_ascii_lowercase();
    if t.contains("secureboot enabled") {
        Some(true)
    } else if t.contains("secureboot disabled") || t.contains("not supported") {
        Some(false)
    } else {
        None
    }
}

/// A user's or group's name from /etc/passwd or /etc/group by its number.
pub fn name_of_id(db: &str, id: u32) -> Option<String> {
    db.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() > 2 && f[2].parse() == Ok(id)).then(|| f[0].to_string())
    })
}
