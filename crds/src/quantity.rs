//! Kubernetes resource quantities the way upstream's Go code sees them (`k8s.io/apimachinery/pkg/api/resource`):
//! parsed exactly, compared, rounded up to integers (`Value()`, `MilliValue()`), and written in Go's canonical form
//! (`String()`), which upstream's messages print and upstream's mutator writes back (`1.5Gi` → `1536Mi`, `1000` →
//! `1k`, `0.5` → `500m`).
//!
//! Values are kept in nano-units (Kubernetes' finest precision; finer fractions round up) in an `i128`, which holds
//! every quantity up to far beyond `Ei`. `contracts::quantity` parses byte counts for the storage half; this one
//! also needs negative values (upstream refuses them with their canonical text), milli-CPUs and the format.

use std::cmp::Ordering;
use std::fmt;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

/// Go's `resource.ErrFormatWrong`: what the API server's clients get for an unparseable quantity.
pub const ERR_FORMAT_WRONG: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

const NANO: i128 = 1_000_000_000;

/// A quantity string that cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{ERR_FORMAT_WRONG}")]
pub struct InvalidQuantity(pub String);

/// How a quantity is written (Go's `resource.Format`): chosen by the suffix it was parsed with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `Ki`, `Mi`, `Gi`, … (powers of 1024).
    BinarySi,
    /// `m`, ``, `k`, `M`, `G`, … (powers of 1000), also plain numbers.
    DecimalSi,
    /// `e3`, `E6`, … (powers of ten).
    DecimalExponent,
}

/// A parsed quantity: exact value (in nano-units) and format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    nanos: i128,
    format: Format,
}

impl Quantity {
    /// Zero (what Go's accessors return for an absent resource).
    pub const ZERO: Quantity = Quantity { nanos: 0, format: Format::DecimalSi };

    /// Parses a quantity as Go's `ParseQuantity` does (`128Mi`, `1.5G`, `500m`, `-1`, `1e3`).
    pub fn parse(s: &str) -> Result<Quantity, InvalidQuantity> {
        let bad = || InvalidQuantity(s.to_owned());
        let t = s.trim();
        let (negative, rest) = match t.as_bytes().first() {
            Some(b'-') => (true, &t[1..]),
            Some(b'+') => (false, &t[1..]),
            _ => (false, t),
        };
        let num_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (num, suffix) = rest.split_at(num_end);
        let (int_part, frac_part) = num.split_once('.').unwrap_or((num, ""));
        if (int_part.is_empty() && frac_part.is_empty()) || frac_part.contains('.') {
            return Err(bad());
        }
        let digits: i128 = format!("{int_part}{frac_part}").parse().map_err(|_| bad())?;
        let frac_len = u32::try_from(frac_part.len()).map_err(|_| bad())?;
        // value = digits * 10^-frac_len * (1024^bin | 10^dec)
        let (format, bin, dec): (Format, u32, i32) = match suffix {
            "" => (Format::DecimalSi, 0, 0),
            "n" => (Format::DecimalSi, 0, -9),
            "u" => (Format::DecimalSi, 0, -6),
            "m" => (Format::DecimalSi, 0, -3),
            "k" => (Format::DecimalSi, 0, 3),
            "M" => (Format::DecimalSi, 0, 6),
            "G" => (Format::DecimalSi, 0, 9),
            "T" => (Format::DecimalSi, 0, 12),
            "P" => (Format::DecimalSi, 0, 15),
            "E" => (Format::DecimalSi, 0, 18),
            "Ki" => (Format::BinarySi, 1, 0),
            "Mi" => (Format::BinarySi, 2, 0),
            "Gi" => (Format::BinarySi, 3, 0),
            "Ti" => (Format::BinarySi, 4, 0),
            "Pi" => (Format::BinarySi, 5, 0),
            "Ei" => (Format::BinarySi, 6, 0),
            e if e.starts_with(['e', 'E']) && e.len() > 1 => {
                (Format::DecimalExponent, 0, e[1..].parse::<i32>().map_err(|_| bad())?)
            }
            _ => return Err(bad()),
        };
        let mut value = digits.checked_mul(1024i128.checked_pow(bin).ok_or_else(bad)?).ok_or_else(bad)?;
        // Scale to nanos: multiply by 10^(dec + 9 - frac_len), rounding up when that is a division.
        let shift = dec + 9 - i32::try_from(frac_len).map_err(|_| bad())?;
        if shift >= 0 {
            let m = 10i128.checked_pow(shift.unsigned_abs()).ok_or_else(bad)?;
            value = value.checked_mul(m).ok_or_else(bad)?;
        } else {
            let d = 10i128.checked_pow(shift.unsigned_abs()).ok_or_else(bad)?;
            value = value.div_euclid(d) + i128::from(value.rem_euclid(d) != 0);
        }
        Ok(Quantity { nanos: if negative { -value } else { value }, format })
    }

