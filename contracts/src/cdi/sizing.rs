//! CDI's size arithmetic (`specs/cdi.md` §1.3, §2.6, §2.7) — the one place the filesystem overhead is parsed,
//! formatted and applied, for the controller (PVC and scratch sizes) and the workers (target size).

use crate::quantity::MIB;

/// Filesystem overhead as `CDIConfig` spells it (`0`, `0.06`, `1`): a fraction in `[0, 1]`; anything else is
/// `None` (the caller falls back to the next setting).
pub fn parse_config_overhead(s: &str) -> Option<f64> {
    let v: f64 = s.trim().parse().ok()?;
    (0.0..=1.0).contains(&v).then_some(v)
}

/// `FILESYSTEM_OVERHEAD` as CDI's workers read it: absent means 0, else a fraction in `[0, 1)`. The error is the
/// detail for the caller's "invalid variable" message.
pub fn parse_worker_overhead(value: Option<&str>) -> Result<f64, String> {
    match value {
        None => Ok(0.0),
        Some(v) => v
            .parse::<f64>()
            .ok()
            .filter(|o| (0.0..1.0).contains(o))
            .ok_or_else(|| format!("{v:?} (a fraction in [0, 1))")),
    }
}

/// An overhead as CDI writes it: at most three decimals, no trailing zeros (`0.06`, `0.055`, `0`).
pub fn format_overhead(o: f64) -> String {
    let s = format!("{o:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.is_empty() { "0".into() } else { s.to_owned() }
}

/// `GetRequiredSpace(o, req) = ceil(roundUp(req, 1MiB) × (1+o))`: the PVC size that leaves `req` usable bytes on a
/// filesystem with overhead `o`. Exact for CDI's three-decimal overheads (integer arithmetic in per mille).
pub fn required_space(overhead: f64, requested: u64) -> u64 {
    let rounded = u128::from(requested.div_ceil(MIB) * MIB);
    let per_mille = (overhead * 1000.0).round() as u128;
    u64::try_from((rounded * (1000 + per_mille)).div_ceil(1000)).unwrap_or(u64::MAX)
}

/// `GetUsableSpace(o, avail) = roundDown(ceil(avail / (1+o)), 1MiB)`, in floating point as CDI computes it: the
/// image size a volume of `available` bytes holds.
pub fn usable_space(overhead: f64, available: u64) -> u64 {
    let v = (available as f64 / (1.0 + overhead)).ceil() as u64;
    v / MIB * MIB
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overhead_arithmetic_matches_cdi() {
        // 500Mi with 6 % overhead: ceil(500Mi × 1.06) = 555745280.
        assert_eq!(required_space(0.06, 500 * MIB), 555_745_280);
        // Requests are first rounded up to a MiB.
        assert_eq!(required_space(0.0, 1), MIB);
        assert_eq!(usable_space(0.06, 555_745_280), 500 * MIB);
        assert_eq!(usable_space(0.0, 3 * MIB + 5), 3 * MIB);
        // 1 GiB with 5.5% overhead: ceil(2^30 / 1.055) = 1017764763 → rounded down to 970 MiB.
        assert_eq!(usable_space(0.055, 1 << 30), 970 * MIB);
        assert_eq!(usable_space(0.0, (5 << 20) + 7), 5 * MIB);
    }

    #[test]
    fn overheads_parse_and_format_as_cdi_spells_them() {
        assert_eq!(parse_config_overhead("0.06"), Some(0.06));
        assert_eq!(parse_config_overhead("1"), Some(1.0));
        assert_eq!(parse_config_overhead("1.5"), None);
        assert_eq!(parse_config_overhead("x"), None);
        assert_eq!(parse_worker_overhead(None), Ok(0.0));
        assert_eq!(parse_worker_overhead(Some("0.055")), Ok(0.055));
        assert!(parse_worker_overhead(Some("1")).is_err());
        assert!(parse_worker_overhead(Some("-0.1")).is_err());
        assert_eq!(format_overhead(0.06), "0.06");
        assert_eq!(format_overhead(0.0), "0");
        assert_eq!(format_overhead(0.055), "0.055");
    }
}
