//! A Kubernetes version, as far as APF's defaults and spellings depend on it.

use std::fmt;
use std::str::FromStr;

/// A version string that is not one of the Kubernetes versions this module knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid Kubernetes version {input:?}: {reason}")]
pub struct VersionError {
    pub input: String,
    pub reason: String,
}

/// A Kubernetes version 1.`minor`.`patch` (major is always 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KubeVersion {
    pub minor: u32,
    pub patch: u32,
}

impl KubeVersion {
    /// The oldest and newest versions whose default objects [`super::defaults`] knows (and the simulator runs).
    pub const MIN_MINOR: u32 = 20;
    pub const MAX_MINOR: u32 = 36;

    pub fn new(minor: u32, patch: u32) -> Self {
        KubeVersion { minor, patch }
    }

    /// `v1.N.P`, as `/version` and `kubernetes_build_info` spell it.
    pub fn git_version(&self) -> String {
        format!("v1.{}.{}", self.minor, self.patch)
    }

    /// The minor version of any gitVersion a replica reports (`v1.33.4-eks-1234`, `v1.30.2+k3s1`), whatever its
    /// range: for facts that only ask "at least 1.N".
    pub fn minor_of(git_version: &str) -> Option<u32> {
        let rest = git_version.trim_start_matches('v').strip_prefix("1.")?;
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    }

    /// At least 1.`minor`.
    pub fn at_least(&self, minor: u32) -> bool {
        self.minor >= minor
    }

    /// Time-outs of queued requests are counted as "cancelled" in the priority-level dump from 1.29 and 1.28.5
    /// (Q never increments totRequestsTimedout there).
    pub fn timeouts_count_as_cancelled(&self) -> bool {
        self.minor >= 29 || (self.minor == 28 && self.patch >= 5)
    }
}

impl fmt::Display for KubeVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "1.{}.{}", self.minor, self.patch)
    }
}

impl FromStr for KubeVersion {
    type Err = VersionError;

    /// Accepts `1.33`, `1.33.4` and `v1.33.4`, within [`KubeVersion::MIN_MINOR`]..=[`KubeVersion::MAX_MINOR`]: a
    /// version is chosen to get its defaults, and outside that range they are not known.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |reason: &str| VersionError {
            input: s.to_string(),
            reason: reason.to_string(),
        };
        let t = s.trim();
        let t = t.strip_prefix('v').unwrap_or(t);
        let parts: Vec<&str> = t.split('.').collect();
        if parts.len() < 2 || parts.len() > 3 {
            return Err(err(
                "expected 1.MINOR or 1.MINOR.PATCH, e.g. 1.33 or v1.33.4",
            ));
        }
        let num = |p: &str| {
            p.parse::<u32>()
                .map_err(|_| err("version parts must be numbers"))
        };
        let major = num(parts[0])?;
        let minor = num(parts[1])?;
        let patch = match parts.get(2) {
            Some(p) => num(p)?,
            None => 0,
        };
        if major != 1 {
            return Err(err("only Kubernetes 1.x exists"));
        }
        if !(Self::MIN_MINOR..=Self::MAX_MINOR).contains(&minor) {
            return Err(err(&format!(
                "supported versions are 1.{}..=1.{}",
                Self::MIN_MINOR,
                Self::MAX_MINOR
            )));
        }
        Ok(KubeVersion { minor, patch })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_forms() {
        assert_eq!(
            "1.33".parse::<KubeVersion>().unwrap(),
            KubeVersion::new(33, 0)
        );
        assert_eq!(
            "1.33.4".parse::<KubeVersion>().unwrap(),
            KubeVersion::new(33, 4)
        );
        assert_eq!(
            "v1.33.4".parse::<KubeVersion>().unwrap(),
            KubeVersion::new(33, 4)
        );
        assert_eq!(KubeVersion::new(33, 4).git_version(), "v1.33.4");
    }

    #[test]
    fn rejects_out_of_range() {
        for bad in ["1.19", "1.37", "2.1", "1", "1.x", "", "1.2.3.4"] {
            let e = bad.parse::<KubeVersion>().unwrap_err().to_string();
            assert!(e.contains("invalid Kubernetes version"), "{bad}: {e}");
        }
        assert!("1.19"
            .parse::<KubeVersion>()
            .unwrap_err()
            .to_string()
            .contains("1.20..=1.36"));
    }

    #[test]
    fn the_minor_of_a_provider_git_version() {
        assert_eq!(KubeVersion::minor_of("v1.33.4-eks-1234"), Some(33));
        assert_eq!(KubeVersion::minor_of("v1.30.2+k3s1"), Some(30));
        assert_eq!(KubeVersion::minor_of("1.18"), Some(18));
        assert_eq!(KubeVersion::minor_of("v2.0.0"), None);
    }
}