    /// The quantity `value` (an integer) written in `format` (Go's `resource.NewQuantity`).
    pub fn from_value(value: i64, format: Format) -> Quantity {
        Quantity { nanos: i128::from(value) * NANO, format }
    }

    /// Parses a Kubernetes API quantity.
    pub fn of(q: &K8sQuantity) -> Result<Quantity, InvalidQuantity> {
        Quantity::parse(&q.0)
    }

    /// Parses an optional API quantity; absent or unparseable is zero (as Go's accessors on a map without the key;
    /// unparseable ones are refused before this is used, see [`ERR_FORMAT_WRONG`]).
    pub fn or_zero(q: Option<&K8sQuantity>) -> Quantity {
        q.and_then(|q| Quantity::of(q).ok()).unwrap_or(Quantity::ZERO)
    }

    /// The format it was parsed with.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Whether the value is zero.
    pub fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    /// The value rounded up to an integer (Go's `Value()`).
    pub fn value(&self) -> i64 {
        saturate(ceil_div(self.nanos, NANO))
    }

    /// The value in thousandths, rounded up (Go's `MilliValue()`).
    pub fn milli_value(&self) -> i64 {
        saturate(ceil_div(self.nanos, 1_000_000))
    }

    /// Go's canonical string (`String()`): the shortest exact form in the quantity's format.
    pub fn canonical(&self) -> String {
        if self.nanos == 0 {
            return "0".into();
        }
        let integral = self.nanos % NANO == 0;
        let format = match self.format {
            Format::BinarySi if self.nanos.abs() < 1024 * NANO || !integral => Format::DecimalSi,
            f => f,
        };
        match format {
            Format::BinarySi => {
                let (mut amount, mut exp) = (self.nanos / NANO, 0usize);
                while amount % 1024 == 0 && exp < 6 {
                    amount /= 1024;
                    exp += 1;
                }
                format!("{amount}{}", ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][exp])
            }
            Format::DecimalSi | Format::DecimalExponent => {
                let (mut amount, mut exp) = (self.nanos, -9i32);
                while amount % 10 == 0 {
                    amount /= 10;
                    exp += 1;
                }
                match exp % 3 {
                    1 | -2 => {
                        amount *= 10;
                        exp -= 1;
                    }
                    2 | -1 => {
                        amount *= 100;
                        exp -= 2;
                    }
                    _ => {}
                }
                let suffix = match (format, exp) {
                    (_, 0) => String::new(),
                    (Format::DecimalSi, -9) => "n".into(),
                    (Format::DecimalSi, -6) => "u".into(),
                    (Format::DecimalSi, -3) => "m".into(),
                    (Format::DecimalSi, 3) => "k".into(),
                    (Format::DecimalSi, 6) => "M".into(),
                    (Format::DecimalSi, 9) => "G".into(),
                    (Format::DecimalSi, 12) => "T".into(),
                    (Format::DecimalSi, 15) => "P".into(),
                    (Format::DecimalSi, 18) => "E".into(),
                    (_, e) => format!("e{e}"),
                };
                format!("{amount}{suffix}")
            }
        }
    }

    /// The canonical string as an API quantity.
    pub fn to_k8s(&self) -> K8sQuantity {
        K8sQuantity(self.canonical())
    }

    /// `milli` thousandths written in `format` (Go's `resource.NewMilliQuantity`).
    pub fn from_milli(milli: i64, format: Format) -> Quantity {
        Quantity { nanos: i128::from(milli) * 1_000_000, format }
    }

    /// The sum, in this quantity's format (Go's `Add`).
    pub fn plus(&self, other: Quantity) -> Quantity {
        Quantity { nanos: self.nanos.saturating_add(other.nanos), format: self.format }
    }

    /// This quantity multiplied by an integer, keeping the format.
    pub fn times(&self, factor: i64) -> Quantity {
        Quantity { nanos: self.nanos.saturating_mul(i128::from(factor)), format: self.format }
    }
}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    /// By value (Go's `Cmp`); the format does not matter.
    fn cmp(&self, other: &Self) -> Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.canonical())
    }
}

