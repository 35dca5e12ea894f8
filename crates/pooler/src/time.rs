//! Time values in configuration.
//!
//! Every duration in a [`PoolConfig`](crate::PoolConfig) accepts the same forms:
//!
//! | form | example | meaning |
//! |---|---|---|
//! | a string with a unit | `"2min"`, `"120s"`, `"120000ms"`, `"1h"`, `"500us"` | as the `humantime` crate parses it (`"1m 30s"` too) |
//! | a plain non-negative integer | `120000` | milliseconds (pooler's convention) |
//! | pooler's pair | `[2, "min"]` | units `hour`, `min`, `sec`, `ms`, `mu` (µs), and `h`, `m`, `s`, `us` |
//!
//! Values above [`MAX_TIME`] are rejected, so no timer arithmetic can overflow.

#[cfg(feature = "serde")]
use std::fmt;
use std::time::Duration;

#[cfg(feature = "serde")]
use serde::de::{self, Deserializer, SeqAccess, Visitor};

/// A duration written for people, as in error messages and logs: `"1s 500ms"`, `"2m"`,
/// `"0s"` (each non-zero unit from days down to nanoseconds, largest first; every string
/// reads back as a time value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Human(pub(crate) Duration);

impl std::fmt::Display for Human {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secs = self.0.as_secs();
        let nanos = self.0.subsec_nanos();
        let days = secs / 86_400;
        let parts = [
            (secs / 3600 % 24, "h"),
            (secs / 60 % 60, "m"),
            (secs % 60, "s"),
            (u64::from(nanos / 1_000_000), "ms"),
            (u64::from(nanos / 1_000 % 1_000), "us"),
            (u64::from(nanos % 1_000), "ns"),
        ];
        let mut sep = "";
        if days > 0 {
            write!(f, "{days}{}", if days == 1 { "day" } else { "days" })?;
            sep = " ";
        }
        for (n, unit) in parts {
            if n > 0 {
                write!(f, "{sep}{n}{unit}")?;
                sep = " ";
            }
        }
        if sep.is_empty() {
            f.write_str("0s")?;
        }
        Ok(())
    }
}

/// The largest time value any key accepts: 365 days.
pub const MAX_TIME: Duration = Duration::from_secs(365 * 24 * 60 * 60);

#[cfg(feature = "serde")]
/// Parses one time value from its unit and magnitude, as pooler's `{N, unit}` pair.
fn from_pair(n: u64, unit: &str) -> Result<Duration, String> {
    let d = match unit {
        "hour" | "hours" | "h" => n.checked_mul(3600).map(Duration::from_secs),
        "min" | "minutes" | "m" => n.checked_mul(60).map(Duration::from_secs),
        "sec" | "seconds" | "s" => Some(Duration::from_secs(n)),
        "ms" => Some(Duration::from_millis(n)),
        "mu" | "us" => Some(Duration::from_micros(n)),
        other => {
            return Err(format!(
                "unknown unit `{other}` (expected hour, min, sec, ms or mu)"
            ));
        }
    };
    d.ok_or_else(|| "value too large".to_owned())
        .and_then(bounded)
}

#[cfg(feature = "serde")]
fn from_str(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim())
        .map_err(|e| {
            format!("`{s}` is not a duration ({e}); write e.g. \"2min\", \"120s\" or \"500ms\"")
        })
        .and_then(bounded)
}

#[cfg(feature = "serde")]
fn bounded(d: Duration) -> Result<Duration, String> {
    if d > MAX_TIME {
        Err(format!(
            "{} is longer than the maximum of 365 days",
            Human(d)
        ))
    } else {
        Ok(d)
    }
}

#[cfg(feature = "serde")]
struct TimeVisitor;

