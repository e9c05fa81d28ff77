//! Process-wide settings ([`Config`]), fixed by [`init`](crate::init) or the first
//! [`get_telemetry`](crate::get_telemetry).

/// Process-wide settings, fixed by [`init`](crate::init) (or the environment) before the first handle.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// The bus to join (default: `$SNAPBUS_BUS`, else `default`).
    pub bus: Option<String>,
    /// The name `snapbus ls` shows (default: the program's file name).
    pub name: Option<String>,
    /// Run metadata (default: `$SNAPBUS_SESSION_TAG`).
    pub session_tag: Option<String>,
    /// Run metadata (default: `$SNAPBUS_PERF_TAG`).
    pub perf_tag: Option<String>,
    /// Lane size in bytes, a power of two from 64 KiB to 1 TiB (default:
    /// `$SNAPBUS_LANE_BYTES`, else 64 MiB). An invalid size is reported once on stderr and the
    /// default is used (telemetry never fails its host program); see [`lane_bytes_from_env`](crate::lane_bytes_from_env)
    /// for programs that would rather refuse it.
    pub lane_bytes: Option<usize>,
    /// The runtime root the bus directory is in (default: `$SNAPBUS_RUNTIME_DIR`, else the
    /// per-user runtime directory).
    pub runtime_dir: Option<std::path::PathBuf>,
    /// Start a broker for the bus if none runs (default: `$SNAPBUS_START_BUS`, else yes): see
    /// [the crate docs](crate#no-bus-running). Off, a process with no bus says so once and its
    /// snapshots are counted as `no_bus` until one appears.
    pub start_bus: Option<bool>,
    /// The `snapbus` binary that starts it (default: `$SNAPBUS_BIN`, else `snapbus` on `PATH`).
    pub snapbus_bin: Option<std::path::PathBuf>,
    /// A directory the started broker records every run into (`snapbus up --record DIR`;
    /// default: `$SNAPBUS_RECORD`).
    pub record: Option<std::path::PathBuf>,
}