fn ceil_div(a: i128, b: i128) -> i128 {
    a.div_euclid(b) + i128::from(a.rem_euclid(b) != 0)
}

fn saturate(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

/// Rewrites an API quantity in canonical form (as upstream's mutator writes it back); unparseable ones stay.
pub fn canonicalize(q: &mut K8sQuantity) {
    if let Ok(parsed) = Quantity::of(q) {
        q.0 = parsed.canonical();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn sums_keep_the_first_format() {
        assert_eq!(q("100m").plus(Quantity::from_milli(200, Format::DecimalSi)).canonical(), "300m");
        assert_eq!(q("1").plus(Quantity::from_milli(100, Format::DecimalSi)).canonical(), "1100m");
        assert_eq!(q("1Gi").plus(q("512Mi")).canonical(), "1536Mi");
        assert_eq!(q("1Gi").plus(q("-512Mi")).canonical(), "512Mi");
    }

    #[test]
    fn canonical_forms_are_gos() {
        for (input, want) in [
            ("128Mi", "128Mi"),
            ("1.5Gi", "1536Mi"),
            ("1024Mi", "1Gi"),
            ("1000", "1k"),
            ("2048", "2048"),
            ("0.5", "500m"),
            ("100m", "100m"),
            ("1024M", "1024M"),
            ("1G", "1G"),
            ("64M", "64M"),
            ("512k", "512k"),
            ("1e3", "1e3"),
            ("1E6", "1e6"),
            ("0", "0"),
            ("0Mi", "0"),
            ("1Ki", "1Ki"),
            ("512Ki", "512Ki"),
            ("1000Ki", "1000Ki"),
            ("0.5Ki", "512"),
            ("100Mi", "100Mi"),
            ("-1Gi", "-1Gi"),
            ("-1", "-1"),
            ("1.5", "1500m"),
            ("2", "2"),
            ("+3", "3"),
            ("12Mi", "12Mi"),
        ] {
            assert_eq!(q(input).canonical(), want, "{input}");
        }
    }

    #[test]
    fn values_round_up_like_go() {
        assert_eq!(q("500m").value(), 1);
        assert_eq!(q("1.5").value(), 2);
        assert_eq!(q("2").value(), 2);
        assert_eq!(q("128Mi").value(), 128 << 20);
        assert_eq!(q("1.5").milli_value(), 1500);
        assert_eq!(q("1n").milli_value(), 1);
        assert_eq!(q("-1Gi").value(), -(1 << 30));
        assert!(q("1M") > q("512k"));
        assert_eq!(q("1M").cmp(&q("1000k")), Ordering::Equal);
        assert_eq!(Quantity::from_value(512 << 20, Format::BinarySi).canonical(), "512Mi");
        assert_eq!(q("1Gi").times(4).canonical(), "4Gi");
        assert!(Quantity::ZERO.is_zero());
    }

    #[test]
    fn bad_quantities_are_refused_with_gos_message() {
        for bad in ["", "Mi", "1.2.3", "1K", "1e", "12xx", "1 Mi", "--1", "."] {
            let e = Quantity::parse(bad).err().unwrap_or_else(|| panic!("{bad:?} parsed"));
            assert_eq!(e.to_string(), ERR_FORMAT_WRONG);
        }
    }
}
