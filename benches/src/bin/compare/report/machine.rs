//! What the machine is: for the full report's table, the page's one line and the run's folder
//! name.

use std::fmt::Write as _;
use std::time::SystemTime;

use super::workspace_file;
use crate::run::{consumer_cpu, producer_cpu};

/// The CPU's model name, `/proc/cpuinfo`'s first.
pub(super) fn cpu_model() -> String {
    read_first_line("/proc/cpuinfo", "model name").unwrap_or_else(|| "?".into())
}

fn is_virtual() -> bool {
    std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|s| s.contains(" hypervisor"))
}

pub(super) fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn kernel() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "?".into())
}

/// The machine in one line: `AMD EPYC, 2 CPUs, virtual machine; Linux 6.18; rustc 1.95.0; …`.
pub(super) fn line() -> String {
    let rustc = command_version("rustc", "-V");
    let rustc = rustc.split(" (").next().unwrap_or(&rustc).to_owned();
    format!(
        "{}, {} CPUs{}; Linux {}; {rustc}; {}",
        cpu_model(),
        cpus(),
        if is_virtual() {
            ", virtual machine"
        } else {
            ""
        },
        kernel(),
        locked_versions()
    )
}

/// A short name of the machine for a run's folder: `epyc-2vcpu`.
pub(super) fn slug() -> String {
    slug_of(&cpu_model(), cpus(), is_virtual())
}

fn slug_of(model: &str, cpus: usize, virt: bool) -> String {
    const SKIP: [&str; 10] = [
        "amd",
        "intel",
        "genuine",
        "authentic",
        "processor",
        "cpu",
        "core",
        "with",
        "r",
        "tm",
    ];
    let word = model
        .split(|c: char| !c.is_ascii_alphanumeric())
        .map(str::to_ascii_lowercase)
        .find(|w| !w.is_empty() && !SKIP.contains(&w.as_str()))
        .unwrap_or_else(|| "machine".into());
    format!("{word}-{cpus}{}cpu", if virt { "v" } else { "" })
}

fn read_first_line(path: &str, key: &str) -> Option<String> {
    std::fs::read_to_string(path).ok().and_then(|s| {
        s.lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_owned())
    })
}

fn command_version(cmd: &str, arg: &str) -> String {
    std::process::Command::new(cmd)
        .arg(arg)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| {
            let text = if o.stdout.is_empty() {
                o.stderr
            } else {
                o.stdout
            };
            String::from_utf8_lossy(&text).trim().to_owned()
        })
        .unwrap_or_else(|| "not found".into())
}

/// Versions of the peer crates, from the workspace's Cargo.lock.
fn locked_versions() -> String {
    let lock = std::fs::read_to_string(workspace_file("Cargo.lock")).unwrap_or_default();
    let mut out = Vec::new();
    for name in ["iceoryx2", "ipc-channel", "crossbeam-channel"] {
        let needle = format!("name = \"{name}\"\nversion = \"");
        if let Some(i) = lock.find(&needle) {
            let rest = &lock[i + needle.len()..];
            if let Some(v) = rest.split('"').next() {
                out.push(format!("{name} {v}"));
            }
        }
    }
    out.join(", ")
}

/// The machine as a table (the full report).
pub(super) fn table(out: &mut String) {
    let (cpu, virt, ncpu) = (cpu_model(), is_virtual(), cpus());
    let mem = read_first_line("/proc/meminfo", "MemTotal").unwrap_or_else(|| "?".into());
    let kernel = kernel();
    let _ = writeln!(out, "| | |\n|---|---|");
    let _ = writeln!(
        out,
        "| CPU | {cpu}, {ncpu} CPUs{} |",
        if virt { ", virtual machine" } else { "" }
    );
    let _ = writeln!(out, "| Caches | {} |", super::machines::caches());
    let _ = writeln!(out, "| Memory | {mem} |");
    let _ = writeln!(out, "| Kernel | Linux {kernel} |");
    let _ = writeln!(out, "| Rust | {} |", command_version("rustc", "-V"));
    let _ = writeln!(
        out,
        "| Python | {} |",
        command_version("python3", "--version")
    );
    let _ = writeln!(out, "| Peer crates | {} |", locked_versions());
    let _ = writeln!(
        out,
        "| Pinning | producer on CPU {}, consumer on CPU {} (threads of the one-process peer \
         likewise) |",
        producer_cpu(),
        consumer_cpu()
    );
}

/// A time as `2026-11-25 17:25:35 UTC`.
pub(super) fn date(t: SystemTime) -> String {
    let s = humantime::format_rfc3339_seconds(t).to_string();
    s.replace('T', " ").replace('Z', " UTC")
}
#[cfg(test)]
mod tests {
    use super::slug_of;

    #[test]
    fn a_machine_is_named_by_its_cpu_family_and_count() {
        assert_eq!(slug_of("AMD EPYC", 2, true), "epyc-2vcpu");
        assert_eq!(
            slug_of("AMD EPYC 9R14 96-Core Processor", 2, true),
            "epyc-2vcpu"
        );
        assert_eq!(
            slug_of("Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz", 8, false),
            "xeon-8cpu"
        );
        assert_eq!(slug_of("?", 4, false), "machine-4cpu");
    }
}
