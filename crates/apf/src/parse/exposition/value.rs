//! A sample's value: the common plain decimals read directly, everything else by the general float parser.
use super::lossy_snippet;

/// Sample values: Go float syntax as written by client_golang (`NaN`, `+Inf`, `-Inf`, exponents).
pub(super) fn parse_value(token: &[u8]) -> Result<f64, String> {
    if let Some(v) = plain_decimal(token) {
        return Ok(v);
    }
    std::str::from_utf8(token)
        .ok()
        .and_then(|t| t.parse::<f64>().ok())
        .ok_or_else(|| format!("invalid sample value {:?}", lossy_snippet(token)))
}

/// A number as Go's `strconv.FormatFloat` writes it, and JSON's: [`plain_decimal`] where it reads it, else the
/// general parser (`NaN`, `+Inf`, exponents). A Prometheus answer's values and times are such text.
pub(crate) fn parse_float(text: &str) -> Option<f64> {
    plain_decimal(text.as_bytes()).or_else(|| text.parse().ok())
}

/// The common values (`0`, `42`, `0.25`, `-3.5`) without the general parser: at most 15 significant digits make an
/// integer that f64 holds exactly, and dividing it by a power of ten f64 also holds exactly (10^22 at most) rounds
/// once, correctly (Clinger's fast path, as `str::parse` takes for them too). Anything else (exponents, more digits,
/// `NaN`, `+Inf`) is `None`, for the general parser.
fn plain_decimal(token: &[u8]) -> Option<f64> {
    const POW10: [f64; 16] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
    ];
    let (negative, digits) = match token.split_first()? {
        (b'-', rest) => (true, rest),
        _ => (false, token),
    };
    let mut mantissa: u64 = 0;
    let mut count = 0usize;
    let mut fraction: Option<usize> = None;
    for (i, &b) in digits.iter().enumerate() {
        match b {
            b'0'..=b'9' => {
                mantissa = mantissa * 10 + u64::from(b - b'0');
                count += 1;
                if count > 15 {
                    return None;
                }
            }
            b'.' if fraction.is_none() && i > 0 => fraction = Some(i + 1),
            _ => return None,
        }
    }
    let scale = match fraction {
        // `1.`: digits must follow the point, as Go writes them.
        Some(at) if at == digits.len() => return None,
        Some(at) => digits.len() - at,
        None if count == 0 => return None,
        None => 0,
    };
    // `count <= 15` and the point are all `digits` holds, so `scale < 16`.
    let value = mantissa as f64 / POW10[scale];
    Some(if negative { -value } else { value })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn plain_decimals_are_what_the_general_parser_reads() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(20);
        let mut tokens: Vec<String> = [
            "0",
            "-0",
            "1",
            "0.5",
            "-3.25",
            "123456789012345",
            "1234567890123456",
            "0.000000000000001",
            "9007199254740993",
            "1.",
            ".5",
            "+5",
            "1e3",
            "1.5e-3",
            "--1",
            "1..2",
            "1.2.3",
            "-",
            "",
            "0.1",
            "99999999999999.9",
            "00012",
            "0.30000000000000004",
        ]
        .iter()
        .map(|t| t.to_string())
        .collect();
        for _ in 0..100_000 {
            let digits = rng.gen_range(1..=18);
            let mut t: String = (0..digits)
                .map(|_| char::from(b'0' + rng.gen_range(0..10u8)))
                .collect();
            if rng.gen_bool(0.6) {
                t.insert(rng.gen_range(0..=t.len()), '.');
            }
            if rng.gen_bool(0.3) {
                t.insert(0, '-');
            }
            tokens.push(t);
        }
        for t in &tokens {
            let general = t.parse::<f64>().ok();
            match plain_decimal(t.as_bytes()) {
                // Bit for bit: the sign of zero included.
                Some(v) => assert_eq!(Some(v.to_bits()), general.map(f64::to_bits), "{t:?}"),
                // It leaves only what is not `-?d+(.d+)?` with at most 15 digits (for the general parser).
                None => {
                    let unsigned = t.strip_prefix('-').unwrap_or(t);
                    let (int, frac) = match unsigned.split_once('.') {
                        Some((int, frac)) => (int, Some(frac)),
                        None => (unsigned, None),
                    };
                    let all_digits =
                        |x: &str| !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit());
                    let plain = all_digits(int) && frac.is_none_or(all_digits);
                    let digits = int.len() + frac.map_or(0, str::len);
                    assert!(!plain || digits > 15, "{t:?} is plain and short, yet left");
                }
            }
            // Either way the sample value is the general parser's reading.
            assert_eq!(
                parse_value(t.as_bytes()).ok().map(f64::to_bits),
                general.map(f64::to_bits),
                "{t:?}"
            );
        }
        // The fast path takes the common values.
        for t in ["0", "42", "0.25", "-3.5", "123456789012345"] {
            assert!(plain_decimal(t.as_bytes()).is_some(), "{t}");
        }
    }
}
