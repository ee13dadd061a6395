// SPDX-License-Identifier: GPL-2.0

//! `doctor`'s parsers and rules on text, and its checks on fake machines (a tree standing
//! for `/`).

use super::parse::*;
use super::*;
use std::{
    os::unix::fs::symlink,
    path::{Path, PathBuf},
    sync::atomic::{AtomicU32, Ordering},
};

#[test]
fn config_values() {
    let c =
        "CONFIG_RUST=y\n# CONFIG_KASAN is not set\nCONFIG_RUSTC_VERSION_TEXT=\"rustc 1.85.1\"\n";
    assert_eq!(config_value(c, "RUST"), Some("y"));
    assert_eq!(config_value(c, "KASAN"), Some("n"));
    assert_eq!(config_value(c, "RUSTC_VERSION_TEXT"), Some("rustc 1.85.1"));
    assert_eq!(config_value(c, "RUS"), None);
    assert_eq!(config_value(c, "MODVERSIONS"), None);
}

#[test]
fn metadata_list_is_prepare_kdirs() {
    // scripts/prepare-kdir's RMETA, and target.json on x86_64.
    let script = include_str!("../../../../scripts/prepare-kdir");
    let rmeta = script
        .lines()
        .find_map(|l| l.strip_prefix("RMETA=\""))
        .and_then(|l| l.strip_suffix('"'))
        .expect("prepare-kdir's RMETA");
    let files = rust_metadata_files(true);
    assert_eq!(files.len(), rmeta.split(' ').count() + 1);
    for c in rmeta.split(' ') {
        let want = if c == "macros" {
            "rust/libmacros.so".to_string()
        } else {
            format!("rust/lib{c}.rmeta")
        };
        assert!(files.contains(&want), "{want}");
    }
    assert!(files.contains(&"scripts/target.json".to_string()));
    assert!(!rust_metadata_files(false).contains(&"scripts/target.json".to_string()));
}

#[test]
fn license_and_taint_give_the_flavour() {
    assert_eq!(flavour_of_license("Dual MIT/GPL"), Flavour::Open);
    assert_eq!(flavour_of_license("GPL"), Flavour::Open);
    assert_eq!(flavour_of_license("NVIDIA"), Flavour::Proprietary);
    assert_eq!(flavour_of_license("Proprietary"), Flavour::Proprietary);
    assert_eq!(flavour_of_taint("OE"), Flavour::Open);
    assert_eq!(flavour_of_taint(""), Flavour::Open);
    assert_eq!(flavour_of_taint("POE"), Flavour::Proprietary);
    // The loaded module is what counts; the file says what the next load brings.
    assert_eq!(loaded_flavour(None, "OE"), (Flavour::Open, None));
    assert_eq!(
        loaded_flavour(Some("Dual MIT/GPL"), "OE"),
        (Flavour::Open, None)
    );
    assert_eq!(
        loaded_flavour(Some("Dual MIT/GPL"), "POE"),
        (Flavour::Proprietary, Some(Flavour::Open))
    );
    assert_eq!(
        loaded_flavour(Some("NVIDIA"), "OE"),
        (Flavour::Open, Some(Flavour::Proprietary))
    );
}

#[test]
fn kallsyms_exporters() {
    let k = "0000000000000000 T nvidia_p2p_get_pages\t[nvsim]\n\
             0000000000000000 T nvidia_p2p_put_pages\t[nvsim]\n\
             0000000000000000 t nvidia_p2p_helper\n\
             0000000000000000 T gdrpeer_mr_pin\t[gdrpeer]\n";
    assert_eq!(
        nv_p2p_exports(k),
        vec![
            ("nvidia_p2p_get_pages".to_string(), "nvsim".to_string()),
            ("nvidia_p2p_put_pages".to_string(), "nvsim".to_string()),
        ]
    );
    assert_eq!(nv_version(0x0002_0000), "2.0");
    assert_eq!(nv_version(0x0001_0002), "1.2");
}

