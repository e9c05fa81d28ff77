//! Where the exporter sends each signal: OTLP/HTTP URLs from a base endpoint, the standard
//! `OTEL_EXPORTER_OTLP_*` environment variables, or per-signal overrides.

use thiserror::Error;

use super::stats::Signal;

/// The default base endpoint: an OpenTelemetry Collector (or any OTLP/HTTP receiver) on this
/// machine.
pub const DEFAULT_ENDPOINT: &str = "http://127.0.0.1:4318";

/// A URL the exporter cannot use.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EndpointError {
    /// Not `http://HOST[:PORT][/PATH]`.
    #[error(
        "{url:?} is not a usable OTLP/HTTP endpoint: {why} (expected http://HOST[:PORT][/PATH], \
         e.g. {DEFAULT_ENDPOINT})"
    )]
    Invalid {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        why: &'static str,
    },
}

/// The URL of each signal (`None`: the signal is not exported).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoints {
    /// Metrics (`…/v1/metrics`).
    pub metrics: Option<String>,
    /// Logs (`…/v1/logs`).
    pub logs: Option<String>,
    /// Traces (`…/v1/traces`).
    pub traces: Option<String>,
}

impl Endpoints {
    /// The signal URLs of a base endpoint: `BASE/v1/metrics`, `BASE/v1/logs`, `BASE/v1/traces`
    /// (as the OTLP exporter specification appends them to `OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub fn from_base(base: &str) -> Result<Endpoints, EndpointError> {
        check(base)?;
        let base = base.trim_end_matches('/');
        Ok(Endpoints {
            metrics: Some(format!("{base}/v1/metrics")),
            logs: Some(format!("{base}/v1/logs")),
            traces: Some(format!("{base}/v1/traces")),
        })
    }

    /// The endpoints as an OTel SDK would pick them: `base` if given (a command-line flag),
    /// else `OTEL_EXPORTER_OTLP_ENDPOINT`, else [`DEFAULT_ENDPOINT`]; then each
    /// `OTEL_EXPORTER_OTLP_{METRICS,LOGS,TRACES}_ENDPOINT` that is set replaces its signal's
    /// URL as is (when no `base` was given).
    pub fn resolve(
        base: Option<&str>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Endpoints, EndpointError> {
        let env = |k: &str| env(k).filter(|v| !v.trim().is_empty());
        let from_flag = base.is_some();
        let base = match base {
            Some(b) => b.to_owned(),
            None => env("OTEL_EXPORTER_OTLP_ENDPOINT").unwrap_or_else(|| DEFAULT_ENDPOINT.into()),
        };
        let mut e = Endpoints::from_base(&base)?;
        if !from_flag {
            for (var, slot) in [
                ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", &mut e.metrics),
                ("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", &mut e.logs),
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &mut e.traces),
            ] {
                if let Some(url) = env(var) {
                    check(&url)?;
                    *slot = Some(url);
                }
            }
        }
        Ok(e)
    }

    /// Replaces the URL of `signal` (checked).
    pub fn set(&mut self, signal: Signal, url: &str) -> Result<(), EndpointError> {
        check(url)?;
        *self.slot(signal) = Some(url.to_owned());
        Ok(())
    }

    /// Stops exporting `signal`.
    pub fn disable(&mut self, signal: Signal) {
        *self.slot(signal) = None;
    }

    /// The URL of `signal`, if it is exported.
    pub fn get(&self, signal: Signal) -> Option<&str> {
        match signal {
            Signal::Metrics => self.metrics.as_deref(),
            Signal::Logs => self.logs.as_deref(),
            Signal::Traces => self.traces.as_deref(),
        }
    }

    fn slot(&mut self, signal: Signal) -> &mut Option<String> {
        match signal {
            Signal::Metrics => &mut self.metrics,
            Signal::Logs => &mut self.logs,
            Signal::Traces => &mut self.traces,
        }
    }
}

/// Checks that `url` is `http://HOST[:PORT][/PATH]` with a valid port.
pub fn check(url: &str) -> Result<(), EndpointError> {
    let bad = |why| {
        Err(EndpointError::Invalid {
            url: url.to_owned(),
            why,
        })
    };
    let rest = if let Some(r) = url.strip_prefix("http://") {
        r
    } else if url.starts_with("https://") {
        return bad(
            "https is not supported (no TLS in snapbus: send plaintext to a collector on this \
             machine or network, which does TLS onwards)",
        );
    } else {
        return bad("the scheme must be http://");
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.is_empty() {
        return bad("no host");
    }
    if authority.contains('@') {
        return bad("credentials in the URL are not supported");
    }
    // A bracketed IPv6 host (`[::1]`, `[::1]:4318`) first: its colons are not a port's.
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        match v6.split_once(']') {
            Some((h, "")) => (h, None),
            Some((h, p)) => match p.strip_prefix(':') {
                Some(p) => (h, Some(p)),
                None => return bad("unexpected text after the IPv6 address"),
            },
            None => return bad("an IPv6 address without its closing bracket"),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return bad("no host");
    }
    if host.chars().any(|c| c.is_whitespace()) {
        return bad("whitespace in the host");
    }
    if let Some(p) = port {
        match p.parse::<u16>() {
            Ok(0) | Err(_) => return bad("the port must be a number from 1 to 65535"),
            Ok(_) => {}
        }
    }
    if url.parse::<ureq::http::Uri>().is_err() {
        return bad("not a valid URL");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_endpoints_get_the_signal_paths() {
        let e = Endpoints::from_base("http://h:4318/").expect("valid");
        assert_eq!(e.metrics.as_deref(), Some("http://h:4318/v1/metrics"));
        assert_eq!(e.logs.as_deref(), Some("http://h:4318/v1/logs"));
        assert_eq!(e.traces.as_deref(), Some("http://h:4318/v1/traces"));
    }

    #[test]
    fn environment_is_used_unless_a_flag_is_given() {
        let env = |k: &str| match k {
            "OTEL_EXPORTER_OTLP_ENDPOINT" => Some("http://c:1".to_owned()),
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT" => Some("http://vm:8428/otlp/m".to_owned()),
            _ => None,
        };
        let e = Endpoints::resolve(None, env).expect("valid");
        assert_eq!(e.metrics.as_deref(), Some("http://vm:8428/otlp/m"));
        assert_eq!(e.logs.as_deref(), Some("http://c:1/v1/logs"));
        let e = Endpoints::resolve(Some("http://f:2"), env).expect("valid");
        assert_eq!(e.metrics.as_deref(), Some("http://f:2/v1/metrics"));
        let e = Endpoints::resolve(None, |_| None).expect("valid");
        assert_eq!(e.traces.as_deref(), Some("http://127.0.0.1:4318/v1/traces"));
    }

    #[test]
    fn bad_urls_are_refused_with_the_reason() {
        for (url, why) in [
            ("127.0.0.1:4318", "scheme"),
            ("https://h", "https"),
            ("http://", "no host"),
            ("http://h:99999", "port"),
            ("http://h:x", "port"),
            ("http://u:p@h", "credentials"),
        ] {
            let err = check(url).expect_err(url).to_string();
            assert!(err.contains(why), "{url}: {err}");
        }
        check("http://[::1]:4318/v1/metrics").expect("ipv6");
        check("http://[::1]/v1/metrics").expect("ipv6 without a port");
        assert!(check("http://[::1/v1/metrics").is_err());
        assert!(check("http://[::1]x/v1/metrics").is_err());
        assert!(check("http://[::1]:0/v1/metrics").is_err());
    }
}
