// SPDX-License-Identifier: GPL-2.0

//! The errno tables of the user documentation, keyed by row name, as the tests read them.
//!
//! Two tables are checked against the code: the bad-input table of
//! Documentation/user/uapi.rst (`gdrpeer-bad-input-table`, every row against the running
//! module) and the table of NVIDIA's answers in Documentation/user/security.rst ("Checks of
//! what NVIDIA returns": `gdrpeer-table-version-checked` for the row nvsim can produce, the
//! host test below for the others, against the checks' source). Any other page may quote a
//! row, in a table whose first column is `Row` or as "row ``name``: ``ERRNO``"; the host test
//! `doc_errnos` fails when a quote names no checked row or gives another errno.

use rustix::io::Errno;

/// Documentation/user/uapi.rst, built into the test program (the guest has no source tree).
pub const UAPI_RST: &str = include_str!("../../../Documentation/user/uapi.rst");
/// Documentation/user/security.rst, likewise.
pub const SECURITY_RST: &str = include_str!("../../../Documentation/user/security.rst");

/// The section of uapi.rst with the bad-input table.
pub const BAD_INPUT: &str = "Bad input";
/// The section of security.rst with the table of NVIDIA's answers.
pub const NVIDIA_CHECKS: &str = "Checks of what NVIDIA returns";

/// The rows of a keyed table (header `Row ... errno`) from its first line on: (row, errno).
fn table_rows<'a>(
    mut lines: impl Iterator<Item = &'a str>,
) -> Result<Vec<(String, String)>, String> {
    // The header line is followed by a rule; the body ends at the closing rule.
    lines.next();
    lines.next();
    let mut rows = Vec::new();
    for line in lines.take_while(|l| !l.starts_with("===")) {
        let Some(rest) = line.strip_prefix("``") else {
            continue;
        };
        let Some((row, rest)) = rest.split_once("``") else {
            continue;
        };
        let errno = rest
            .trim_end()
            .strip_suffix("``")
            .and_then(|r| r.rsplit_once("``"))
            .map(|(_, e)| e.to_string())
            .filter(|e| e.starts_with('E'))
            .ok_or_else(|| format!("row {row}: no errno at the end of its line"))?;
        rows.push((row.to_string(), errno));
    }
    Ok(rows)
}

/// The rows of the keyed table in section `section` of `doc`: (row, errno name).
pub fn rows(doc: &str, section: &str) -> Result<Vec<(String, String)>, String> {
    let lines: Vec<&str> = doc.lines().collect();
    let at = lines
        .windows(2)
        .position(|w| {
            w[0] == section
                && w[1].len() == section.len()
                && (w[1].bytes().all(|b| b == b'=') || w[1].bytes().all(|b| b == b'-'))
        })
        .ok_or_else(|| format!("no section \"{section}\""))?;
    let header = lines[at + 2..]
        .iter()
        .position(|l| l.starts_with("Row "))
        .ok_or_else(|| format!("section \"{section}\" has no Row table"))?;
    let rows = table_rows(lines[at + 2 + header..].iter().copied())?;
    if rows.is_empty() {
        return Err(format!("the table of \"{section}\" has no rows"));
    }
    Ok(rows)
}

/// The errno a row of a section gives.
pub fn row_errno(doc: &str, section: &str, row: &str) -> Result<Errno, String> {
    let name = rows(doc, section)?
        .into_iter()
        .find(|(r, _)| r == row)
        .map(|(_, e)| e)
        .ok_or_else(|| format!("\"{section}\" has no row {row}"))?;
    errno_of(&name).ok_or_else(|| format!("row {row}: unknown errno {name}"))
}

