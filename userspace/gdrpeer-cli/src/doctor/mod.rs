// SPDX-License-Identifier: GPL-2.0

//! `gdrpeer doctor`: checks what GPUDirect RDMA with gdrpeer needs on this machine and
//! says, for each finding, what to do (Documentation/user/doctor.rst).

pub mod parse;
pub mod sys;
#[cfg(test)]
mod tests;

use parse::{Flavour, IommuMode, PciLink};
use serde::Serialize;
use serde_json::{json, Map, Value};
use std::{
    fs,
    os::unix::fs::{FileTypeExt, MetadataExt},
};
pub use sys::Sys;

/// How a finding stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    /// Works, or may, but not as well as it could; or not known.
    Warn,
    /// Stops GPUDirect RDMA with gdrpeer.
    Fail,
}

impl Status {
    pub fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        }
    }
}

/// One check's result.
#[derive(Debug, Serialize)]
pub struct Finding {
    /// The check (`kernel-rust`, `gdrpeer`, `bar1 0000:00:03.0`, ...).
    pub check: String,
    pub status: Status,
    /// What was found.
    pub summary: String,
    /// What to do about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    /// What was read, for scripts.
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub facts: Map<String, Value>,
}

impl Finding {
    fn new(check: impl Into<String>, status: Status, summary: impl Into<String>) -> Self {
        Self {
            check: check.into(),
            status,
            summary: summary.into(),
            fix: None,
            facts: Map::new(),
        }
    }
    fn fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }
    fn fact(mut self, k: &str, v: impl Into<Value>) -> Self {
        self.facts.insert(k.into(), v.into());
        self
    }
}

/// Exit status: no finding stops GPUDirect RDMA (warnings allowed).
pub const EXIT_OK: u8 = 0;
/// Exit status: at least one FAIL.
pub const EXIT_BLOCKED: u8 = 1;

/// The exit status for a set of findings.
pub fn exit_status(findings: &[Finding]) -> u8 {
    if findings.iter().any(|f| f.status == Status::Fail) {
        EXIT_BLOCKED
    } else {
        EXIT_OK
    }
}

/// The report as `--json` prints it.
pub fn to_json(findings: &[Finding]) -> Value {
    let worst = findings
        .iter()
        .map(|f| f.status)
        .max()
        .unwrap_or(Status::Ok);
    json!({
        "version": 1,
        "status": worst,
        "exit_status": exit_status(findings),
        "checks": findings,
    })
}

/// The report as people read it: one line a check, its fix after it.
pub fn to_text(findings: &[Finding]) -> String {
    let mut s = String::new();
    for f in findings {
        s += &format!("{:<5} {}: {}", f.status.label(), f.check, f.summary);
        if let Some(fix) = &f.fix {
            s += &format!(" -- fix: {fix}");
        }
        s.push('\n');
    }
    let n = |st| findings.iter().filter(|f| f.status == st).count();
    s += &format!(
        "doctor: {} ok, {} warn, {} FAIL{}\n",
        n(Status::Ok),
        n(Status::Warn),
        n(Status::Fail),
        if n(Status::Fail) > 0 {
            ": GPUDirect RDMA with gdrpeer cannot work until each FAIL is fixed"
        } else {
            ""
        }
    );
    s
}

/// Runs every check.
pub fn run(sys: &Sys) -> Vec<Finding> {
    let ctx = Context::read(sys);
    let mut v = vec![kernel_rust(&ctx), kernel_headers(&ctx), nvidia(&ctx)];
    v.push(gdrpeer(&ctx));
    v.push(device_node(&ctx, "/dev/gdrpeer"));
    v.push(device_node(&ctx, "/dev/gdrdrv"));
    v.push(iommu(&ctx));
    v.extend(bar1(&ctx));
    v.extend(topology(&ctx));
    v.push(secure_boot(&ctx));
    v.push(module_signature(&ctx));
    v
}

/// A PCI function.
struct Pci {
    addr: String,
    /// Its sysfs directory under /sys/devices.
    path: String,
    vendor: u64,
    class: u64,
    driver: Option<String>,
    numa: i32,
    /// The CPU package (socket) of its NUMA node's CPUs, where sysfs says.
    package: Option<i32>,
}

impl Pci {
    /// nvsim (the simulator) stands in for nvidia and uses ivshmem's BAR 2 as BAR1.
    fn is_sim_gpu(&self) -> bool {
        self.driver.as_deref() == Some("nvsim")
    }
    fn is_gpu(&self) -> bool {
        (self.vendor == 0x10de && self.class >> 16 == 0x03) || self.is_sim_gpu()
    }
    /// The size of the BAR that carries BAR1, from the function's sysfs `resource` file:
    /// NVIDIA's second BAR ([`parse::nvidia_bar1_size`]), ivshmem's BAR 2 under nvsim.
    fn bar1_size(&self, resource: &str) -> Option<u64> {
        if self.is_sim_gpu() {
            parse::bar_size(resource, 2)
        } else {
            parse::nvidia_bar1_size(resource)
        }
    }
}

/// What several checks share, read once.
struct Context<'a> {
    sys: &'a Sys,
    release: Option<String>,
    /// The kernel's configuration and where it came from.
    config: Option<(String, String)>,
    /// (symbol, module) for each exported nvidia_p2p_ function.
    exports: Vec<(String, String)>,
    gdrpeer_loaded: bool,
    /// The gdrpeer.ko installed for the running kernel.
    module_file: Option<String>,
    pci: Vec<Pci>,
    /// PCI addresses of RDMA-capable functions, with why.
    rdma: Vec<(String, &'static str)>,
}

/// The CPU package (socket) of NUMA node `node`: that of its first CPU. A node is not a
/// socket: sub-NUMA clustering (Intel SNC, AMD NPS2/NPS4) splits one socket into several
/// nodes, and a node may have no CPUs (memory only).
fn package_of(sys: &Sys, node: i32) -> Option<i32> {
    if node < 0 {
        return None;
    }
    let cpus = sys.read(&format!("/sys/devices/system/node/node{node}/cpulist"))?;
    let first: u32 = cpus.split([',', '-']).next()?.trim().parse().ok()?;
    sys.read(&format!(
        "/sys/devices/system/cpu/cpu{first}/topology/physical_package_id"
    ))?
    .trim()
    .parse()
    .ok()
}

