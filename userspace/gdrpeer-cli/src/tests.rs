// SPDX-License-Identifier: GPL-2.0

//! The command line's parsing, and the JSON documents' schemas.

use super::*;
use clap::CommandFactory;
use serde_json::json;

fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(std::iter::once("gdrpeer").chain(args.iter().copied()))
}

#[test]
fn cli_is_well_formed() {
    Cli::command().debug_assert();
}

#[test]
fn numbers_are_decimal_or_0x_hex() {
    assert_eq!(parse_number("4096"), Ok(4096));
    assert_eq!(parse_number("0x7f0000001000"), Ok(0x7f00_0000_1000));
    assert_eq!(parse_number("0XfF"), Ok(0xff));
    assert_eq!(parse_number("0xffffffffffffffff"), Ok(u64::MAX));
    for bad in [
        "",
        "0x",
        "ff",
        "+1",
        "-1",
        "0x+1",
        "1 ",
        "0x1_0",
        "0x10000000000000000",
    ] {
        assert!(parse_number(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn pin_family_parses_its_allocation() {
    let cli = parse(&[
        "pin",
        "--alloc",
        "0x20000",
        "--offset",
        "4096",
        "--len",
        "100",
        "--persistent",
        "--pages",
        "--hold",
        "5",
    ])
    .unwrap();
    let Command::Pin { pin, pages, hold } = cli.command else {
        panic!("not pin");
    };
    assert_eq!(
        (
            pin.alloc.size,
            pin.alloc.offset,
            pin.alloc.len,
            pin.persistent
        ),
        (0x20000, 4096, Some(100), true)
    );
    assert_eq!(pin.alloc.range().unwrap(), (4096, 100));
    assert_eq!((pages, hold), (true, Some(5)));

    // Defaults: one 64 KiB GPU page, all of it.
    let Command::Pages { pin } = parse(&["pages"]).unwrap().command else {
        panic!("not pages");
    };
    assert_eq!(pin.alloc.range().unwrap(), (0, 65536));
    assert!(!pin.persistent);

    let cli = parse(&["dma-map", "--peer", "3b:00.1", "--alloc", "1"]).unwrap();
    let Command::DmaMap { pin, peer } = cli.command else {
        panic!("not dma-map");
    };
    assert_eq!(pin.alloc.range().unwrap(), (0, 1));
    assert_eq!(peer.to_string(), "0000:3b:00.1");

    let err = parse(&["dma-map", "--peer", "3b:00"]).err().unwrap();
    assert_eq!(parse_status(&err), USAGE);
    assert!(err.to_string().contains("bad PCI address"), "{err}");
    assert!(parse(&["dma-map"]).is_err(), "--peer is required");
    assert!(parse(&["pages", "--alloc", "zz"]).is_err());
}

#[test]
fn ranges_outside_the_allocation_are_usage_errors() {
    for args in [
        &["pin", "--alloc", "0"][..],
        &["pin", "--offset", "65536"],
        &["pin", "--len", "0"],
        &["pin", "--offset", "1", "--len", "65536"],
        &["dmabuf", "--alloc", "4096", "--len", "4097"],
    ] {
        let cli = parse(args).unwrap();
        let alloc = match &cli.command {
            Command::Pin { pin, .. } => &pin.alloc,
            Command::Dmabuf { alloc, .. } => alloc,
            _ => unreachable!(),
        };
        let e = alloc.range().unwrap_err();
        assert_eq!(e.status(), USAGE, "{args:?}: {e}");
    }
}

/// `events --alloc 0` is a usage error before anything loads CUDA, as `pin`'s is.
#[test]
fn events_of_an_empty_allocation_are_a_usage_error() {
    let cli = parse(&["events", "--alloc", "65536", "--alloc", "0"]).unwrap();
    let e = run(&cli).unwrap_err();
    assert_eq!(e.status(), USAGE, "{e}");
}

#[test]
fn an_address_to_pin_is_refused_with_why() {
    // As older versions took it: VA LEN (PCI).
    for args in [
        &["pin", "0x7f0000000000", "4096"][..],
        &["pages", "0x7f0000000000", "4096"],
        &["dma-map", "0x7f0000000000", "4096", "--peer", "3b:00.1"],
    ] {
        let cli = parse(args).unwrap();
        let name = command_name(&cli.command);
        let (Command::Pin { pin, .. } | Command::Pages { pin } | Command::DmaMap { pin, .. }) =
            &cli.command
        else {
            unreachable!()
        };
        let e = pin.no_address(name).unwrap_err();
        assert_eq!(e.status(), USAGE);
        let msg = e.to_string();
        assert!(msg.contains("own GPU memory"), "{msg}");
        assert!(msg.contains("EINVAL"), "{msg}");
        assert!(
            msg.starts_with(&format!("{name} takes no address (0x7f0000000000)")),
            "{msg}"
        );
    }
    // It is not in the help.
    let help = Cli::command()
        .find_subcommand_mut("pin")
        .unwrap()
        .render_long_help()
        .to_string();
    assert!(!help.contains("ADDRESS"), "{help}");
    assert!(
        help.contains("pins only the calling process's own GPU memory"),
        "{help}"
    );
}

#[test]
fn global_options_go_before_or_after_the_subcommand() {
    for args in [
        &["--device", "/dev/x", "--json", "stats"][..],
        &["stats", "--device", "/dev/x", "--json"],
        &["--json", "stats", "--device=/dev/x"],
    ] {
        let cli = parse(args).unwrap();
        assert!(matches!(cli.command, Command::Stats), "{args:?}");
        assert_eq!(
            (cli.device.as_str(), cli.json),
            ("/dev/x", true),
            "{args:?}"
        );
    }
    let cli = parse(&["doctor", "--json"]).unwrap();
    assert!(cli.json && matches!(cli.command, Command::Doctor { root: None }));
    let cli = parse(&["pin", "--alloc", "4096", "--device", "/dev/y"]).unwrap();
    assert_eq!((cli.device.as_str(), cli.json), ("/dev/y", false));
    let cli = parse(&["gdrdrv-info", "--json", "--path", "/dev/g"]).unwrap();
    assert!(cli.json);
    let cli = parse(&["info"]).unwrap();
    assert_eq!(
        (cli.device.as_str(), cli.json),
        (gdrpeer::DEFAULT_PATH, false)
    );
}

#[test]
fn usage_errors_are_status_2_help_and_version_0() {
    for args in [
        &["--bogus"][..],
        &["stats", "--bogus"],
        &["nonsense"],
        &[],
        &["events"],
        &["stats", "--device"],
        &["pin", "--alloc", "-1"],
    ] {
        let e = parse(args)
            .err()
            .unwrap_or_else(|| panic!("{args:?} parsed"));
        assert_eq!(parse_status(&e), USAGE, "{args:?}");
    }
    for args in [
        &["--help"][..],
        &["stats", "--help"],
        &["--version"],
        &["help", "pin"],
    ] {
        let e = parse(args).err().unwrap();
        assert_eq!(parse_status(&e), 0, "{args:?}");
    }
}

#[test]
fn failures_and_missing_cuda_have_their_status() {
    assert_eq!(CliError::Failed("x".into()).status(), FAILURE);
    assert_eq!(CliError::Usage("x".into()).status(), USAGE);
    let io = std::io::Error::from_raw_os_error(libc::ENOENT);
    assert_eq!(CliError::from(io).status(), FAILURE);
}

/// Serializes `doc`, checks the JSON against `want` (the documented schema), and reads it
/// back into the same value.
fn round_trip<T>(doc: &T, want: serde_json::Value)
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let text = output::pretty(doc);
    let got: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(got, want);
    let back: T = serde_json::from_str(&text).unwrap();
    assert_eq!(&back, doc);
    let back: T = serde_json::from_str(&output::line(doc)).unwrap();
    assert_eq!(&back, doc);
    assert!(!output::line(doc).contains('\n'));
}

#[test]
fn info_and_stats_schemas() {
    round_trip(
        &output::Info {
            version: 1,
            device: "/dev/gdrpeer".into(),
            abi: "1.4".into(),
            library_abi: "1.4".into(),
            nv_page_table: "0x00020000".into(),
            nv_dma_mapping: "0x00020000".into(),
            params: Some([("cache_max_regions".to_string(), 1024)].into()),
        },
        json!({"version": 1, "device": "/dev/gdrpeer", "abi": "1.4", "library_abi": "1.4",
               "nv_page_table": "0x00020000", "nv_dma_mapping": "0x00020000",
               "params": {"cache_max_regions": 1024}}),
    );
    round_trip(
        &output::Info {
            version: 1,
            device: "/d".into(),
            abi: "1.4".into(),
            library_abi: "1.4".into(),
            nv_page_table: "0x00010002".into(),
            nv_dma_mapping: "0x00020000".into(),
            params: None,
        },
        json!({"version": 1, "device": "/d", "abi": "1.4", "library_abi": "1.4",
               "nv_page_table": "0x00010002", "nv_dma_mapping": "0x00020000", "params": null}),
    );
    let c = gdrpeer::CacheStats {
        regions: 1,
        pinned_bytes: 2,
        hits: 3,
        misses: 4,
        evictions_limit: 5,
        evictions_enomem: 6,
        callbacks: 7,
        deferred: 8,
    };
    round_trip(
        &output::Stats {
            version: 1,
            global: counters(&c),
        },
        json!({"version": 1, "global": {"regions": 1, "pinned_bytes": 2, "hits": 3,
               "misses": 4, "evictions_limit": 5, "evictions_enomem": 6, "callbacks": 7,
               "deferred": 8}}),
    );
}

#[test]
fn pin_family_and_dmabuf_schemas() {
    let pin = output::Pin {
        version: 1,
        allocation: Allocation {
            va: Hex(0x7f00_0000_0000),
            size: 131072,
        },
        range: Range {
            va: Hex(0x7f00_0000_0064),
            len: 70000,
        },
        persistent: false,
        handle: 3,
        aligned_va: Hex(0x7f00_0000_0000),
        offset: 100,
        page_count: 2,
        page_size: 65536,
        pages: None,
        peer: None,
        dma_addresses: None,
    };
    let base = json!({"version": 1,
        "allocation": {"va": "0x7f0000000000", "size": 131072},
        "range": {"va": "0x7f0000000064", "len": 70000},
        "persistent": false, "handle": 3, "aligned_va": "0x7f0000000000", "offset": 100,
        "page_count": 2, "page_size": 65536});
    round_trip(&pin, base.clone());
    let pages = output::Pin {
        pages: Some(vec![Hex(0xfe00_0000), Hex(u64::MAX)]),
        ..pin
    };
    let mut want = base.clone();
    want["pages"] = json!(["0xfe000000", "0xffffffffffffffff"]);
    round_trip(&pages, want);
    let dma = output::Pin {
        pages: None,
        peer: Some("0000:3b:00.1".into()),
        dma_addresses: Some(vec![Hex(0x1000)]),
        ..pages
    };
    let mut want = base;
    want["peer"] = json!("0000:3b:00.1");
    want["dma_addresses"] = json!(["0x1000"]);
    round_trip(&dma, want);

    round_trip(
        &output::Dmabuf {
            version: 1,
            allocation: Allocation {
                va: Hex(0x10000),
                size: 196608,
            },
            range: Range {
                va: Hex(0x10064),
                len: 70000,
            },
            fd: 3,
            aligned_va: Hex(0x10000),
            offset: 100,
            page_count: 2,
            size: 131072,
            fdinfo: Some(
                [("size", "131072"), ("exp_name", "gdrpeer")]
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .into(),
            ),
        },
        json!({"version": 1, "allocation": {"va": "0x10000", "size": 196608},
               "range": {"va": "0x10064", "len": 70000}, "fd": 3, "aligned_va": "0x10000",
               "offset": 100, "page_count": 2, "size": 131072,
               "fdinfo": {"size": "131072", "exp_name": "gdrpeer"}}),
    );
}

#[test]
fn gdrdrv_info_and_event_schemas() {
    round_trip(
        &output::GdrdrvInfo {
            version: 1,
            device: "/dev/gdrdrv".into(),
            gdrdrv_version: "2.6".into(),
            minimum_api: "2.0".into(),
            attributes: output::GdrdrvAttributes {
                use_persistent_mapping: 0,
                support_pin_flag_force_pcie: 1,
            },
        },
        json!({"version": 1, "device": "/dev/gdrdrv", "gdrdrv_version": "2.6",
               "minimum_api": "2.0", "attributes": {"use_persistent_mapping": 0,
               "support_pin_flag_force_pcie": 1}}),
    );
    for (e, want) in [
        (
            Event::Watching {
                handle: 1,
                va: Hex(0x200000),
                size: 2097152,
            },
            json!({"version": 1, "event": "watching", "handle": 1, "va": "0x200000",
                   "size": 2097152}),
        ),
        (
            Event::Freed {
                va: Hex(0x200000),
                error: None,
            },
            json!({"version": 1, "event": "freed", "va": "0x200000"}),
        ),
        (
            Event::Freed {
                va: Hex(0x200000),
                error: Some("cuMemFree: CUDA_ERROR_INVALID_VALUE (x)".into()),
            },
            json!({"version": 1, "event": "freed", "va": "0x200000",
                   "error": "cuMemFree: CUDA_ERROR_INVALID_VALUE (x)"}),
        ),
        (
            Event::Revoked { handle: 7 },
            json!({"version": 1, "event": "revoked", "handle": 7}),
        ),
        (
            Event::Unknown { kind: 9, handle: 7 },
            json!({"version": 1, "event": "unknown", "type": 9, "handle": 7}),
        ),
    ] {
        round_trip(&EventLine::new(e), want);
    }
}

#[test]
fn addresses_are_0x_hex_strings() {
    assert!(serde_json::from_str::<Hex>("\"0x10\"").is_ok_and(|h| h == Hex(16)));
    for bad in [
        "\"16\"",
        "16",
        "\"0x\"",
        "\"0xg\"",
        "\"0x10000000000000000\"",
    ] {
        assert!(serde_json::from_str::<Hex>(bad).is_err(), "{bad}");
    }
}

#[test]
fn man_pages_and_completions_are_generated() {
    let top = std::env::temp_dir().join(format!("gdrpeer-generated-{}", std::process::id()));
    generate(&Generate::All { dir: top.clone() }).unwrap();
    for (_, file) in COMPLETIONS {
        let text = std::fs::read_to_string(top.join("completions").join(file)).unwrap();
        assert!(text.contains("dma-map") && text.contains("json"), "{file}");
    }
    let dir = top.join("man");
    let page = std::fs::read_to_string(dir.join("gdrpeer.1")).unwrap();
    assert!(
        page.starts_with(".ie \\n(.g .ds Aq") || page.contains(".TH gdrpeer 1"),
        "{page}"
    );
    assert!(
        page.contains(".SH \"EXIT STATUS\""),
        "no exit statuses in gdrpeer.1"
    );
    assert!(
        page.contains("usage error"),
        "no exit statuses in gdrpeer.1"
    );
    let pin = std::fs::read_to_string(dir.join("gdrpeer-pin.1")).unwrap();
    assert!(
        pin.contains(".SH NOTES") && pin.contains("own GPU memory"),
        "{pin}"
    );
    for sub in [
        "info", "stats", "pin", "pages", "dma-map", "events", "doctor", "dmabuf",
    ] {
        assert!(
            dir.join(format!("gdrpeer-{sub}.1")).is_file(),
            "no gdrpeer-{sub}.1"
        );
    }
    assert!(
        !dir.join("gdrpeer-generate.1").exists(),
        "the hidden generate has a page"
    );
    std::fs::remove_dir_all(&top).unwrap();
}
