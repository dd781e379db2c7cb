//! Kubernetes resource quantities as byte counts: the one quantity parser of the workspace (the controllers read
//! PVC sizes with it, the workers their `*_IMAGE_SIZE` variables).
//!
//! Written here rather than taken from a crate: k8s-openapi's `Quantity` is an opaque string, and the only
//! operation needed is parse-to-bytes, exact and rounded up like Kubernetes' `Quantity.Value()`.

/// One MiB (CDI's size rounding unit).
pub const MIB: u64 = 1 << 20;

/// A quantity string that is not valid.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid quantity {0:?}")]
pub struct InvalidQuantity(pub String);

/// Parses a quantity (`500Mi`, `1G`, `1.5Gi`, `1e9`, `1073741824`, `100m`) into bytes, rounding fractions up.
/// Exact (integer arithmetic); a value beyond `u64` is invalid.
pub fn parse_bytes(q: &str) -> Result<u64, InvalidQuantity> {
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
    u64::try_from(scaled.div_ceil(div)).map_err(|_| bad())
}

/// A quantity as written (`1Gi`, `555745280`) together with its byte count: values that travel as text (a PVC
/// request copied into a worker's environment) keep their spelling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ByteQuantity {
    text: String,
    bytes: u64,
}

impl ByteQuantity {
    /// Parses `q` (see [`parse_bytes`]); the text is kept as given.
    pub fn parse(q: &str) -> Result<ByteQuantity, InvalidQuantity> {
        Ok(ByteQuantity { bytes: parse_bytes(q)?, text: q.to_owned() })
    }

    /// The text as given.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The value in bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
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
        assert_eq!(parse_bytes("500M"), Ok(500_000_000));
        assert_eq!(parse_bytes("2048"), Ok(2048));
        for bad in ["", "Mi", "-1Gi", "12xx", "1.2.3", "1e", "1Zi", "1Xi", "20Ei"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
    }
}