impl<'a> Context<'a> {
    fn read(sys: &'a Sys) -> Self {
        let release = sys.release();
        let config = release
            .as_ref()
            .and_then(|r| {
                let p = format!("/boot/config-{r}");
                sys.read(&p).map(|c| (c, p))
            })
            .or_else(|| {
                // /proc/config.gz (CONFIG_IKCONFIG_PROC): gzip-compressed.
                let p = sys.path("/proc/config.gz");
                let p = p.to_str()?;
                sys.run("gzip", &["-dc", p])
                    .map(|c| (c, "/proc/config.gz".into()))
            });
        let exports = sys
            .read("/proc/kallsyms")
            .map(|k| parse::nv_p2p_exports(&k))
            .unwrap_or_default();
        let pci: Vec<Pci> = sys
            .names("/sys/bus/pci/devices")
            .into_iter()
            .filter_map(|addr| {
                let d = format!("/sys/bus/pci/devices/{addr}");
                let numa = sys
                    .read(&format!("{d}/numa_node"))
                    .and_then(|s| s.trim().parse().ok())
                    .unwrap_or(-1);
                Some(Pci {
                    path: sys.resolve(&d)?,
                    vendor: sys
                        .read(&format!("{d}/vendor"))
                        .and_then(|s| parse::parse_int(&s))?,
                    class: sys
                        .read(&format!("{d}/class"))
                        .and_then(|s| parse::parse_int(&s))?,
                    driver: sys.link_name(&format!("{d}/driver")),
                    numa,
                    package: package_of(sys, numa),
                    addr,
                })
            })
            .collect();
        let mut rdma: Vec<(String, &'static str)> = Vec::new();
        for p in &pci {
            let why = if p.class >> 8 == 0x0207 {
                Some("InfiniBand controller")
            } else if p.class >> 8 == 0x0200
                && !sys.names(&format!("{}/infiniband", p.path)).is_empty()
            {
                Some("Ethernet with an RDMA device (RoCE/iWARP)")
            } else if p.driver.as_deref() == Some("gdrnic") {
                Some("gdrnic, the sample NIC")
            } else {
                None
            };
            if let Some(why) = why {
                rdma.push((p.addr.clone(), why));
            }
        }
        // RDMA devices of other classes (/sys/class/infiniband/X/device).
        for ib in sys.names("/sys/class/infiniband") {
            if let Some(dev) = sys.resolve(&format!("/sys/class/infiniband/{ib}/device")) {
                if let Some(p) = pci.iter().find(|p| p.path == dev) {
                    if !rdma.iter().any(|(a, _)| *a == p.addr) {
                        rdma.push((p.addr.clone(), "RDMA device"));
                    }
                }
            }
        }
        let module_file = release
            .as_ref()
            .and_then(|r| find_module(sys, r, "gdrpeer"));
        Context {
            sys,
            release,
            config,
            exports,
            gdrpeer_loaded: sys.exists("/sys/module/gdrpeer"),
            module_file,
            pci,
            rdma,
        }
    }

    fn config(&self, key: &str) -> Option<&str> {
        self.config
            .as_ref()
            .and_then(|(c, _)| parse::config_value(c, key))
    }

    /// The module exporting nvidia_p2p_get_pages, with how it appears.
    fn exporter(&self) -> Option<&str> {
        self.exports
            .iter()
            .find(|(s, _)| s == "nvidia_p2p_get_pages")
            .map(|(_, m)| m.as_str())
    }
}

/// The installed module file NAME.ko[.xz|.zst|.gz] for a kernel release.
fn find_module(sys: &Sys, release: &str, name: &str) -> Option<String> {
    if sys.is_live() {
        if let Some(p) = sys.run("modinfo", &["-k", release, "-n", name]) {
            if p.starts_with('/') {
                return Some(p);
            }
        }
    }
    let base = format!("/lib/modules/{release}");
    let mut stack = vec![(base, 0)];
    while let Some((dir, depth)) = stack.pop() {
        for n in sys.names(&dir) {
            let p = format!("{dir}/{n}");
            if ["", ".xz", ".zst", ".gz"]
                .iter()
                .any(|z| n == format!("{name}.ko{z}"))
            {
                return Some(p);
            }
            // Not the build and source links: those lead into the headers.
            if depth < 6 && n != "build" && n != "source" && sys.path(&p).is_dir() {
                stack.push((p, depth + 1));
            }
        }
    }
    None
}

const RUST_KERNELS: &str =
    "a kernel built with CONFIG_RUST=y (Debian: sid's 7.2, trixie-backports' 7.3; Documentation/dev/building.rst)";

fn kernel_rust(ctx: &Context) -> Finding {
    let c = "kernel-rust";
    let rel = ctx.release.clone().unwrap_or_else(|| "?".into());
    match (ctx.config("RUST"), &ctx.config) {
        (Some("y"), Some((_, from))) => {
            Finding::new(c, Status::Ok, format!("{rel} has Rust (CONFIG_RUST=y in {from})"))
                .fact("release", rel)
        }
        (_, Some((_, from))) if !ctx.gdrpeer_loaded => Finding::new(
            c,
            Status::Fail,
            format!("{rel} is built without Rust (no CONFIG_RUST=y in {from}): gdrpeer, a Rust module, cannot be built or loaded"),
        )
        .fix(format!("boot {RUST_KERNELS}"))
        .fact("release", rel),
        _ if ctx.gdrpeer_loaded => Finding::new(
            c,
            Status::Ok,
            format!("{rel} has Rust (gdrpeer, a Rust module, is loaded)"),
        )
        .fact("release", rel),
        _ => Finding::new(
            c,
            Status::Warn,
            format!("{rel}: unknown whether the kernel has Rust (no /boot/config-{rel}, no /proc/config.gz)"),
        )
        .fix(format!("gdrpeer needs {RUST_KERNELS}"))
        .fact("release", rel),
    }
}

fn kernel_headers(ctx: &Context) -> Finding {
    let c = "kernel-headers";
    let Some(rel) = &ctx.release else {
        return Finding::new(c, Status::Warn, "unknown kernel release");
    };
    let kdir = format!("/lib/modules/{rel}/build");
    let sys = ctx.sys;
    // What running prepare-kdir means here: its copy in gdrpeer's DKMS source, if any.
    let script = sys
        .names("/usr/src")
        .into_iter()
        .filter(|n| n.starts_with("gdrpeer-"))
        .map(|n| format!("/usr/src/{n}/scripts/prepare-kdir"))
        .rfind(|p| sys.exists(p))
        .unwrap_or_else(|| "scripts/prepare-kdir".into());
    // Without the metadata, an installed or loaded gdrpeer still works; only the next
    // build (a new kernel, DKMS) stops.
    let built = ctx.gdrpeer_loaded || ctx.module_file.is_some();
    let blocked = if built { Status::Warn } else { Status::Fail };
    let Some(config) = sys.read(&format!("{kdir}/.config")) else {
        return Finding::new(
            c,
            blocked,
            format!("no kernel headers for {rel} ({kdir}/.config missing): gdrpeer cannot be built for this kernel"),
        )
        .fix(format!("install the headers (Debian: sudo apt install linux-headers-{rel}), then sudo {script} --install --in-place {kdir}"))
        .fact("kdir", kdir);
    };
    if parse::config_value(&config, "RUST") != Some("y") {
        return Finding::new(
            c,
            blocked,
            format!("{kdir} is of a kernel without CONFIG_RUST"),
        )
        .fix(format!("boot {RUST_KERNELS}"))
        .fact("kdir", kdir);
    }
    let x86 = parse::config_value(&config, "X86_64") == Some("y");
    let missing: Vec<String> = parse::rust_metadata_files(x86)
        .into_iter()
        .filter(|f| !sys.exists(&format!("{kdir}/{f}")))
        .collect();
    if missing.is_empty() {
        return Finding::new(
            c,
            Status::Ok,
            format!("{kdir} carries the Rust metadata out-of-tree Rust modules need"),
        )
        .fact("kdir", kdir);
    }
    let mut shown = missing[..missing.len().min(4)].join(" ");
    if missing.len() > 4 {
        shown += " ...";
    }
    Finding::new(
        c,
        blocked,
        format!(
            "{kdir} lacks the Rust metadata out-of-tree Rust modules need ({shown}): distribution header packages do not ship it{}",
            if built { "; the installed gdrpeer works, the next build for this kernel fails" } else { "" }
        ),
    )
    .fix(format!("sudo {script} --install --in-place {kdir}, then sudo dkms autoinstall (Documentation/dev/building.rst, Distribution kernels)"))
    .fact("kdir", kdir)
    .fact("missing", missing)
}

const OPEN_MODULES: &str = "install NVIDIA's open kernel modules (Turing or later; Debian: nvidia-open-kernel-dkms, NVIDIA's packages: nvidia-open or the -open DKMS flavour), reboot or reload nvidia, then load gdrpeer";

fn nvidia(ctx: &Context) -> Finding {
    let c = "nvidia";
    let sys = ctx.sys;
    // The module that serves nv-p2p: the one exporting the functions, else nvidia
    // (or the simulator) if loaded.
    let module = ctx.exporter().map(String::from).or_else(|| {
        ["nvidia", "nvsim"]
            .into_iter()
            .find(|m| sys.exists(&format!("/sys/module/{m}")))
            .map(String::from)
    });
    let Some(module) = module else {
        // Not loaded: say what is installed, if modinfo can.
        let installed = sys.run("modinfo", &["-F", "license", "nvidia"]);
        let mut f = Finding::new(
            c,
            Status::Fail,
            "no NVIDIA driver loaded (no nvidia module, nothing exports nvidia_p2p_get_pages)",
        );
        f = match installed.as_deref().map(parse::flavour_of_license) {
            Some(Flavour::Proprietary) => f.fix(format!("the installed nvidia.ko is the proprietary flavour, which gdrpeer cannot load beside: {OPEN_MODULES}")),
            Some(Flavour::Open) => f.fix("sudo modprobe nvidia"),
            None => f.fix(OPEN_MODULES),
        };
        return f;
    };
    let sim = module == "nvsim";
    let dir = format!("/sys/module/{module}");
    let version = sys.read(&format!("{dir}/version"));
    let taint = sys.read(&format!("{dir}/taint")).unwrap_or_default();
    let license = if sim || module == "nvidia" {
        sys.run("modinfo", &["-F", "license", &module])
            .filter(|l| !l.is_empty())
    } else {
        None
    };
    let (flavour, installed) = parse::loaded_flavour(license.as_deref(), &taint);
    let funcs: Vec<&str> = ctx
        .exports
        .iter()
        .filter(|(_, m)| *m == module)
        .map(|(s, _)| s.as_str())
        .collect();
    // The page-table version: nvsim's is a parameter; the driver's is its header's.
    let table = if sim {
        sys.read(&format!("{dir}/parameters/page_table_version"))
            .and_then(|s| parse::parse_int(&s))
            .map(|v| parse::nv_version(v as u32))
    } else {
        None
    };
    let mut what = if sim {
        format!("{module} (the simulator, standing in for nvidia)")
    } else {
        format!(
            "{module} {}",
            version.as_deref().unwrap_or("(version unknown)")
        )
    };
    what += match flavour {
        Flavour::Open => ", open flavour",
        Flavour::Proprietary => ", proprietary flavour",
    };
    if let Some(l) = license.as_deref().filter(|_| installed.is_none()) {
        what += &format!(" (license \"{l}\")");
    } else if taint.contains('P') {
        what += " (taint P)";
    }
    match installed {
        Some(Flavour::Open) => what += "; the installed file is the open flavour, not loaded yet",
        Some(Flavour::Proprietary) => what += "; the installed file is the proprietary flavour",
        None => {}
    }
    let abi = match (&table, funcs.is_empty()) {
        (_, true) if ctx.exports.is_empty() => {
            "nv-p2p exports not visible (/proc/kallsyms unreadable)".to_string()
        }
        (_, true) => "exports no nv-p2p function".to_string(),
        (Some(t), false) => format!("nv-p2p: {} functions, page tables {t}", funcs.len()),
        (None, false) => format!("nv-p2p: {} functions", funcs.len()),
    };
    let mut f = Finding::new(c, Status::Ok, format!("{what}; {abi}"))
        .fact("module", module.clone())
        .fact("simulator", sim)
        .fact(
            "flavour",
            serde_json::to_value(flavour).unwrap_or(Value::Null),
        )
        .fact("nv_p2p_functions", funcs.clone());
    if let Some(v) = &version {
        f = f.fact("version", v.clone());
    }
    if let Some(l) = &license {
        f = f.fact("license", l.clone());
    }
    if let Some(t) = &table {
        f = f.fact("page_table_version", t.clone());
    }
    if flavour == Flavour::Proprietary {
        f.status = Status::Fail;
        f.summary += ": gdrpeer uses the kernel's GPL-only Rust symbols, and the kernel refuses a module that uses them together with a proprietary module's (\"module using GPL-only symbols uses symbols from proprietary module\")";
        return f.fix(match installed {
            Some(Flavour::Open) => "the open kernel modules are installed but the proprietary nvidia is still loaded: reload nvidia (stop its users, sudo modprobe -r nvidia_drm nvidia_modeset nvidia_uvm nvidia, sudo modprobe nvidia) or reboot",
            _ => OPEN_MODULES,
        });
    }
    if installed == Some(Flavour::Proprietary) {
        // Works now; the next load of nvidia (a reboot) brings the proprietary one.
        f.status = Status::Warn;
        f = f.fix(format!(
            "at the next load of nvidia (a reboot) gdrpeer will not load beside it: {OPEN_MODULES}"
        ));
    }
    if !ctx.exports.is_empty() && !funcs.contains(&"nvidia_p2p_get_pages") {
        f.status = Status::Fail;
        return f.fix("this driver exports no nv-p2p interface: use an NVIDIA data-center or workstation driver with GPUDirect RDMA support (nvidia_p2p_get_pages)");
    }
    if let Some(t) = &table {
        if !t.starts_with("1.") && !t.starts_with("2.") {
            f.status = Status::Fail;
            return f.fix(format!("gdrpeer reads page tables of major version 1 or 2 only, {t} is refused at each pin: update gdrpeer"));
        }
    }
    if sim {
        f.status = Status::Warn;
        f = f.fix("nvsim is the test rig's simulator: on a GPU machine, load NVIDIA's open nvidia.ko instead");
    }
    f
}

fn gdrpeer(ctx: &Context) -> Finding {
    let c = "gdrpeer";
    let sys = ctx.sys;
    if !ctx.gdrpeer_loaded {
        let fix = match (&ctx.module_file, ctx.exporter()) {
            (Some(file), _) => format!("sudo modprobe gdrpeer (installed: {file}){}", if ctx.exporter().is_none() { ", after the NVIDIA driver" } else { "" }),
            (None, _) => "install gdrpeer for this kernel (sudo dkms install gdrpeer/<version>, or make && sudo make install; Documentation/dev/building.rst), then sudo modprobe gdrpeer".into(),
        };
        let mut f = Finding::new(c, Status::Fail, "gdrpeer is not loaded").fix(fix);
        if let Some(file) = &ctx.module_file {
            f = f.fact("installed", file.clone());
        }
        return f;
    }
    let dir = "/sys/module/gdrpeer";
    let version = sys.read(&format!("{dir}/version"));
    let taint = sys.read(&format!("{dir}/taint")).unwrap_or_default();
    // Rust modules' parameters are not in sysfs; debugfs has them (root).
    let mut params: Vec<(String, String)> = sys
        .names(&format!("{dir}/parameters"))
        .into_iter()
        .filter_map(|n| Some((n.clone(), sys.read(&format!("{dir}/parameters/{n}"))?)))
        .collect();
    let mut params_from = "sysfs";
    if params.is_empty() {
        if let Some(t) = sys.read("/sys/kernel/debug/gdrpeer/params") {
            params = parse::key_values(&t);
            params_from = "debugfs";
        }
    }
    // The ABI, from the module itself; why not, when the device would not open (an
    // incompatible ABI is this check's failure; a permission is the device node's check).
    let (abi, unopened) = if sys.is_live() {
        match gdrpeer::Device::open(gdrpeer::DEFAULT_PATH) {
            Ok(d) => (Some(d.version()), None),
            Err(e) => (None, Some(e)),
        }
    } else {
        (None, None)
    };
    let mut s = String::from("gdrpeer is loaded");
    s += &match &version {
        Some(v) => format!(", version {v}"),
        None => ", no version in /sys/module/gdrpeer".into(),
    };
    if let Some(v) = &abi {
        s += &format!(", module ABI {}", v.abi_string());
    }
    if let Some(e) = &unopened {
        s += &format!(", ABI not read ({e})");
    }
    if !taint.is_empty() {
        s += &format!(", taint {taint}");
    }
    s += &if params.is_empty() {
        ", parameters not readable (debugfs gdrpeer/params: root)".to_string()
    } else {
        format!(
            ", {}",
            params
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        )
    };
    let (status, abi_fix) = abi_status(unopened.as_ref());
    let mut f = Finding::new(c, status, s).fact("loaded", true).fact(
        "parameters",
        params
            .iter()
            .map(|(k, v)| (k.clone(), Value::from(v.clone())))
            .collect::<Map<_, _>>(),
    );
    if !params.is_empty() {
        f = f.fact("parameters_from", params_from);
    }
    if let Some(v) = version {
        f = f.fact("version", v);
    }
    if let Some(v) = abi {
        f = f
            .fact("abi", v.abi_string())
            .fact("nv_page_table", parse::nv_version(v.nv_page_table))
            .fact("nv_dma_mapping", parse::nv_version(v.nv_dma_mapping));
    }
    if let Some(file) = &ctx.module_file {
        f = f.fact("installed", file.clone());
    }
    if let Some(x) = abi_fix {
        f = f.fix(x);
    }
    f
}

/// The `gdrpeer` check's verdict on the ABI, from why `/dev/gdrpeer` did not open (`None`:
/// it opened, or was not tried), and the fix.
fn abi_status(unopened: Option<&gdrpeer::Error>) -> (Status, Option<&'static str>) {
    use gdrpeer::Error;
    match unopened {
        None => (Status::Ok, None),
        Some(Error::AbiMismatch { .. }) => (Status::Fail, Some("this tool and the loaded module speak different ABIs: install the gdrpeer-tools of the module's version (or the module of the tools')")),
        // GET_VERSION of another size than the module's, or not gdrpeer's device at all.
        Some(e) if e.errno() == Some(libc::ENOTTY) => (Status::Fail, Some("/dev/gdrpeer does not answer gdrpeer's GET_VERSION: it is another driver's node, or a module of an ABI this tool does not know; install the gdrpeer-tools of the module's version")),
        // Compatibility not known: who may open the node is the device check's.
        Some(_) => (Status::Warn, Some("the ABI could not be read: run doctor as a user who may open /dev/gdrpeer (check device /dev/gdrpeer), or as root")),
    }
}

fn device_node(ctx: &Context, node: &str) -> Finding {
    let sys = ctx.sys;
    let c = format!("device {node}");
    let path = sys.path(node);
    let Ok(meta) = fs::metadata(&path) else {
        return if node == "/dev/gdrpeer" {
            let f = Finding::new(c, Status::Fail, format!("{node} does not exist"));
            if ctx.gdrpeer_loaded {
                f.fix("gdrpeer is loaded but its device is missing: is devtmpfs mounted on /dev? reload gdrpeer")
            } else {
                f.fix("load gdrpeer (sudo modprobe gdrpeer)")
            }
        } else if ctx.gdrpeer_loaded {
            Finding::new(c, Status::Warn, format!("{node} does not exist: gdrpeer registers it unless gdrdrv=0 or another /dev/gdrdrv (gdrcopy's) was there first"))
                .fix("gdrcopy programs (libgdrapi) need it: load gdrpeer with gdrdrv=1 (the default) and without gdrcopy's gdrdrv")
        } else {
            Finding::new(c, Status::Warn, format!("{node} does not exist"))
                .fix("load gdrpeer (it registers /dev/gdrdrv for gdrcopy programs)")
        };
    };
    if sys.is_live() && !meta.file_type().is_char_device() {
        return Finding::new(c, Status::Fail, format!("{node} is not a character device"))
            .fix(format!("remove {node} and reload gdrpeer"));
    }
    let passwd = sys.read("/etc/passwd").unwrap_or_default();
    let group = sys.read("/etc/group").unwrap_or_default();
    let owner = parse::name_of_id(&passwd, meta.uid()).unwrap_or_else(|| meta.uid().to_string());
    let grp = parse::name_of_id(&group, meta.gid()).unwrap_or_else(|| meta.gid().to_string());
    let mode = meta.mode() & 0o7777;
    let owner_of = if node == "/dev/gdrdrv" && sys.exists("/sys/module/gdrdrv") {
        " (gdrcopy's gdrdrv)"
    } else {
        ""
    };
    let usable = rustix::fs::access(
        &path,
        rustix::fs::Access::READ_OK | rustix::fs::Access::WRITE_OK,
    )
    .is_ok();
    let s = format!(
        "{owner}:{grp} mode {mode:04o}{owner_of}, {} by this user",
        if usable { "openable" } else { "not openable" }
    );
    let f = Finding::new(c, if usable { Status::Ok } else { Status::Warn }, s)
        .fact("owner", owner)
        .fact("group", grp.clone())
        .fact("mode", format!("{mode:04o}"))
        .fact("openable", usable);
    if usable {
        return f;
    }
    let fix = if grp == "gdrpeer" {
        "add the user to group gdrpeer (sudo usermod -aG gdrpeer $USER) and log in again"
            .to_string()
    } else {
        "install udev/70-gdrpeer.rules (make install does), create the group (sudo groupadd --system gdrpeer), add the user (sudo usermod -aG gdrpeer $USER), then sudo udevadm trigger --subsystem-match=misc (Documentation/user/configuration.rst, Device permissions)".to_string()
    };
    f.fix(fix)
}

fn iommu(ctx: &Context) -> Finding {
    let c = "iommu";
    let sys = ctx.sys;
    let units = sys.names("/sys/class/iommu");
    let groups = sys.names("/sys/kernel/iommu_groups");
    let cmdline = sys.read("/proc/cmdline").unwrap_or_default();
    // The domains of the GPUs' and the RDMA devices' groups.
    let mut domains: Vec<(String, String)> = Vec::new();
    for p in ctx
        .pci
        .iter()
        .filter(|p| p.is_gpu() || ctx.rdma.iter().any(|(a, _)| *a == p.addr))
    {
        let d = format!("/sys/bus/pci/devices/{}/iommu_group", p.addr);
        if let Some(t) = sys.read(&format!("{d}/type")) {
            domains.push((p.addr.clone(), t));
        }
    }
    let modes: Vec<IommuMode> = domains
        .iter()
        .map(|(_, t)| parse::iommu_group_mode(t))
        .collect();
    let (_, _, strict_cmd) = parse::iommu_cmdline(&cmdline);
    let mode = match modes.first() {
        Some(&m) if modes.iter().all(|&x| x == m) => m,
        Some(_) => IommuMode::Other,
        None => parse::iommu_mode_without_groups(units.len(), groups.len(), &cmdline),
    };
    let mode = match mode {
        IommuMode::Translated { strict: None } => IommuMode::Translated { strict: strict_cmd },
        m => m,
    };
    let on = if domains.is_empty() {
        String::new()
    } else {
        format!(
            " ({})",
            domains
                .iter()
                .map(|(a, t)| format!("{a}: {t}"))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    let (status, summary, fix) = match mode {
        IommuMode::Off => (Status::Ok, "off: DMA addresses are bus addresses".to_string(), None),
        IommuMode::Passthrough => (Status::Ok, format!("passthrough (identity domains){on}: DMA addresses are bus addresses"), None),
        IommuMode::Translated { strict } => (
            Status::Warn,
            format!(
                "translated, {}{on}: peers must use DMA addresses (gdrpeer's DMA_MAP, kernel API, dma-buf), not GET_PAGES' bus addresses{}",
                match strict {
                    Some(true) => "strict",
                    Some(false) => "lazy (flush queue)",
                    None => "strict or lazy unknown",
                },
                if strict == Some(false) { "; an unmapped IOVA stays usable until the next flush, so a revoked page can be reached for a moment" } else { "" }
            ),
            Some(format!(
                "fine for gdrpeer's DMA addresses; for tools that hand bus addresses to a device (NVIDIA's rule), boot with iommu=pt{}",
                if strict == Some(false) { ", or with iommu.strict=1 to close the window after revocation" } else { "" }
            )),
        ),
        IommuMode::Other => (
            Status::Warn,
            format!("mixed or foreign domains{on}: a GPU or NIC may belong to vfio"),
            Some("give the GPU and the NIC back to their host drivers, in one kind of domain".into()),
        ),
    };
    let mut f = Finding::new(c, status, summary)
        .fact("mode", serde_json::to_value(mode).unwrap_or(Value::Null))
        .fact("units", units)
        .fact("groups", groups.len());
    if let IommuMode::Translated { strict } = mode {
        f = f.fact("strict", strict);
    }
    match fix {
        Some(x) => f.fix(x),
        None => f,
    }
}

fn bar1(ctx: &Context) -> Vec<Finding> {
    let sys = ctx.sys;
    let gpus: Vec<&Pci> = ctx.pci.iter().filter(|p| p.is_gpu()).collect();
    if gpus.is_empty() {
        return vec![Finding::new(
            "gpu",
            Status::Fail,
            "no NVIDIA GPU found on the PCI bus (vendor 0x10de, display class)",
        )
        .fix("check that the GPU is seated and visible (lspci -d 10de:), and bound to nvidia")];
    }
    let smi = sys
        .run("nvidia-smi", &["-q", "-d", "MEMORY"])
        .map(|t| parse::nvidia_smi_bar1(&t))
        .unwrap_or_default();
    let nvsim = sys
        .read("/sys/kernel/debug/nvsim/stats")
        .map(|t| parse::key_values(&t));
    // Whether any GPU is nvidia's (or the simulator's).
    let driven = gpus
        .iter()
        .any(|g| g.is_sim_gpu() || g.driver.as_deref() == Some("nvidia"));
    gpus.into_iter()
        .map(|g| {
            let c = format!("bar1 {}", g.addr);
            let size = sys
                .read(&format!("/sys/bus/pci/devices/{}/resource", g.addr))
                .and_then(|r| g.bar1_size(&r));
            let mut used: Option<(u64, u64, &str)> = None;
            if g.is_sim_gpu() {
                if let Some(kv) = &nvsim {
                    let get = |k: &str| kv.iter().find(|(n, _)| n == k).and_then(|(_, v)| parse::parse_int(v));
                    if let (Some(u), Some(t)) = (get("bar1_used"), get("bar1_size")) {
                        used = Some((u, t, "nvsim's debugfs stats"));
                    }
                }
            } else if let Some((_, t, u)) = smi.iter().find(|(a, _, _)| *a == g.addr) {
                used = Some((*u, *t, "nvidia-smi"));
            }
            let mib = |b: u64| format!("{} MiB", b >> 20);
            let model = sys
                .read(&format!("/proc/driver/nvidia/gpus/{}/information", g.addr))
                .and_then(|t| t.lines().find_map(|l| l.strip_prefix("Model:").map(|m| m.trim().to_string())));
            let mut s = match (&model, g.is_sim_gpu()) {
                (Some(m), _) => format!("{m}: "),
                (None, true) => "simulated GPU (nvsim on ivshmem BAR 2): ".into(),
                _ => String::new(),
            };
            s += &match size {
                Some(b) => format!("BAR1 {}", mib(b)),
                None => "BAR1 size unknown".into(),
            };
            s += &match used {
                Some((u, t, from)) => format!(", {} of {} in use ({}%, {from})", mib(u), mib(t), u * 100 / t.max(1)),
                None => ", use unknown".into(),
            };
            let mut f = Finding::new(c, Status::Ok, s)
                .fact("gpu", g.addr.clone())
                .fact("simulator", g.is_sim_gpu());
            if let Some(b) = size {
                f = f.fact("bar1_bytes", b);
            }
            if let Some((u, t, _)) = used {
                f = f.fact("bar1_used_bytes", u).fact("bar1_total_bytes", t);
                if u * 10 > t * 9 {
                    f.status = Status::Warn;
                    f = f.fix("BAR1 is nearly full: pins will fail with ENOMEM; unpin what is idle (lower gdrpeer's cache_max_bytes/global_max_bytes) or use a GPU with a larger BAR1");
                }
            } else if !g.is_sim_gpu() && f.fix.is_none() {
                f = f.fact("bar1_used_bytes", Value::Null);
            }
            if let Some(b) = size {
                if !g.is_sim_gpu() && b < 256 << 20 && f.status == Status::Ok {
                    f.status = Status::Warn;
                    f = f.fix("a small BAR1 limits how much GPU memory peers can reach at once: enable large BAR / Resizable BAR (Above 4G decoding) in the firmware");
                }
            }
            f = f.fact("driver", g.driver.clone().map_or(Value::Null, Value::from));
            if !g.is_sim_gpu() && g.driver.as_deref() != Some("nvidia") {
                // nv-p2p pins only memory of GPUs nvidia drives: this one serves nobody.
                // A FAIL where no GPU is nvidia's; else one GPU set aside (for a virtual
                // machine, say) among others.
                f.status = if driven { Status::Warn } else { Status::Fail };
                f.summary += &match g.driver.as_deref() {
                    Some("vfio-pci") => ", bound to vfio-pci (passed to a virtual machine or user-space driver): this host's nvidia, and so gdrpeer, cannot reach its memory".to_string(),
                    Some(d) => format!(", bound to {d}, not nvidia: gdrpeer cannot reach its memory"),
                    None => ", bound to no driver: nvidia did not take it (an open kernel module refuses GPUs older than Turing; see dmesg), so gdrpeer cannot reach its memory".to_string(),
                };
                f.fix = None;
                f = f.fix(match g.driver.as_deref() {
                    Some("vfio-pci") => "to use it here, unbind it from vfio-pci and bind it to nvidia (driverctl unset-override, or echo the address to /sys/bus/pci/drivers/nvidia/bind)",
                    _ => "bind it to nvidia: load NVIDIA's open kernel modules (Turing or newer GPUs), and read dmesg for why nvidia did not take it",
                });
            }
            f
        })
        .collect()
}

fn topology(ctx: &Context) -> Vec<Finding> {
    let gpus: Vec<&Pci> = ctx.pci.iter().filter(|p| p.is_gpu()).collect();
    if gpus.is_empty() {
        return Vec::new();
    }
    if ctx.rdma.is_empty() {
        return vec![Finding::new("pcie-path", Status::Warn, "no RDMA-capable device found (no InfiniBand controller, no Ethernet function with an RDMA device, no gdrnic)")
            .fix("load the NIC's RDMA driver (mlx5_ib, irdma, bnxt_re, ...) so that it appears in /sys/class/infiniband")];
    }
    let mut v = Vec::new();
    for g in &gpus {
        // Each peer's link, where the paths are understood.
        let links: Vec<(&Pci, &str, Option<PciLink>)> = ctx
            .rdma
            .iter()
            .filter_map(|(addr, why)| {
                let n = ctx.pci.iter().find(|p| p.addr == *addr)?;
                // Sockets by package where both are known, else by NUMA node.
                let (a, b) = match (g.package, n.package) {
                    (Some(a), Some(b)) => (a, b),
                    _ => (g.numa, n.numa),
                };
                Some((n, *why, parse::pci_link(&g.path, a, &n.path, b)))
            })
            .collect();
        // The GPU's best peer: a peer across sockets is a FAIL only for a GPU that has
        // no better one (a two-socket server has NICs on both sockets, each GPU using
        // its own socket's).
        let best = links
            .iter()
            .filter_map(|(n, _, l)| Some((l.as_ref()?, n)))
            .min_by_key(|(l, _)| **l);
        for (n, why, link) in &links {
            let c = format!("pcie-path {} {}", g.addr, n.addr);
            let Some(link) = *link else {
                v.push(Finding::new(
                    c,
                    Status::Warn,
                    "the PCIe path is unknown (sysfs paths not understood)",
                ));
                continue;
            };
            let (mut status, verdict, mut fix) = match link {
                PciLink::Switch => (Status::Ok, "the best case in NVIDIA's rule", None),
                PciLink::RootPort => (Status::Warn, "acceptable in NVIDIA's rule; peer-to-peer bandwidth may be limited", Some("for full bandwidth put the GPU and the NIC under one PCIe switch".to_string())),
                PciLink::HostBridge => (Status::Warn, "acceptable in NVIDIA's rule: works, peer-to-peer reads may be severely limited", Some("for full bandwidth put the GPU and the NIC under one PCIe switch".to_string())),
                PciLink::AcrossHostBridges => (Status::Warn, "may be slow or not work, depending on the CPU", Some("use a NIC under the GPU's host bridge, ideally under its PCIe switch".to_string())),
                PciLink::AcrossSockets => (Status::Fail, "not supported by NVIDIA's rule: the CPU interconnect may not forward peer-to-peer traffic reliably", Some("use a NIC on the GPU's CPU socket, ideally under the GPU's PCIe switch".to_string())),
            };
            if let Some((b, bn)) = best.filter(|(b, _)| **b < link) {
                // A worse pair than this GPU's best: not a FAIL of the machine, a pair
                // to leave unused.
                if status == Status::Fail {
                    status = Status::Warn;
                }
                fix = Some(format!(
                    "do not pair them: use {} for this GPU ({})",
                    bn.addr,
                    b.describe()
                ));
            }
            let mut f = Finding::new(
                c,
                status,
                format!(
                    "GPU {} to {} ({why}): {}; {verdict}",
                    g.addr,
                    n.addr,
                    link.describe()
                ),
            )
            .fact("gpu", g.addr.clone())
            .fact("peer", n.addr.clone())
            .fact("peer_kind", *why)
            .fact("link", serde_json::to_value(link).unwrap_or(Value::Null))
            .fact("gpu_path", g.path.clone())
            .fact("peer_path", n.path.clone());
            if let Some(x) = fix {
                f = f.fix(x);
            }
            v.push(f);
        }
    }
    v
}

const EFI_SECURE_BOOT: &str =
    "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c";

/// Whether Secure Boot is on, and how that was learnt.
fn secure_boot_state(sys: &Sys) -> (Option<bool>, &'static str) {
    if let Some(s) = sys
        .run("mokutil", &["--sb-state"])
        .as_deref()
        .and_then(parse::mokutil_sb_state)
    {
        return (Some(s), "mokutil --sb-state");
    }
    if let Some(s) = sys
        .read_bytes(EFI_SECURE_BOOT)
        .as_deref()
        .and_then(parse::efi_secure_boot)
    {
        return (Some(s), "the SecureBoot EFI variable");
    }
    if sys.exists("/sys/firmware/efi") {
        (None, "EFI boot, SecureBoot variable unreadable")
    } else {
        (Some(false), "not booted by EFI")
    }
}

fn secure_boot(ctx: &Context) -> Finding {
    let sys = ctx.sys;
    let (sb, from) = secure_boot_state(sys);
    let lockdown = sys.read("/sys/kernel/security/lockdown").and_then(|l| {
        l.split_whitespace().find_map(|w| {
            w.strip_prefix('[')
                .and_then(|w| w.strip_suffix(']'))
                .map(String::from)
        })
    });
    let enforce = sys.read("/sys/module/module/parameters/sig_enforce");
    let mut s = match sb {
        Some(true) => format!("Secure Boot on ({from})"),
        Some(false) => format!("Secure Boot off ({from})"),
        None => format!("Secure Boot state unknown ({from})"),
    };
    if let Some(l) = &lockdown {
        s += &format!(", lockdown {l}");
    }
    if let Some(e) = &enforce {
        s += &format!(", module.sig_enforce={e}");
    }
    let mut f = Finding::new(
        "secure-boot",
        if sb.is_some() {
            Status::Ok
        } else {
            Status::Warn
        },
        s,
    )
    .fact("secure_boot", sb)
    .fact("source", from);
    if let Some(l) = lockdown {
        f = f.fact("lockdown", l);
    }
    if sb.is_none() {
        f = f.fix("run as root, or check with mokutil --sb-state");
    } else if enforce.as_deref() == Some("Y") && !sys.exists("/sys/firmware/efi") {
        // No EFI, so no MOK list: DKMS's key cannot become one the kernel trusts.
        f.status = Status::Warn;
        f.summary += ": the kernel loads only modules signed by a key it trusts, and without EFI no key can be enrolled (MOK)";
        f = f.fix("have gdrpeer.ko signed with a key built into this kernel (its builder's), or boot a kernel that does not force module signatures (CONFIG_MODULE_SIG_FORCE, module.sig_enforce)");
    }
    f
}

/// Whether a signing key found by its name alone leaves the module's load in doubt: where
/// signatures are enforced, a new key of an old name (DKMS's after a reinstall) is rejected.
/// A loaded gdrpeer proves nothing here: the file checked may have been re-signed since.
fn name_match_unproven(how: &str, enforcing: bool) -> bool {
    how == "signer name" && enforcing
}

fn module_signature(ctx: &Context) -> Finding {
    let c = "module-signature";
    let sys = ctx.sys;
    let (sb, _) = secure_boot_state(sys);
    let enforcing = sb == Some(true)
        || sys
            .read("/sys/module/module/parameters/sig_enforce")
            .as_deref()
            == Some("Y");
    let taint = sys.read("/sys/module/gdrpeer/taint").unwrap_or_default();
    let Some(file) = &ctx.module_file else {
        let s = if ctx.gdrpeer_loaded {
            format!(
                "no gdrpeer.ko installed under /lib/modules (loaded from elsewhere){}",
                if taint.contains('E') {
                    "; the kernel could not verify its signature (taint E)"
                } else {
                    ""
                }
            )
        } else {
            "no gdrpeer.ko installed for this kernel".into()
        };
        return Finding::new(c, Status::Warn, s).fix("install gdrpeer with DKMS, which signs it with its key (Documentation/user/troubleshooting.rst, Secure Boot)");
    };
    // The signer, from modinfo where it runs; else the signature marker of an
    // uncompressed module.
    let signer = sys
        .run("modinfo", &["-F", "signer", file])
        .filter(|s| !s.is_empty());
    let sig_key = sys
        .run("modinfo", &["-F", "sig_key", file])
        .unwrap_or_default();
    let signed = match &signer {
        Some(_) => Some(true),
        None if file.ends_with(".ko") => sys
            .read_bytes(file)
            .map(|b| b.ends_with(parse::MODULE_SIG_MAGIC)),
        None => None,
    };
    let mut f = Finding::new(c, Status::Ok, String::new()).fact("module", file.clone());
    let dkms_key = "sudo mokutil --import /var/lib/dkms/mok.pub, then confirm the key in the MOK manager at the next boot";
    match signed {
        Some(false) => {
            f.summary = format!("{file} is not signed");
            if enforcing {
                f.status = Status::Fail;
                f.summary += ": with Secure Boot (or sig_enforce) the kernel refuses it (\"Key was rejected by service\")";
                return f.fix(format!(
                    "install gdrpeer with DKMS, which signs it, and enroll DKMS's key: {dkms_key}"
                ));
            }
            f.summary += " (loads without Secure Boot, tainting the kernel E)";
            return f.fact("signed", false);
        }
        None => {
            f.status = Status::Warn;
            f.summary =
                format!("{file}: unknown whether it is signed (no modinfo, compressed module)");
            return f.fix(format!(
                "modinfo {file} shows the signer; with Secure Boot it must be an enrolled key"
            ));
        }
        Some(true) => {}
    }
    f = f.fact("signed", true);
    let signer = signer.unwrap_or_default();
    f.summary = if signer.is_empty() {
        format!("{file} is signed")
    } else {
        format!("{file} is signed by \"{signer}\"")
    };
    f = f.fact("signer", signer.clone());
    // Is the key one the kernel trusts? Its keyrings (/proc/keys lists what we may view;
    // the .platform and .machine keyrings usually need root), else the MOK list.
    let keys = sys.read("/proc/keys").filter(|k| !k.is_empty());
    let mok = sys.run("mokutil", &["--list-enrolled"]);
    let found = keys
        .as_deref()
        .and_then(|k| {
            parse::key_enrolled(k, &signer, &sig_key).map(|how| (how, "the kernel's keyrings"))
        })
        .or_else(|| {
            mok.as_deref().and_then(|m| {
                parse::key_enrolled(m, &signer, &sig_key).map(|how| (how, "the enrolled MOK keys"))
            })
        });
    // A loaded gdrpeer without taint E was verified by the kernel (when it checks).
    let verified = ctx.gdrpeer_loaded && !taint.contains('E') && enforcing;
    if verified && found.is_none() {
        f.summary += ", and the kernel verified it at load (no taint E)";
        return f.fact("key_enrolled", true);
    }
    // /proc/keys shows a user only the keys it may view: the trusted keyrings need root.
    let all_keys = !sys.is_live() || rustix::process::geteuid().is_root();
    match found {
        Some((how, whence)) => {
            f.summary += &format!(", a key in {whence} (matched by {how})");
            if name_match_unproven(how, enforcing) {
                f.status = Status::Warn;
                f = f.fix(format!("only a key of the same name was found, not the module's key id: after a reinstall DKMS may sign with a new key of the old name; check with sudo mokutil --test-key /var/lib/dkms/mok.pub, and if it is not enrolled: {dkms_key}"));
            }
            f.fact("key_enrolled", true)
        }
        None if keys.is_none() && mok.is_none() => {
            f.summary += ", whether its key is enrolled is unknown (no /proc/keys, no mokutil)";
            f.status = if enforcing { Status::Warn } else { Status::Ok };
            f.fact("key_enrolled", Value::Null).fix(format!(
                "check with sudo mokutil --list-enrolled; if DKMS's key is missing: {dkms_key}"
            ))
        }
        None if !all_keys && mok.is_none() => {
            f.summary += ", by a key not among those this user can see (/proc/keys)";
            f.status = if enforcing { Status::Warn } else { Status::Ok };
            f.fact("key_enrolled", Value::Null).fix(format!("run as root, or check with sudo mokutil --list-enrolled; if DKMS's key is missing: {dkms_key}"))
        }
        None => {
            f.summary += ", by a key not found among the enrolled ones";
            if enforcing {
                f.status = Status::Fail;
                f.summary +=
                    ": with Secure Boot the kernel refuses it (\"Key was rejected by service\")";
            } else {
                f.summary += " (loads without Secure Boot, tainting the kernel E)";
            }
            f.fact("key_enrolled", false).fix(dkms_key)
        }
    }
}
