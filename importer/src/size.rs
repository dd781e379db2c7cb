//! Size arguments: plain bytes, binary suffixes (`Ki`, `Mi`, `Gi`, `Ti`, and qemu-style `K`, `M`, `G`,
//! `T` meaning the same) and decimal SI suffixes in Kubernetes quantity form (`k`, `M` is ambiguous: we
//! follow qemu-img, where `M` is MiB; Kubernetes quantities like `1Gi` work as written).

/// Parses a size such as `1073741824`, `10G`, `10Gi`, `512M`, `1.5G`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    if num.is_empty() {
        return Err(format!("invalid size {s:?}"));
    }
    let mult: u64 = match suffix.trim() {
        "" | "B" | "b" => 1,
        "k" | "K" | "Ki" | "KiB" | "KB" => 1 << 10,
        "M" | "Mi" | "MiB" | "MB" => 1 << 20,
        "G" | "Gi" | "GiB" | "GB" => 1 << 30,
        "T" | "Ti" | "TiB" | "TB" => 1 << 40,
        "P" | "Pi" | "PiB" | "PB" => 1 << 50,
        other => return Err(format!("invalid size suffix {other:?} in {s:?}")),
    };
    if let Ok(n) = num.parse::<u64>() {
        return n.checked_mul(mult).ok_or_else(|| format!("size {s:?} overflows"));
    }
    let f: f64 = num.parse().map_err(|_| format!("invalid size {s:?}"))?;
    let v = f * mult as f64;
    if !v.is_finite() || v < 0.0 || v >= u64::MAX as f64 {
        return Err(format!("size {s:?} out of range"));
    }
    Ok(v.ceil() as u64)
}

/// Parses a Kubernetes quantity (`1Gi`, `500M` = 500×10⁶, `1.5Gi`, `1e9`, `2048`) into bytes, rounding up.
pub fn parse_quantity(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic() && c != 'e' && c != 'E').unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    let mult: f64 = match suffix {
        "" => 1.0,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "m" => 1e-3,
        other => return Err(format!("invalid quantity suffix {other:?} in {s:?}")),
    };
    if let Ok(n) = num.parse::<u64>()
        && mult >= 1.0
        && mult.fract() == 0.0
    {
        return n.checked_mul(mult as u64).ok_or_else(|| format!("quantity {s:?} overflows"));
    }
    let f: f64 = num.parse().map_err(|_| format!("invalid quantity {s:?}"))?;
    let v = (f * mult).ceil();
    if !v.is_finite() || v < 0.0 || v >= u64::MAX as f64 {
        return Err(format!("quantity {s:?} out of range"));
    }
    Ok(v as u64)
}

#[cfg(test)]
mod tests {
    use super::{parse_quantity, parse_size};

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity("1Gi"), Ok(1 << 30));
        assert_eq!(parse_quantity("500M"), Ok(500_000_000));
        assert_eq!(parse_quantity("1.5Gi"), Ok(3 << 29));
        assert_eq!(parse_quantity("1e9"), Ok(1_000_000_000));
        assert_eq!(parse_quantity("2048"), Ok(2048));
        assert_eq!(parse_quantity("1500m"), Ok(2));
        assert!(parse_quantity("1Xi").is_err());
        assert!(parse_quantity("").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("123"), Ok(123));
        assert_eq!(parse_size("1K"), Ok(1024));
        assert_eq!(parse_size("10Gi"), Ok(10 << 30));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert!(parse_size("G").is_err());
        assert!(parse_size("1X").is_err());
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size("20000000P").is_err());
    }
}