const NAMES: &[(Errno, &str)] = &[
    (Errno::ACCESS, "EACCES"),
    (Errno::INVAL, "EINVAL"),
    (Errno::FAULT, "EFAULT"),
    (Errno::NOSPC, "ENOSPC"),
    (Errno::PERM, "EPERM"),
    (Errno::NODEV, "ENODEV"),
    (Errno::NXIO, "ENXIO"),
    (Errno::NOTTY, "ENOTTY"),
    (Errno::NOENT, "ENOENT"),
    (Errno::OPNOTSUPP, "EOPNOTSUPP"),
    (Errno::NOMEM, "ENOMEM"),
    (Errno::IO, "EIO"),
];

/// The name the tables give `e`.
pub fn errno_name(e: Errno) -> String {
    NAMES.iter().find(|(n, _)| *n == e).map_or_else(
        || format!("errno {}", e.raw_os_error()),
        |(_, s)| s.to_string(),
    )
}

/// The errno a table's name stands for.
pub fn errno_of(name: &str) -> Option<Errno> {
    NAMES.iter().find(|(_, s)| *s == name).map(|(e, _)| *e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::path::Path;

    /// Every row a page quotes: the rows of each table headed `Row`, and each "row ``name``:
    /// ``ERRNO``" of its text (line breaks taken as spaces). (row, errno, where).
    pub fn quoted(doc: &str) -> Result<Vec<(String, String, String)>, String> {
        let mut out = Vec::new();
        let lines: Vec<&str> = doc.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            if l.starts_with("Row ") && i > 0 && lines[i - 1].starts_with("===") {
                for (row, e) in table_rows(lines[i..].iter().copied())? {
                    out.push((row, e, format!("table at line {}", i + 1)));
                }
            }
        }
        let text = doc.split_whitespace().collect::<Vec<_>>().join(" ");
        let mut rest = text.as_str();
        while let Some(at) = rest.find("row ``") {
            rest = &rest[at + "row ``".len()..];
            let Some((row, after)) = rest.split_once("``") else {
                break;
            };
            if let Some(e) = after.strip_prefix(": ``").and_then(|a| a.split_once("``")) {
                out.push((
                    row.to_string(),
                    e.0.to_string(),
                    format!("text \"row ``{row}``\""),
                ));
            }
        }
        Ok(out)
    }

    /// The rows of the security table nvsim cannot produce, each checked against the source
    /// of the check: the kernel-log line the row quotes, then the error the check returns
    /// right after printing it. (row, file, the log line's start.)
    const BY_SOURCE: &[(&str, &str, &str)] = &[
        ("table-page-size", "nv_p2p/desktop.rs", "nv-p2p page size"),
        (
            "table-entry-count",
            "nv_p2p/desktop.rs",
            "nv-p2p page table has",
        ),
        (
            "dma-map-version",
            "nv_p2p/desktop.rs",
            "nv-p2p DMA mapping version",
        ),
        (
            "dma-map-page-size",
            "nv_p2p/desktop.rs",
            "nv-p2p DMA mapping page size",
        ),
        (
            "dma-map-entry-count",
            "nv_p2p/desktop.rs",
            "nv-p2p DMA mapping has",
        ),
    ];
    /// The rows checked against the running module in the guest.
    const IN_GUEST: &[&str] = &["table-version-major"];

    fn root() -> &'static Path {
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
    }

    /// The error `src/FILE` returns after the log line starting with `log`: the first
    /// `return Err(...)` after it, by name.
    fn source_errno(file: &str, log: &str) -> Result<String, String> {
        let path = root().join("src").join(file);
        let src = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let at = src
            .find(&format!("\"{log}"))
            .ok_or_else(|| format!("src/{file} prints no \"{log}...\""))?;
        let ret = src[at..]
            .find("return Err(")
            .ok_or_else(|| format!("src/{file}: no return Err after \"{log}\""))?;
        let expr = &src[at + ret + "return Err(".len()..];
        let expr = &expr[..expr.find(");").unwrap_or(expr.len())];
        Ok(match expr.trim() {
            "sys::eopnotsupp()" => "EOPNOTSUPP".into(),
            e if e.starts_with('E') && e.bytes().all(|b| b.is_ascii_uppercase()) => e.into(),
            e => {
                return Err(format!(
                    "src/{file}: \"{log}\" returns {e}, which is no errno name"
                ))
            }
        })
    }

    /// The checked rows, by name: every row of the two checked tables, once.
    fn checked() -> BTreeMap<String, String> {
        let mut all = BTreeMap::new();
        for (doc, section) in [(UAPI_RST, BAD_INPUT), (SECURITY_RST, NVIDIA_CHECKS)] {
            for (row, e) in rows(doc, section).unwrap() {
                assert!(
                    errno_of(&e).is_some(),
                    "{section}: row {row}: unknown errno {e}"
                );
                assert!(
                    all.insert(row.clone(), e).is_none(),
                    "row {row} is in two tables"
                );
            }
        }
        all
    }

    /// Each row of security.rst's table has its oracle, and the rows checked by source give
    /// what the source returns.
    #[test]
    fn nvidia_checks_match_the_source() {
        let rows = rows(SECURITY_RST, NVIDIA_CHECKS).unwrap();
        let mut wrong = Vec::new();
        for (row, want) in &rows {
            if IN_GUEST.contains(&row.as_str()) {
                continue;
            }
            let Some((_, file, log)) = BY_SOURCE.iter().find(|(r, _, _)| r == row) else {
                wrong.push(format!("{row}: neither checked in the guest nor by source"));
                continue;
            };
            match source_errno(file, log) {
                Ok(got) if got == *want => {}
                Ok(got) => wrong.push(format!(
                    "{row}: src/{file} returns {got}, the table says {want}"
                )),
                Err(e) => wrong.push(format!("{row}: {e}")),
            }
        }
        for (row, _, _) in BY_SOURCE {
            if !rows.iter().any(|(r, _)| r == row) {
                wrong.push(format!("{row}: checked by source but not in the table"));
            }
        }
        assert_eq!(wrong, Vec::<String>::new());
    }

    /// Every row any user page quotes is a checked row, with the checked errno.
    #[test]
    fn doc_errnos() {
        let checked = checked();
        let dir = root().join("Documentation/user");
        let mut pages: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "rst"))
            .collect();
        pages.sort();
        let mut wrong = Vec::new();
        let mut seen = 0;
        for page in &pages {
            let text = std::fs::read_to_string(page).unwrap();
            let name = page.file_name().unwrap().to_string_lossy().into_owned();
            for (row, e, at) in quoted(&text).unwrap_or_else(|err| panic!("{name}: {err}")) {
                seen += 1;
                match checked.get(&row) {
                    None => wrong.push(format!("{name}, {at}: {row} is no checked row")),
                    Some(want) if *want != e => wrong.push(format!(
                        "{name}, {at}: {row} is {e}, the checked table says {want}"
                    )),
                    Some(_) => {}
                }
            }
        }
        // The troubleshooting page's table is read: a parse that found nothing is a failure.
        let ts = std::fs::read_to_string(dir.join("troubleshooting.rst")).unwrap();
        assert!(
            rows(&ts, "Errors of the calls").unwrap().len() >= 10,
            "troubleshooting.rst: its errno table was not read"
        );
        assert!(seen > checked.len(), "too few quoted rows: {seen}");
        assert_eq!(wrong, Vec::<String>::new());
    }

    #[test]
    fn quotes_are_found() {
        let doc = "x (row ``a-b``: ``EINVAL`` for\nothers), rows ``c``, ``d``; row ``e``:\n``ENXIO``.\n\n\
                   ===== ====\nRow   errno\n===== ====\n``f``  ``EIO``\n===== ====\n";
        let q: Vec<_> = quoted(doc)
            .unwrap()
            .into_iter()
            .map(|(r, e, _)| (r, e))
            .collect();
        let want = [("f", "EIO"), ("a-b", "EINVAL"), ("e", "ENXIO")];
        assert_eq!(
            q,
            want.iter()
                .map(|(r, e)| (r.to_string(), e.to_string()))
                .collect::<Vec<_>>()
        );
    }
}
