//! Go's spelling of what kube-apiserver prints: numbers as `strconv.FormatFloat`, times as RFC 3339 with
//! nanoseconds, seat-seconds; and the commit and Go release in each simulated version's build info.
use std::time::SystemTime;

/// Formats a sample value as Go's `strconv.FormatFloat(f, 'g', -1, 64)` (what client_golang writes).
pub(super) fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if f == 0.0 {
        return "0".into();
    }
    let e = format!("{f:e}");
    let (mant, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits = mant.trim_start_matches('-').replace('.', "").len() as i32;
    let dp = exp + 1;
    let mut eprec = 6;
    if eprec > digits && digits >= dp {
        eprec = digits;
    }
    if exp < -4 || exp >= eprec {
        format!("{mant}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
    } else {
        format!("{f}")
    }
}

/// Go's time.RFC3339Nano in UTC: the fraction loses its trailing zeros.
pub(super) fn rfc3339_nano(t: SystemTime) -> String {
    let s = humantime::format_rfc3339_nanos(t).to_string();
    match s.split_once('.') {
        Some((head, frac)) => {
            let frac = frac.trim_end_matches('Z').trim_end_matches('0');
            if frac.is_empty() {
                format!("{head}Z")
            } else {
                format!("{head}.{frac}Z")
            }
        }
        None => s,
    }
}

/// SeatSeconds.String(): fixed point with 8 decimals and the suffix `ss`.
pub(super) fn seat_seconds(x: f64) -> String {
    let scaled = (x.max(0.0) * 1e8).round() as u64;
    format!("{}.{:08}ss", scaled / 100_000_000, scaled % 100_000_000)
}

/// A stable, made-up 40-hex commit per version.
pub(crate) fn git_commit(minor: u32, patch: u32) -> String {
    let mut h: u64 = 0x9e37_79b9_7f4a_7c15 ^ ((minor as u64) << 16 | patch as u64);
    let mut s = String::new();
    while s.len() < 40 {
        h ^= h << 13;
        h ^= h >> 7;
        h ^= h << 17;
        s += &format!("{h:016x}");
    }
    s.truncate(40);
    s
}

/// The Go release each Kubernetes minor was built with (roughly).
pub(crate) fn go_version(minor: u32) -> &'static str {
    match minor {
        ..=20 => "go1.15.15",
        21 => "go1.16.15",
        22 => "go1.16.15",
        23 => "go1.19.6",
        24 | 25 => "go1.20.7",
        26 | 27 => "go1.21.5",
        28 | 29 => "go1.22.5",
        30 | 31 => "go1.22.5",
        32 => "go1.23.3",
        33 => "go1.24.2",
        34 => "go1.24.6",
        _ => "go1.25.5",
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn go_float_matches_strconv() {
        assert_eq!(go_float(37.0), "37");
        assert_eq!(go_float(0.000289668), "0.000289668");
        assert_eq!(go_float(1837745.0), "1.837745e+06");
        assert_eq!(go_float(1e6), "1e+06");
        assert_eq!(go_float(123456.0), "123456");
        assert_eq!(go_float(0.00001), "1e-05");
        assert_eq!(go_float(2.265863550053805), "2.265863550053805");
        assert_eq!(go_float(f64::INFINITY), "+Inf");
    }

    #[test]
    fn time_formats() {
        let t = SystemTime::UNIX_EPOCH + Duration::new(1_689_653_588, 986_534_840);
        assert_eq!(rfc3339_nano(t), "2023-07-18T04:13:08.98653484Z");
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_689_653_588);
        assert_eq!(rfc3339_nano(t), "2023-07-18T04:13:08Z");
        assert_eq!(seat_seconds(3125.4827352), "3125.48273520ss");
        assert_eq!(seat_seconds(0.0), "0.00000000ss");
    }
}

/// Go's `time.Duration.String()`: `0s`, `750ns`, `1.5µs`, `20ms`, `1.5s`, `2m0.5s`, `1h0m0s`.
pub(super) fn go_duration(ns: u64) -> String {
    fn fraction(whole: u64, part: u64, digits: usize) -> String {
        let frac = format!("{part:0digits$}");
        let frac = frac.trim_end_matches('0');
        if frac.is_empty() {
            whole.to_string()
        } else {
            format!("{whole}.{frac}")
        }
    }
    match ns {
        0 => "0s".into(),
        n if n < 1_000 => format!("{n}ns"),
        n if n < 1_000_000 => format!("{}µs", fraction(n / 1_000, n % 1_000, 3)),
        n if n < 1_000_000_000 => format!("{}ms", fraction(n / 1_000_000, n % 1_000_000, 6)),
        n => {
            let secs = fraction(n / 1_000_000_000 % 60, n % 1_000_000_000, 9);
            let (minutes, hours) = (n / 60_000_000_000 % 60, n / 3_600_000_000_000);
            match (hours, minutes) {
                (0, 0) => format!("{secs}s"),
                (0, m) => format!("{m}m{secs}s"),
                (h, m) => format!("{h}h{m}m{secs}s"),
            }
        }
    }
}

#[cfg(test)]
mod duration_tests {
    use super::go_duration;

    #[test]
    fn durations_read_as_go_prints_them() {
        for (ns, want) in [
            (0, "0s"),
            (750, "750ns"),
            (1_500, "1.5µs"),
            (20_000_000, "20ms"),
            (1_500_000_000, "1.5s"),
            (120_500_000_000, "2m0.5s"),
            (3_600_000_000_000, "1h0m0s"),
        ] {
            assert_eq!(go_duration(ns), want);
        }
    }
}
