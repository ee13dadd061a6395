// SPDX-License-Identifier: GPL-2.0

//! PCI addresses, written and parsed as lspci does.

use std::{fmt, str::FromStr};

/// A PCI function, named as DMA_MAP takes its peer.
///
/// ```
/// let nic: gdrpeer::PciAddress = "0000:3b:00.1".parse().unwrap();
/// assert_eq!((nic.bus, nic.slot(), nic.function()), (0x3b, 0, 1));
/// assert_eq!(nic.to_string(), "0000:3b:00.1");
/// assert!("3b:00".parse::<gdrpeer::PciAddress>().is_err());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PciAddress {
    /// PCI domain (segment).
    pub domain: u32,
    /// Bus number.
    pub bus: u8,
    /// `slot << 3 | function`, as `PCI_DEVFN` makes it.
    pub devfn: u8,
}

impl PciAddress {
    /// The device (slot) number, 0 to 0x1f.
    pub fn slot(&self) -> u8 {
        self.devfn >> 3
    }

    /// The function number, 0 to 7.
    pub fn function(&self) -> u8 {
        self.devfn & 7
    }
}

/// Writes `DDDD:BB:DD.F` in hex, like `lspci -D`.
impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain,
            self.bus,
            self.slot(),
            self.function()
        )
    }
}

/// A string that is not a PCI address.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bad PCI address {input:?}: {reason} (expected DDDD:BB:DD.F or BB:DD.F in hex, as lspci writes it)")]
pub struct ParsePciAddressError {
    input: String,
    reason: &'static str,
}

/// Parses `DDDD:BB:DD.F` or `BB:DD.F` (domain 0), all in hex.
impl FromStr for PciAddress {
    type Err = ParsePciAddressError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason| ParsePciAddressError {
            input: s.to_owned(),
            reason,
        };
        let parts: Vec<&str> = s.split(':').collect();
        let (domain, bus, slot_function) = match parts[..] {
            [domain, bus, rest] => (
                hex(domain, u32::MAX)
                    .ok_or_else(|| err("the domain is not a hex number up to ffffffff"))?,
                bus,
                rest,
            ),
            [bus, rest] => (0, bus, rest),
            _ => return Err(err("wrong number of ':'")),
        };
        let bus = hex(bus, 0xff).ok_or_else(|| err("the bus is not a hex number up to ff"))?;
        let (slot, function) = slot_function
            .split_once('.')
            .ok_or_else(|| err("no '.' before the function"))?;
        let slot = hex(slot, 0x1f).ok_or_else(|| err("the device is not a hex number up to 1f"))?;
        let function =
            hex(function, 7).ok_or_else(|| err("the function is not a hex digit up to 7"))?;
        Ok(PciAddress {
            domain,
            bus: bus as u8,
            devfn: (slot << 3 | function) as u8,
        })
    }
}

/// `s` as a hex number of at most eight digits and at most `max`; no sign, no prefix.
fn hex(s: &str, max: u32) -> Option<u32> {
    if s.is_empty() || s.len() > 8 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(s, 16).ok().filter(|&v| v <= max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pci(domain: u32, bus: u8, slot: u8, function: u8) -> PciAddress {
        PciAddress {
            domain,
            bus,
            devfn: slot << 3 | function,
        }
    }

    #[test]
    fn parses_lspci_forms() {
        for (s, want) in [
            ("0000:3b:00.0", pci(0, 0x3b, 0, 0)),
            ("3b:00.0", pci(0, 0x3b, 0, 0)),
            ("0001:ff:1f.7", pci(1, 0xff, 0x1f, 7)),
            ("10000:01:02.3", pci(0x10000, 1, 2, 3)),
            ("ABCD:Ef:1F.7", pci(0xabcd, 0xef, 0x1f, 7)),
            ("0:0:0.0", pci(0, 0, 0, 0)),
        ] {
            assert_eq!(s.parse::<PciAddress>(), Ok(want), "{s}");
        }
    }

    #[test]
    fn displays_as_lspci_and_round_trips() {
        let a = pci(0x1a, 0x3b, 0x1e, 5);
        assert_eq!(a.to_string(), "001a:3b:1e.5");
        assert_eq!(a.to_string().parse(), Ok(a));
        assert_eq!((a.slot(), a.function()), (0x1e, 5));
    }

    #[test]
    fn rejects_what_is_not_a_pci_address() {
        for (s, reason) in [
            ("", "wrong number of ':'"),
            ("3b", "wrong number of ':'"),
            ("0:0:3b:00.0", "wrong number of ':'"),
            ("3b:00", "no '.' before the function"),
            ("3b:20.0", "the device is not a hex number up to 1f"),
            ("3b:00.8", "the function is not a hex digit up to 7"),
            ("3b:00.", "the function is not a hex digit up to 7"),
            ("100:00.0", "the bus is not a hex number up to ff"),
            ("+3b:00.0", "the bus is not a hex number up to ff"),
            ("3g:00.0", "the bus is not a hex number up to ff"),
            (
                "123456789:00:00.0",
                "the domain is not a hex number up to ffffffff",
            ),
            (":00:00.0", "the domain is not a hex number up to ffffffff"),
            (" 3b:00.0", "the bus is not a hex number up to ff"),
        ] {
            let err = s.parse::<PciAddress>().unwrap_err();
            assert_eq!(err.reason, reason, "{s:?}");
            assert_eq!(
                err.to_string(),
                format!(
                    "bad PCI address {s:?}: {reason} \
                     (expected DDDD:BB:DD.F or BB:DD.F in hex, as lspci writes it)"
                )
            );
        }
    }
}