/// The sysfs `resource` file of an H200 passed through to a Firecracker guest (2026-11-28):
/// every BAR 64-bit, so BAR1 (256 GiB; nvidia-smi's BAR1 total) is the resource at index 2.
const H200_RESOURCE: &str = "0x0000104002000000 0x0000104002ffffff 0x000000000014220c\n\
    0x0000000000000000 0x0000000000000000 0x0000000000000000\n\
    0x0000100000000000 0x0000103fffffffff 0x000000000014220c\n\
    0x0000000000000000 0x0000000000000000 0x0000000000000000\n\
    0x0000104000000000 0x0000104001ffffff 0x000000000014220c\n\
    0x0000000000000000 0x0000000000000000 0x0000000000000000\n\
    0x0000000000000000 0x0000000000000000 0x0000000000000000\n";

#[test]
fn bar_sizes() {
    let r = "0x00000000fa000000 0x00000000faffffff 0x0000000000040200\n\
             0x0000038000000000 0x00000387ffffffff 0x000000000014220c\n\
             0x0000000000000000 0x0000000000000000 0x0000000000000000\n";
    assert_eq!(bar_size(r, 0), Some(16 << 20));
    assert_eq!(bar_size(r, 1), Some(32 << 30));
    assert_eq!(bar_size(r, 2), None);
    assert_eq!(bar_size(r, 7), None);
    assert_eq!(nvidia_bar1_size(r), Some(32 << 30));
    assert_eq!(nvidia_bar1_size(H200_RESOURCE), Some(256 << 30));
    assert_eq!(nvidia_bar1_size("0x1000 0x1fff 0x40200\n"), None);
}

#[test]
fn nvidia_smi_bar1_use() {
    let t = "==============NVSMI LOG==============\n\
             Attached GPUs : 1\n\
             GPU 00000000:3B:00.0\n    FB Memory Usage\n        Total : 81559 MiB\n        Used : 0 MiB\n\
             \x20   BAR1 Memory Usage\n        Total : 131072 MiB\n        Used : 3 MiB\n        Free : 131069 MiB\n\
             \x20   Conf Compute Protected Memory Usage\n        Total : 0 MiB\n";
    assert_eq!(
        nvidia_smi_bar1(t),
        vec![("0000:3b:00.0".to_string(), 131072 << 20, 3 << 20)]
    );
    assert_eq!(sysfs_bus_id("00000000:3B:00.0"), "0000:3b:00.0");
}

const GPU: &str = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0";

#[test]
fn topology_rule() {
    let same_switch = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:04:00.0";
    let same_port = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.1";
    let other_port = "/sys/devices/pci0000:00/0000:00:02.0/0000:05:00.0";
    let root_bus = "/sys/devices/pci0000:00/0000:00:04.0";
    let other_bridge = "/sys/devices/pci0000:40/0000:40:01.0/0000:41:00.0";
    assert_eq!(pci_link(GPU, 0, same_switch, 0), Some(PciLink::Switch));
    assert_eq!(
        pci_link(
            "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0",
            0,
            same_port,
            0
        ),
        Some(PciLink::RootPort)
    );
    assert_eq!(pci_link(GPU, 0, other_port, 0), Some(PciLink::HostBridge));
    // QEMU's pc machine: both on the root bus.
    assert_eq!(
        pci_link("/sys/devices/pci0000:00/0000:00:03.0", -1, root_bus, -1),
        Some(PciLink::HostBridge)
    );
    assert_eq!(
        pci_link(GPU, 0, other_bridge, 0),
        Some(PciLink::AcrossHostBridges)
    );
    assert_eq!(
        pci_link(GPU, -1, other_bridge, 1),
        Some(PciLink::AcrossHostBridges)
    );
    assert_eq!(
        pci_link(GPU, 0, other_bridge, 1),
        Some(PciLink::AcrossSockets)
    );
    assert_eq!(pci_link(GPU, 0, "/sys/devices/platform/foo", 0), None);
    assert_eq!(
        pci_chain(GPU),
        Some((
            "pci0000:00".into(),
            vec![
                "0000:00:01.0".into(),
                "0000:01:00.0".into(),
                "0000:02:00.0".into(),
                "0000:03:00.0".into()
            ]
        ))
    );
    assert!(is_pci_address("0000:3b:00.0"));
    assert!(!is_pci_address("pci0000:00"));
    assert!(!is_pci_address("0000:3b:00.g"));
}

