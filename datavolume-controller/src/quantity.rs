//! Kubernetes resource quantities as byte counts, and CDI's size arithmetic (`specs/cdi.md` §1.3, §2.7).
//!
//! Written here rather than taken from a crate: k8s-openapi's `Quantity` is an opaque string, and the only
//! operations needed are parse-to-bytes (rounded up, like `Quantity.Value()`) and CDI's overhead formulas.

/// One MiB, CDI's size rounding unit.
pub const MIB: u128 = 1 << 20;

/// A quantity string that is not valid.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid quantity {0:?}")]
pub struct InvalidQuantity(pub String);

/// Parses a quantity (`500Mi`, `1G`, `1.5Gi`, `1e9`, `1073741824`, `100m`) into bytes, rounding fractions up.
pub fn parse_bytes(q: &str) -> Result<u128, InvalidQuantity> {
    let bad = || InvalidQuantity(q.to_owned());
    let s = q.trim();
    let num_end = s.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-')).unwrap_or(s.len());
    let (num, suffix) = s.split_at(num_end);
    let num = num.strip_prefix('+').unwrap_or(num);
    if num.is_empty() || num.starts_with('-') {
        return Err(bad());
    }
    let (int_part, frac_part) = num.split_once('.').unwrap_or((num, ""));
    if !int_part.chars().chain(frac_part.chars()).all(|c| c.is_ascii_digit())
        || (int_part.is_empty() && frac_part.is_empty())
    {
        return Err(bad());
    }
    // value = digits / 10^frac_len * multiplier
    let digits: u128 = format!("{int_part}{frac_part}").parse().map_err(|_| bad())?;
    let frac_len = u32::try_from(frac_part.len()).map_err(|_| bad())?;
    let (mul, div_pow10): (u128, u32) = match suffix {
        "" => (1, 0),
        "Ki" => (1 << 10, 0),
        "Mi" => (1 << 20, 0),
        "Gi" => (1 << 30, 0),
        "Ti" => (1 << 40, 0),
        "Pi" => (1 << 50, 0),
        "Ei" => (1 << 60, 0),
        "m" => (1, 3),
        "k" => (1_000, 0),
        "M" => (1_000_000, 0),
        "G" => (1_000_000_000, 0),
        "T" => (1_000_000_000_000, 0),
        "P" => (1_000_000_000_000_000, 0),
        "E" => (1_000_000_000_000_000_000, 0),
        e if e.starts_with(['e', 'E']) => {
            let exp: i32 = e[1..].parse().map_err(|_| bad())?;
            if exp >= 0 {
                (10u128.checked_pow(u32::try_from(exp).map_err(|_| bad())?).ok_or_else(bad)?, 0)
            } else {
                (1, exp.unsigned_abs())
            }
        }
        _ => return Err(bad()),
    };
    let div = 10u128.checked_pow(frac_len + div_pow10).ok_or_else(bad)?;
    let scaled = digits.checked_mul(mul).ok_or_else(bad)?;
    Ok(scaled.div_ceil(div))
}

/// Overhead fraction parsed from CDI's decimal string (`0`, `0.06`, `1`); invalid strings give `None`.
pub fn parse_overhead(s: &str) -> Option<f64> {
    let v: f64 = s.trim().parse().ok()?;
    (0.0..=1.0).contains(&v).then_some(v)
}

/// `GetRequiredSpace(o, req) = ceil(roundUp(req, 1MiB) × (1+o))`: the PVC size that leaves `req` usable bytes on
/// a filesystem with overhead `o`.
pub fn required_space(overhead: f64, requested: u128) -> u128 {
    let rounded = requested.div_ceil(MIB) * MIB;
    // Exact for the overhead's three decimals: scale by 1000 in integers.
    let per_mille = (overhead * 1000.0).round() as u128;
    (rounded * (1000 + per_mille)).div_ceil(1000)
}

/// `GetUsableSpace(o, avail) = roundDown(ceil(avail / (1+o)), 1MiB)`.
pub fn usable_space(overhead: f64, available: u128) -> u128 {
    let per_mille = (overhead * 1000.0).round() as u128;
    let usable = (available * 1000).div_ceil(1000 + per_mille);
    usable / MIB * MIB
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_suffix_form() {
        assert_eq!(parse_bytes("500Mi"), Ok(500 * MIB));
        assert_eq!(parse_bytes("1G"), Ok(1_000_000_000));
        assert_eq!(parse_bytes("1.5Gi"), Ok(3 << 29));
        assert_eq!(parse_bytes("1e9"), Ok(1_000_000_000));
        assert_eq!(parse_bytes("1073741824"), Ok(1 << 30));
        assert_eq!(parse_bytes("1500m"), Ok(2));
        assert_eq!(parse_bytes("0.1"), Ok(1));
        assert_eq!(parse_bytes("+2Ki"), Ok(2048));
        for bad in ["", "Mi", "-1Gi", "12xx", "1.2.3", "1e", "1Zi"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn overhead_arithmetic_matches_cdi() {
        // 500Mi with 6 % overhead: ceil(500Mi × 1.06) = 555745280.
        assert_eq!(required_space(0.06, 500 * MIB), 555_745_280);
        // Requests are first rounded up to a MiB.
        assert_eq!(required_space(0.0, 1), MIB);
        assert_eq!(usable_space(0.06, 555_745_280), 500 * MIB);
        assert_eq!(usable_space(0.0, 3 * MIB + 5), 3 * MIB);
        assert_eq!(parse_overhead("0.06"), Some(0.06));
        assert_eq!(parse_overhead("1.5"), None);
        assert_eq!(parse_overhead("x"), None);
    }
}