#[cfg(feature = "serde")]
impl<'de> Visitor<'de> for TimeVisitor {
    type Value = Duration;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a time value: \"2min\", \"120s\", 120000 (ms) or [2, \"min\"]")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Duration, E> {
        bounded(Duration::from_millis(v)).map_err(E::custom)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Duration, E> {
        u64::try_from(v)
            .map_err(|_| E::custom(format!("time value {v} is negative")))
            .and_then(|v| self.visit_u64(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
        from_str(v).map_err(E::custom)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Duration, A::Error> {
        let n: i64 = seq
            .next_element()?
            .ok_or_else(|| de::Error::custom("a [N, unit] pair needs a number first"))?;
        let unit: String = seq
            .next_element()?
            .ok_or_else(|| de::Error::custom("a [N, unit] pair needs a unit second"))?;
        if seq.next_element::<de::IgnoredAny>()?.is_some() {
            return Err(de::Error::custom(
                "a [N, unit] pair has exactly two elements",
            ));
        }
        let n = u64::try_from(n)
            .map_err(|_| de::Error::custom(format!("time value {n} is negative")))?;
        from_pair(n, &unit).map_err(de::Error::custom)
    }
}

/// Deserializes a required time value in any of the forms above:
/// `#[serde(with = "pooler::time")]` on a `Duration` field of your own config reads it as a
/// [`PoolConfig`](crate::PoolConfig) key does.
///
/// # Errors
///
/// A value in none of the forms, or above [`MAX_TIME`], with a message that says so.
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    d.deserialize_any(TimeVisitor)
}

/// Serializes a time value as a string such as `"1m 30s"`, which [`deserialize`] reads back.
///
/// # Errors
///
/// What the serializer returns.
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&Human(*d).to_string())
}

/// The same for an `Option<Duration>` field, where absent means "off":
/// `#[serde(default, with = "pooler::time::option")]`.
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub mod option {
    use super::*;

    struct Some_;

    impl<'de> Visitor<'de> for Some_ {
        type Value = Option<Duration>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            TimeVisitor.expecting(f)
        }

        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            super::deserialize(d).map(Some)
        }
    }

    /// Deserializes an optional time value.
    ///
    /// # Errors
    ///
    /// As [`super::deserialize`].
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        d.deserialize_option(Some_)
    }

    /// Serializes an optional time value (none as none).
    ///
    /// # Errors
    ///
    /// What the serializer returns.
    pub fn serialize<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::serialize(d, s),
            None => s.serialize_none(),
        }
    }
}

#[cfg(feature = "file")]
/// Parses a time value from any self-describing serde input (used to name the key in errors).
pub(crate) fn parse_value<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, String> {
    deserialize(d).map_err(|e: D::Error| e.to_string())
}

#[cfg(test)]
mod human_tests {
    use super::*;

    #[test]
    fn durations_read_as_people_write_them() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_millis(1500), "1s 500ms"),
            (Duration::from_secs(90), "1m 30s"),
            (Duration::from_nanos(1_002_003), "1ms 2us 3ns"),
            (Duration::from_secs(86_400 + 3600), "1day 1h"),
            (Duration::from_secs(3 * 86_400), "3days"),
        ];
        for (d, text) in cases {
            assert_eq!(Human(d).to_string(), text);
        }
    }

    #[cfg(feature = "serde")]
    #[test]
    fn what_is_written_reads_back() {
        for ns in [
            1,
            999,
            1_000_001,
            61_000_000_000,
            90_061_001_001_001,
            MAX_TIME.as_nanos() as u64,
        ] {
            let d = Duration::from_nanos(ns);
            assert_eq!(from_str(&Human(d).to_string()), Ok(d), "{}", Human(d));
        }
    }
}

#[cfg(all(test, feature = "file"))]
mod tests {
    use super::*;

    fn parse(v: toml::Value) -> Result<Duration, String> {
        parse_value(v)
    }

    #[test]
    fn every_spec_form_means_two_minutes() {
        let two_min = Duration::from_secs(120);
        for v in [
            toml::Value::from("2min"),
            toml::Value::from("120s"),
            toml::Value::from("120000ms"),
            toml::Value::from(120_000),
            toml::Value::Array(vec![2.into(), "min".into()]),
            toml::Value::Array(vec![120.into(), "sec".into()]),
            toml::Value::Array(vec![120_000.into(), "ms".into()]),
        ] {
            assert_eq!(parse(v.clone()), Ok(two_min), "{v}");
        }
        assert_eq!(parse("1h".into()), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("500us".into()), Ok(Duration::from_micros(500)));
        assert_eq!(
            parse(toml::Value::Array(vec![500.into(), "mu".into()])),
            Ok(Duration::from_micros(500))
        );
    }

    #[test]
    fn bad_values_explain_themselves() {
        assert!(
            parse("two minutes".into())
                .unwrap_err()
                .contains("two minutes")
        );
        assert!(parse((-5).into()).unwrap_err().contains("negative"));
        let e = parse(toml::Value::Array(vec![2.into(), "fortnight".into()])).unwrap_err();
        assert!(e.contains("fortnight"), "{e}");
        assert!(parse("400days".into()).unwrap_err().contains("365 days"));
        assert!(parse(toml::Value::Array(vec![i64::MAX.into(), "hour".into()])).is_err());
        assert!(parse(true.into()).is_err());
    }
}