#[test]
fn iommu_modes() {
    assert_eq!(iommu_group_mode("identity"), IommuMode::Passthrough);
    assert_eq!(
        iommu_group_mode("DMA"),
        IommuMode::Translated { strict: Some(true) }
    );
    assert_eq!(
        iommu_group_mode("DMA-FQ\n"),
        IommuMode::Translated {
            strict: Some(false)
        }
    );
    assert_eq!(iommu_group_mode("unmanaged"), IommuMode::Other);
    assert_eq!(iommu_mode_without_groups(0, 0, "quiet"), IommuMode::Off);
    assert_eq!(
        iommu_mode_without_groups(1, 9, "intel_iommu=off"),
        IommuMode::Off
    );
    assert_eq!(
        iommu_mode_without_groups(1, 9, "iommu=pt"),
        IommuMode::Passthrough
    );
    assert_eq!(
        iommu_mode_without_groups(1, 9, "iommu.passthrough=1"),
        IommuMode::Passthrough
    );
    assert_eq!(
        iommu_mode_without_groups(1, 9, "intel_iommu=on iommu.strict=1 iommu.passthrough=0"),
        IommuMode::Translated { strict: Some(true) }
    );
    assert_eq!(
        iommu_mode_without_groups(1, 9, "iommu.strict=0"),
        IommuMode::Translated {
            strict: Some(false)
        }
    );
    assert_eq!(
        iommu_mode_without_groups(1, 9, ""),
        IommuMode::Translated { strict: None }
    );
    assert_eq!(
        iommu_cmdline("intel_iommu=on,strict"),
        (Some(true), None, Some(true))
    );
}

#[test]
fn keys_and_secure_boot() {
    let keys = "1a2b3c4d I------     1 perm 1f030000     0     0 asymmetri DKMS module signing key: 5c0f39a1b2c3d4e5f60718293a4b5c6d7e8f9012: X509.rsa 7e8f9012 []\n";
    assert_eq!(
        key_enrolled(
            keys,
            "DKMS module signing key",
            "5C:0F:39:A1:B2:C3:D4:E5:F6:07:18:29:3A:4B:5C:6D:7E:8F:90:12"
        ),
        Some("key id")
    );
    assert_eq!(
        key_enrolled(keys, "DKMS module signing key", "01:02:03:04:05"),
        Some("signer name")
    );
    assert_eq!(key_enrolled(keys, "Other key", "01:02:03:04:05"), None);
    // A name alone proves nothing where signatures are enforced.
    assert!(name_match_unproven("signer name", true));
    assert!(!name_match_unproven("signer name", false));
    assert!(!name_match_unproven("key id", true));
    let mok = "[key 1]\nSHA1 Fingerprint: aa:bb\n        Subject: CN=DKMS module signing key\n";
    assert_eq!(
        key_enrolled(mok, "DKMS module signing key", ""),
        Some("signer name")
    );
    assert_eq!(efi_secure_boot(&[6, 0, 0, 0, 1]), Some(true));
    assert_eq!(efi_secure_boot(&[6, 0, 0, 0, 0]), Some(false));
    assert_eq!(efi_secure_boot(&[6, 0]), None);
    assert_eq!(mokutil_sb_state("SecureBoot enabled"), Some(true));
    assert_eq!(mokutil_sb_state("SecureBoot disabled"), Some(false));
    assert_eq!(
        mokutil_sb_state("EFI variables are not supported on this system"),
        Some(false)
    );
    assert_eq!(
        name_of_id("root:x:0:\ngdrpeer:x:998:alice\n", 998),
        Some("gdrpeer".into())
    );
    assert_eq!(name_of_id("root:x:0:\n", 5), None);
}

/// A directory standing for `/`, removed when dropped.
struct Tree(PathBuf);

impl Tree {
    fn new() -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "gdrpeer-doctor-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).unwrap();
        Tree(p)
    }
    fn host(&self, path: &str) -> PathBuf {
        self.0.join(path.trim_start_matches('/'))
    }
    fn file(&self, path: &str, text: &str) -> &Self {
        let p = self.host(path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
        self
    }
    fn dir(&self, path: &str) -> &Self {
        fs::create_dir_all(self.host(path)).unwrap();
        self
    }
    fn link(&self, path: &str, target: &str) -> &Self {
        let p = self.host(path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        symlink(target, p).unwrap();
        self
    }
    fn remove(&self, path: &str) -> &Self {
        let p = self.host(path);
        if p.is_dir() && !p.is_symlink() {
            fs::remove_dir_all(p).unwrap();
        } else {
            fs::remove_file(p).unwrap();
        }
        self
    }
    /// A PCI function at sysfs path `dev` (under /sys/devices), with its bus link.
    fn pci(&self, dev: &str, vendor: u32, class: u32, driver: Option<&str>, numa: i32) -> &Self {
        let addr = Path::new(dev).file_name().unwrap().to_str().unwrap();
        self.file(&format!("{dev}/vendor"), &format!("0x{vendor:04x}\n"))
            .file(&format!("{dev}/class"), &format!("0x{class:06x}\n"))
            .file(&format!("{dev}/numa_node"), &format!("{numa}\n"))
            .link(
                &format!("/sys/bus/pci/devices/{addr}"),
                &format!("../../..{}", dev.strip_prefix("/sys").unwrap()),
            );
        if let Some(d) = driver {
            self.dir(&format!("/sys/bus/pci/drivers/{d}")).link(
                &format!("{dev}/driver"),
                &format!("/sys/bus/pci/drivers/{d}"),
            );
        }
        self
    }
    fn sys(&self) -> Sys {
        Sys::at(&self.0)
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn find<'a>(f: &'a [Finding], check: &str) -> &'a Finding {
    f.iter()
        .find(|x| x.check == check)
        .unwrap_or_else(|| panic!("no check {check} in {}", to_text(f)))
}

const REL: &str = "7.3.4+deb13-amd64";

/// A two-socket GPU server: an open 550 driver, a GPU and an InfiniBand HCA under one
/// switch, a RoCE NIC on the other socket, translated lazy IOMMU, gdrpeer installed by
/// DKMS and loaded, Secure Boot off.
fn server() -> Tree {
    let t = Tree::new();
    let hca = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:04:00.0";
    let roce = "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0";
    t.file("/proc/sys/kernel/osrelease", &format!("{REL}\n"))
        .file(&format!("/boot/config-{REL}"), "CONFIG_RUST=y\nCONFIG_X86_64=y\n")
        .link(&format!("/lib/modules/{REL}/build"), &format!("/usr/src/linux-headers-{REL}"))
        .file(&format!("/usr/src/linux-headers-{REL}/.config"), "CONFIG_RUST=y\nCONFIG_X86_64=y\n")
        .file(&format!("/lib/modules/{REL}/updates/dkms/gdrpeer.ko"), "\x7fELF...~Module signature appended~\n")
        .file("/usr/src/gdrpeer-0.1.0/scripts/prepare-kdir", "#!/bin/sh\n")
        .file("/proc/cmdline", "BOOT_IMAGE=/vmlinuz quiet\n")
        .file(
            "/proc/kallsyms",
            "0000000000000000 T nvidia_p2p_get_pages\t[nvidia]\n0000000000000000 T nvidia_p2p_put_pages\t[nvidia]\n",
        )
        .file("/sys/module/nvidia/version", "550.163.01\n")
        .file("/sys/module/nvidia/taint", "OE\n")
        .file("/sys/module/gdrpeer/taint", "OE\n")
        .file("/sys/kernel/debug/gdrpeer/params", "max_pin_bytes 274877906944\ngdrdrv 1\n")
        .pci(GPU, 0x10de, 0x030200, Some("nvidia"), 0)
        .file(
            &format!("{GPU}/resource"),
            "0x00000000fa000000 0x00000000faffffff 0x40200\n0x0000038000000000 0x00000387ffffffff 0x14220c\n",
        )
        .file(
            "/proc/driver/nvidia/gpus/0000:03:00.0/information",
            "Model: \t\t NVIDIA H100 PCIe\nIRQ:   \t\t 42\n",
        )
        .pci(hca, 0x15b3, 0x020700, Some("mlx5_core"), 0)
        .pci(roce, 0x15b3, 0x020000, Some("mlx5_core"), 1)
        .dir(&format!("{roce}/infiniband/mlx5_1"))
        .pci("/sys/devices/pci0000:00/0000:00:1f.0", 0x8086, 0x060100, None, 0)
        .dir("/sys/class/iommu/dmar0");
    for (g, dev) in [(3, GPU), (4, hca), (5, roce)] {
        t.file(&format!("/sys/kernel/iommu_groups/{g}/type"), "DMA-FQ\n")
            .link(
                &format!("{dev}/iommu_group"),
                &format!("/sys/kernel/iommu_groups/{g}"),
            );
    }
    // Device nodes as udev leaves them (regular files here: a tree has no device nodes).
    let uid = rustix::process::geteuid().as_raw();
    let gid = rustix::process::getegid().as_raw();
    t.file("/dev/gdrpeer", "")
        .file("/dev/gdrdrv", "")
        .file("/etc/group", &format!("root:x:0:\ngdrpeer:x:{gid}:alice\n"));
    t.file(
        "/etc/passwd",
        &format!("root:x:0:0::/root:/bin/sh\nalice:x:{uid}:{gid}::/home/alice:/bin/sh\n"),
    );
    t
}

#[test]
fn a_server_with_a_proprietary_driver_is_refused() {
    let t = server();
    t.file("/sys/module/nvidia/taint", "POE\n");
    let f = run(&t.sys());
    let nv = find(&f, "nvidia");
    assert_eq!(nv.status, Status::Fail, "{}", to_text(&f));
    assert!(nv.summary.contains("proprietary flavour"));
    assert!(nv.fix.as_ref().unwrap().contains("open kernel modules"));
    assert_eq!(exit_status(&f), EXIT_BLOCKED);
}

#[test]
fn a_server() {
    let t = server();
    let f = run(&t.sys());
    let text = to_text(&f);
    assert_eq!(find(&f, "kernel-rust").status, Status::Ok, "{text}");
    // No Rust metadata in the headers, but gdrpeer is installed: the next build fails.
    let h = find(&f, "kernel-headers");
    assert_eq!(h.status, Status::Warn, "{text}");
    assert!(h.summary.contains("rust/libcore.rmeta"), "{text}");
    assert!(
        h.fix.as_ref().unwrap().contains(
            "sudo /usr/src/gdrpeer-0.1.0/scripts/prepare-kdir --install --in-place /lib/modules/"
        ),
        "{text}"
    );
    let nv = find(&f, "nvidia");
    assert_eq!(nv.status, Status::Ok, "{text}");
    assert!(
        nv.summary.starts_with("nvidia 550.163.01, open flavour"),
        "{text}"
    );
    assert!(nv.summary.contains("nv-p2p: 2 functions"), "{text}");
    let g = find(&f, "gdrpeer");
    assert_eq!(g.status, Status::Ok, "{text}");
    assert!(
        g.summary.contains("max_pin_bytes=274877906944 gdrdrv=1"),
        "{text}"
    );
    let d = find(&f, "device /dev/gdrpeer");
    assert_eq!(d.status, Status::Ok, "{text}");
    // The group's name from the tree's /etc/group (gdrpeer, or root when run as root).
    let gid = rustix::process::getegid().as_raw();
    let want = if gid == 0 { "root" } else { "gdrpeer" };
    assert_eq!(d.facts["group"], want, "{text}");
    assert!(d.summary.contains(&format!(":{want} mode 0")), "{text}");
    assert!(d.summary.ends_with(", openable by this user"), "{text}");
    let i = find(&f, "iommu");
    assert_eq!(i.status, Status::Warn, "{text}");
    assert!(i.summary.starts_with("translated, lazy"), "{text}");
    assert!(i.fix.as_ref().unwrap().contains("iommu.strict=1"), "{text}");
    let b = find(&f, "bar1 0000:03:00.0");
    assert_eq!(b.status, Status::Ok, "{text}");
    assert!(
        b.summary
            .contains("NVIDIA H100 PCIe: BAR1 32768 MiB, use unknown"),
        "{text}"
    );
    let p = find(&f, "pcie-path 0000:03:00.0 0000:04:00.0");
    assert_eq!(p.status, Status::Ok, "{text}");
    assert!(p.summary.contains("InfiniBand controller"), "{text}");
    assert!(p.summary.contains("PCIe switches only"), "{text}");
    // The NIC across sockets: the GPU has a better one, so a pair to leave unused.
    let p = find(&f, "pcie-path 0000:03:00.0 0000:81:00.0");
    assert_eq!(p.status, Status::Warn, "{text}");
    assert!(p.summary.contains("RoCE"), "{text}");
    assert!(p.summary.contains("across CPU sockets"), "{text}");
    assert_eq!(
        p.fix.as_deref(),
        Some("do not pair them: use 0000:04:00.0 for this GPU (through PCIe switches only (PIX/PXB))"),
        "{text}"
    );
    assert!(
        !f.iter().any(|x| x.check.contains("0000:00:1f.0")),
        "{text}"
    );
    assert_eq!(find(&f, "secure-boot").status, Status::Ok);
    let s = find(&f, "module-signature");
    assert_eq!(s.facts.get("signed"), Some(&Value::Bool(true)), "{text}");
    // No FAIL: each GPU has a NIC it can use.
    assert_eq!(
        f.iter().filter(|x| x.status == Status::Fail).count(),
        0,
        "{text}"
    );
    assert_eq!(exit_status(&f), EXIT_OK);
    // The JSON says the same.
    let j: Value = serde_json::from_str(&to_json(&f).to_string()).unwrap();
    assert_eq!(j["exit_status"], 0);
    assert_eq!(j["status"], "warn");
    assert_eq!(j["checks"].as_array().unwrap().len(), f.len());
    assert_eq!(j["checks"][6]["check"], "iommu");
    assert_eq!(
        j["checks"][6]["facts"]["mode"]["translated"]["strict"],
        false
    );

    // The GPU's own NIC gone: the one across sockets is all it has, which blocks.
    t.remove("/sys/bus/pci/devices/0000:04:00.0");
    let f = run(&t.sys());
    let p = find(&f, "pcie-path 0000:03:00.0 0000:81:00.0");
    assert_eq!(p.status, Status::Fail, "{}", to_text(&f));
    assert_eq!(
        p.fix.as_deref(),
        Some("use a NIC on the GPU's CPU socket, ideally under the GPU's PCIe switch")
    );
    assert_eq!(exit_status(&f), EXIT_BLOCKED, "{}", to_text(&f));

    // The far NIC gone too, and the headers prepared: nothing blocks.
    t.remove("/sys/bus/pci/devices/0000:81:00.0");
    for m in rust_metadata_files(true) {
        t.file(&format!("/usr/src/linux-headers-{REL}/{m}"), "");
    }
    let f = run(&t.sys());
    assert_eq!(
        find(&f, "kernel-headers").status,
        Status::Ok,
        "{}",
        to_text(&f)
    );
    assert_eq!(exit_status(&f), EXIT_OK, "{}", to_text(&f));
}

/// Sub-NUMA clustering: two NUMA nodes of one CPU package. The NIC on the other host
/// bridge is on the other node but the same socket: NODE, a warning, not SYS.
#[test]
fn numa_nodes_of_one_socket_are_not_sockets() {
    let t = server();
    t.remove("/sys/bus/pci/devices/0000:04:00.0");
    let packages = |t: &Tree, second: &str| {
        t.file("/sys/devices/system/node/node0/cpulist", "0-15,64-79\n")
            .file("/sys/devices/system/node/node1/cpulist", "16-31\n")
            .file(
                "/sys/devices/system/cpu/cpu0/topology/physical_package_id",
                "0\n",
            )
            .file(
                "/sys/devices/system/cpu/cpu16/topology/physical_package_id",
                &format!("{second}\n"),
            );
    };
    packages(&t, "0");
    let f = run(&t.sys());
    let p = find(&f, "pcie-path 0000:03:00.0 0000:81:00.0");
    assert_eq!(p.status, Status::Warn, "{}", to_text(&f));
    assert!(
        p.summary.contains("between host bridges of one CPU socket"),
        "{}",
        to_text(&f)
    );
    // Two packages: across sockets after all.
    packages(&t, "1");
    let f = run(&t.sys());
    let p = find(&f, "pcie-path 0000:03:00.0 0000:81:00.0");
    assert_eq!(p.status, Status::Fail, "{}", to_text(&f));
}

/// Why /dev/gdrpeer did not open decides what the `gdrpeer` check says of the ABI.
#[test]
fn an_unread_abi_is_not_ok() {
    use gdrpeer::{Error, Op};
    assert_eq!(abi_status(None).0, Status::Ok);
    // Another ioctl size (another ABI), or another driver's node.
    assert_eq!(
        abi_status(Some(&Error::from_errno(Op::GetVersion, libc::ENOTTY))).0,
        Status::Fail
    );
    // Not known: a warning, with how to learn it.
    let (s, fix) = abi_status(Some(&Error::from_errno(Op::GetVersion, libc::EACCES)));
    assert_eq!(s, Status::Warn);
    assert!(fix.unwrap().contains("as root"));
}

/// A GPU that nvidia does not drive: no driver (an open module refuses a pre-Turing GPU),
/// or vfio-pci (passed to a virtual machine).
#[test]
fn a_gpu_not_bound_to_nvidia() {
    let t = server();
    t.remove(&format!("{GPU}/driver"));
    let f = run(&t.sys());
    let b = find(&f, "bar1 0000:03:00.0");
    assert_eq!(b.status, Status::Fail, "{}", to_text(&f));
    assert!(b.summary.contains("bound to no driver"), "{}", to_text(&f));
    assert_eq!(exit_status(&f), EXIT_BLOCKED);
    // Bound to vfio-pci, beside a second GPU that nvidia drives: a GPU set aside.
    t.dir("/sys/bus/pci/drivers/vfio-pci")
        .link(&format!("{GPU}/driver"), "/sys/bus/pci/drivers/vfio-pci")
        .pci(
            "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:10.0/0000:05:00.0",
            0x10de,
            0x030200,
            Some("nvidia"),
            0,
        );
    let f = run(&t.sys());
    let b = find(&f, "bar1 0000:03:00.0");
    assert_eq!(b.status, Status::Warn, "{}", to_text(&f));
    assert!(b.summary.contains("bound to vfio-pci"), "{}", to_text(&f));
    assert!(b.fix.as_ref().unwrap().contains("unbind it from vfio-pci"));
    assert_eq!(
        find(&f, "bar1 0000:05:00.0").status,
        Status::Ok,
        "{}",
        to_text(&f)
    );
}

/// A GPU whose BAR 0 is 64-bit, as an H200 passed through to a virtual machine showed it
/// (2026-11-28): BAR1 is the resource at index 2, where index 1 is empty.
#[test]
fn a_gpu_with_a_64_bit_bar_0() {
    let t = server();
    t.file(&format!("{GPU}/resource"), H200_RESOURCE);
    let f = run(&t.sys());
    let b = find(&f, "bar1 0000:03:00.0");
    assert!(b.summary.contains(": BAR1 262144 MiB, "), "{}", to_text(&f));
}

#[test]
fn headers_without_rust_metadata_and_no_gdrpeer_block() {
    let t = server();
    t.remove("/sys/module/gdrpeer")
        .remove(&format!("/lib/modules/{REL}/updates/dkms/gdrpeer.ko"));
    let f = run(&t.sys());
    let h = find(&f, "kernel-headers");
    assert_eq!(h.status, Status::Fail, "{}", to_text(&f));
    assert!(h.summary.contains("lacks the Rust metadata"));
    assert!(
        h.summary.contains(" ...)"),
        "more than four missing are cut: {}",
        h.summary
    );
    let g = find(&f, "gdrpeer");
    assert_eq!(g.status, Status::Fail);
    assert!(g.fix.as_ref().unwrap().contains("modprobe gdrpeer"));
    assert_eq!(exit_status(&f), EXIT_BLOCKED);
    // A kernel without Rust.
    t.file(&format!("/boot/config-{REL}"), "# CONFIG_RUST is not set\n");
    let f = run(&t.sys());
    assert_eq!(find(&f, "kernel-rust").status, Status::Fail);
}

/// The test rig's guest: nvsim on ivshmem and gdrnic on edu, both on QEMU's root bus,
/// no IOMMU, no EFI.
fn rig() -> Tree {
    let t = Tree::new();
    let gpu = "/sys/devices/pci0000:00/0000:00:04.0";
    let edu = "/sys/devices/pci0000:00/0000:00:05.0";
    t.file("/proc/sys/kernel/osrelease", "7.3.0-gdrpeer\n")
        .file("/proc/cmdline", "console=ttyS0 acpi=noirq\n")
        .file(
            "/proc/kallsyms",
            "0000000000000000 T nvidia_p2p_get_pages\t[nvsim]\n",
        )
        .file(
            "/sys/module/nvsim/parameters/page_table_version",
            "131072\n",
        )
        .file("/sys/module/nvsim/taint", "O\n")
        .file("/sys/module/gdrpeer/taint", "O\n")
        .pci(gpu, 0x1af4, 0x050000, Some("nvsim"), -1)
        .file(
            &format!("{gpu}/resource"),
            "0xfebf1000 0xfebf10ff 0x40200\n0x0 0x0 0x0\n0xfc000000 0xfdffffff 0x14220c\n",
        )
        .file(
            "/sys/kernel/debug/nvsim/stats",
            "bar1_used 31457280\nbar1_size 33554432\nbar1_reserve 0\n",
        )
        .pci(edu, 0x1234, 0x00ff00, Some("gdrnic"), -1)
        .file("/dev/gdrpeer", "");
    t
}

#[test]
fn the_rig() {
    let t = rig();
    let f = run(&t.sys());
    let text = to_text(&f);
    assert_eq!(find(&f, "kernel-rust").status, Status::Ok, "{text}");
    let nv = find(&f, "nvidia");
    assert_eq!(nv.status, Status::Warn, "{text}");
    assert!(
        nv.summary.contains("the simulator, standing in for nvidia"),
        "{text}"
    );
    assert!(nv.summary.contains("page tables 2.0"), "{text}");
    assert_eq!(
        find(&f, "iommu").summary,
        "off: DMA addresses are bus addresses"
    );
    let b = find(&f, "bar1 0000:00:04.0");
    assert!(
        b.summary
            .contains("BAR1 32 MiB, 30 MiB of 32 MiB in use (93%, nvsim's debugfs stats)"),
        "{text}"
    );
    assert_eq!(b.status, Status::Warn, "nearly full: {text}");
    let p = find(&f, "pcie-path 0000:00:04.0 0000:00:05.0");
    assert_eq!(p.status, Status::Warn, "{text}");
    assert!(p.summary.contains("gdrnic, the sample NIC"), "{text}");
    assert!(p.summary.contains("through the host bridge"), "{text}");
    let sb = find(&f, "secure-boot");
    assert!(sb.summary.contains("not booted by EFI"), "{text}");
    assert_eq!(sb.status, Status::Ok, "{text}");
    assert_eq!(find(&f, "device /dev/gdrdrv").status, Status::Warn);
    // Headers absent, but gdrpeer loaded: a warning only.
    assert_eq!(find(&f, "kernel-headers").status, Status::Warn, "{text}");
    assert_eq!(exit_status(&f), EXIT_OK, "{text}");
    // Page tables gdrpeer cannot read.
    t.file(
        "/sys/module/nvsim/parameters/page_table_version",
        "196608\n",
    );
    let f = run(&t.sys());
    assert_eq!(find(&f, "nvidia").status, Status::Fail, "{}", to_text(&f));
}

/// Module signatures forced without EFI, as a GPU machine's virtual machine had it
/// (2026-11-28): no key can be enrolled, so a module DKMS signs will not load.
#[test]
fn signatures_forced_without_efi() {
    let t = rig();
    t.file("/sys/module/module/parameters/sig_enforce", "Y\n");
    let f = run(&t.sys());
    let sb = find(&f, "secure-boot");
    assert_eq!(sb.status, Status::Warn, "{}", to_text(&f));
    assert!(sb
        .summary
        .contains("module.sig_enforce=Y: the kernel loads only modules signed"));
    assert!(sb.fix.as_ref().unwrap().contains("built into this kernel"));
    // With EFI there is a MOK list to enroll DKMS's key in: no warning here.
    t.dir("/sys/firmware/efi");
    t.file(EFI_SECURE_BOOT, "\x06\x00\x00\x00\x00");
    let f = run(&t.sys());
    assert_eq!(
        find(&f, "secure-boot").status,
        Status::Ok,
        "{}",
        to_text(&f)
    );
}

#[test]
fn resolve_follows_links_inside_the_root() {
    let t = Tree::new();
    t.dir("/usr/src/h/rust")
        .link("/lib/modules/r/build", "/usr/src/h")
        .link("/a/b", "../lib/modules/r/build/rust");
    let s = t.sys();
    assert_eq!(
        s.resolve("/lib/modules/r/build").as_deref(),
        Some("/usr/src/h")
    );
    assert_eq!(s.resolve("/a/b").as_deref(), Some("/usr/src/h/rust"));
    assert_eq!(s.resolve("/a/b/../x"), None);
    assert_eq!(
        s.resolve("/lib/modules/r/build/rust/..").as_deref(),
        Some("/usr/src/h")
    );
    t.link("/loop", "/loop");
    assert_eq!(s.resolve("/loop"), None);
}
