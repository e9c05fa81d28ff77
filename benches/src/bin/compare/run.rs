//! The parent: runs every (peer, size, mode) as child processes, interleaved and repeated,
//! with a watchdog, and measures the load other processes put on the machine meanwhile.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde::de::DeserializeOwned;

use crate::common::{ConsumerReport, Mode, ProducerReport, RunArgs, Wait, process_cpu_nanos};
use crate::peers::{self, Layout, PeerDef};
use crate::refs::{MemcpyReport, PingReport, PongReport};

/// The CPU the producer is pinned to: the first this process may run on (a container or
/// `taskset` may leave CPU 0 out).
pub(crate) fn producer_cpu() -> usize {
    allowed_cpus()[0]
}

/// The CPU the consumer is pinned to: the second this process may run on (the first again
/// when there is only one).
pub(crate) fn consumer_cpu() -> usize {
    let cpus = allowed_cpus();
    cpus[1 % cpus.len()]
}

/// The CPUs this process may run on, as first asked (before any pinning narrows the set).
fn allowed_cpus() -> &'static [usize] {
    static CPUS: std::sync::OnceLock<Vec<usize>> = std::sync::OnceLock::new();
    CPUS.get_or_init(|| {
        let cpus: Vec<usize> = rustix::thread::sched_getaffinity(None)
            .map(|set| {
                (0..rustix::thread::CpuSet::MAX_CPU)
                    .filter(|&c| set.is_set(c))
                    .collect()
            })
            .unwrap_or_default();
        if cpus.is_empty() { vec![0] } else { cpus }
    })
}

/// How long one run and its set-up may take before the watchdog kills it.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// What to run.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub(crate) quick: bool,
    pub(crate) reps: usize,
    pub(crate) sizes: Vec<usize>,
    pub(crate) peers: Vec<&'static PeerDef>,
    /// Throughput: seconds the producer sends.
    pub(crate) secs: f64,
    /// Reference rows: seconds each.
    pub(crate) ref_secs: f64,
    /// Every consumer reads every byte (`--every-byte`).
    pub(crate) every_byte: bool,
}

impl Plan {
    /// Latency runs: (messages, interval) for a size.
    pub(crate) fn latency_shape(&self, size: usize) -> (u64, u64) {
        // 1 MiB: 200 a second, which every peer sustains (Python's queue manages ~300-500).
        let (count, interval) = if size >= 1 << 20 {
            (400, crate::refs::PACE_NANOS)
        } else {
            (10_000, 50_000)
        };
        if self.quick {
            (count / 10, interval)
        } else {
            (count, interval)
        }
    }
}

/// One measurement.
#[derive(Clone, Debug)]
pub(crate) struct Job {
    pub(crate) peer: &'static PeerDef,
    pub(crate) size: usize,
    pub(crate) mode: Mode,
    pub(crate) wait: Wait,
}

/// What one run gave.
#[derive(Clone, Debug)]
pub(crate) struct Outcome {
    pub(crate) job: Job,
    pub(crate) result: Result<ConsumerReport, String>,
    /// CPU time of other processes during the run, percent of the machine (all CPUs).
    pub(crate) other_load_pct: f64,
}

/// The reference rows of one repetition.
#[derive(Clone, Debug, Default)]
pub(crate) struct RefOutcome {
    pub(crate) memcpy: Option<MemcpyReport>,
    pub(crate) ping: Option<PingReport>,
    pub(crate) other_load_pct: f64,
}

/// The jobs of one repetition, in the order they run: sizes in turn, and within a size the
/// peers rotated by the repetition number (so no peer always runs first or after the same
/// one).
pub(crate) fn jobs(plan: &Plan, rep: usize) -> Vec<Job> {
    let mut out = Vec::new();
    for &size in &plan.sizes {
        let n = plan.peers.len();
        for k in 0..n {
            let peer = plan.peers[(k + rep) % n];
            if peer.throughput {
                out.push(Job {
                    peer,
                    size,
                    mode: Mode::Throughput,
                    wait: Wait::Sleep,
                });
            }
            for &wait in peer.latency_waits {
                out.push(Job {
                    peer,
                    size,
                    mode: Mode::Latency,
                    wait,
                });
            }
        }
    }
    out
}

/// Aggregate CPU counters of `/proc/stat` (10 ms ticks): (busy, total).
fn machine_ticks() -> (u64, u64) {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return (0, 0);
    };
    let Some(line) = stat.lines().next() else {
        return (0, 0);
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let get = |i: usize| v.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal
    let busy = get(0) + get(1) + get(2) + get(5) + get(6) + get(7);
    (busy, busy + get(3) + get(4))
}

/// Measures the machine's load around `f`, minus the CPU time `f` reports for its own
/// processes and the harness's own: the load from other processes, percent of all CPUs.
fn with_load<T>(f: impl FnOnce() -> (T, u64)) -> (T, f64) {
    let (busy0, total0) = machine_ticks();
    let self0 = process_cpu_nanos("self");
    let (out, ours_nanos) = f();
    let (busy1, total1) = machine_ticks();
    let self_nanos = process_cpu_nanos("self").saturating_sub(self0);
    let total = (total1 - total0) as f64 * 10e6;
    let other = (busy1 - busy0) as f64 * 10e6 - (ours_nanos + self_nanos) as f64;
    let pct = if total > 0.0 {
        (other / total * 100.0).clamp(0.0, 100.0)
    } else {
        0.0
    };
    (out, pct)
}

/// Runs one job in a fresh scratch directory under `root`.
pub(crate) fn run_job(plan: &Plan, job: &Job, root: &Path, n: usize) -> Outcome {
    let scratch = root.join(format!("run-{n}"));
    let (result, other_load_pct) = with_load(|| {
        let r = std::fs::create_dir(&scratch)
            .context("scratch directory")
            .and_then(|()| run_processes(plan, job, &scratch));
        let _ = std::fs::remove_dir_all(&scratch);
        match r {
            Ok((report, producer_cpu)) => {
                let cpu = report.cpu_nanos + producer_cpu;
                (Ok(report), cpu)
            }
            Err(e) => (Err(format!("{e:#}")), 0),
        }
    });
    Outcome {
        job: job.clone(),
        result,
        other_load_pct,
    }
}

/// Runs the reference rows.
pub(crate) fn run_refs(plan: &Plan, root: &Path) -> RefOutcome {
    let (out, other_load_pct) = with_load(|| {
        let memcpy = memcpy_child(
            &["memcpy", "--cpu", &producer_cpu().to_string()],
            plan.ref_secs,
            root,
        );
        let ping = ping_pong(plan.ref_secs, root);
        let cpu = memcpy.as_ref().map_or(0, |(_, c)| *c) + ping.as_ref().map_or(0, |(_, c)| *c);
        ((memcpy.map(|m| m.0), ping.map(|p| p.0)), cpu)
    });
    if let Err(e) = &out.0 {
        eprintln!("memcpy reference failed: {e:#}");
    }
    if let Err(e) = &out.1 {
        eprintln!("cache-line reference failed: {e:#}");
    }
    RefOutcome {
        memcpy: out.0.ok(),
        ping: out.1.ok(),
        other_load_pct,
    }
}

/// A child process whose stdout lines arrive on a channel, killed on drop unless waited for.
struct Proc {
    child: Child,
    lines: Receiver<String>,
    stdin: Option<ChildStdin>,
    stderr_path: PathBuf,
    name: String,
}

impl Proc {
    fn spawn(mut cmd: Command, name: &str, scratch: &Path) -> Result<Proc> {
        let stderr_path = scratch.join(format!("{name}.stderr"));
        let stderr = std::fs::File::create(&stderr_path)?;
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("spawn the {name}"))?;
        let stdout = child.stdout.take().context("stdout")?;
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Proc {
            stdin: child.stdin.take(),
            child,
            lines: rx,
            stderr_path,
            name: name.to_owned(),
        })
    }

    /// The rest of the first line starting with `word`, waiting until `deadline`.
    fn expect(&mut self, word: &str, deadline: Instant) -> Result<String> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.strip_prefix(word) {
                        return Ok(rest.trim().to_owned());
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    bail!("the {} did not say `{word}` in time (watchdog)", self.name)
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let _ = self.child.wait();
                    let err = std::fs::read_to_string(&self.stderr_path).unwrap_or_default();
                    let last = err.lines().rev().find(|l| !l.trim().is_empty());
                    bail!(
                        "the {} exited before saying `{word}`: {}",
                        self.name,
                        last.unwrap_or("(no message)")
                    )
                }
            }
        }
    }

    fn send(&mut self, line: &str) -> Result<()> {
        let stdin = self.stdin.as_mut().context("stdin")?;
        writeln!(stdin, "{line}")?;
        stdin.flush()?;
        Ok(())
    }

    fn json<T: DeserializeOwned>(&mut self, word: &str, deadline: Instant) -> Result<T> {
        let text = self.expect(word, deadline)?;
        serde_json::from_str(&text).with_context(|| format!("{} said {text:?}", self.name))
    }

    fn finish(mut self, deadline: Instant) -> Result<()> {
        drop(self.stdin.take());
        loop {
            if let Some(status) = self.child.try_wait()? {
                if !status.success() {
                    bail!("the {} exited with {status}", self.name);
                }
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!("the {} did not exit in time (watchdog)", self.name);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

fn exe() -> Result<PathBuf> {
    std::env::current_exe().context("the harness's own path")
}

/// The `child` arguments of a job.
fn child_args(plan: &Plan, job: &Job, scratch: &Path, cpu: usize) -> Vec<String> {
    run_args(plan, job, scratch, cpu).to_argv()
}

/// What one side of a job is told.
fn run_args(plan: &Plan, job: &Job, scratch: &Path, cpu: usize) -> RunArgs {
    let (count, interval) = plan.latency_shape(job.size);
    RunArgs {
        peer: job.peer.name.into(),
        size: job.size,
        mode: job.mode,
        wait: job.wait,
        secs: plan.secs,
        count,
        interval_nanos: interval,
        cpu: Some(cpu),
        other_cpu: Some(if cpu == producer_cpu() {
            consumer_cpu()
        } else {
            producer_cpu()
        }),
        rendezvous: String::new(),
        scratch: scratch.to_path_buf(),
        every_byte: plan.every_byte,
    }
}

/// Runs the processes of one job; the consumer's report and the producer's CPU time.
fn run_processes(plan: &Plan, job: &Job, scratch: &Path) -> Result<(ConsumerReport, u64)> {
    let deadline = Instant::now() + RUN_TIMEOUT;
    match job.peer.layout {
        Layout::TwoProcesses => {
            let mut c = Command::new(exe()?);
            c.args(["child", "consumer"])
                .args(child_args(plan, job, scratch, consumer_cpu()));
            let mut consumer = Proc::spawn(c, "consumer", scratch)?;
            let rendezvous = consumer.expect("ready", deadline)?;
            let mut p = Command::new(exe()?);
            p.args(["child", "producer"])
                .args(child_args(plan, job, scratch, producer_cpu()))
                .args(["--rendezvous", &rendezvous]);
            let mut producer = Proc::spawn(p, "producer", scratch)?;
            producer.expect("armed", deadline)?;
            if job.peer.needs_join {
                consumer.expect("joined", deadline)?;
            }
            producer.send("go")?;
            let done: ProducerReport = producer.json("done", deadline)?;
            let mut report: ConsumerReport = consumer.json("result", deadline)?;
            if job.mode == Mode::Throughput {
                report.sent_per_sec = Some(done.sent as f64 / plan.secs);
            }
            producer.finish(deadline)?;
            consumer.finish(deadline)?;
            Ok((report, done.cpu_nanos))
        }
        Layout::OneProcess => {
            let mut c = Command::new(exe()?);
            c.args(["child", "both"])
                .args(child_args(plan, job, scratch, producer_cpu()));
            let mut both = Proc::spawn(c, "process", scratch)?;
            both.expect("armed", deadline)?;
            both.send("go")?;
            let report: ConsumerReport = both.json("result", deadline)?;
            both.finish(deadline)?;
            Ok((report, 0))
        }
        Layout::Python => {
            let cmd = peers::python_command(&run_args(plan, job, scratch, producer_cpu()))?;
            let mut py = Proc::spawn(cmd, "python script", scratch)?;
            let report: ConsumerReport = py.json("result", deadline)?;
            py.finish(deadline)?;
            Ok((report, 0))
        }
    }
}

/// The memcpy reference (`compare child memcpy`) and its CPU time.
fn memcpy_child(args: &[&str], secs: f64, root: &Path) -> Result<(MemcpyReport, u64)> {
    let deadline = Instant::now() + RUN_TIMEOUT;
    let mut c = Command::new(exe()?);
    c.arg("child")
        .args(args)
        .args(["--secs", &secs.to_string()]);
    let mut p = Proc::spawn(c, args[0], root)?;
    let v: MemcpyReport = p.json("result", deadline)?;
    p.finish(deadline)?;
    let cpu = v.cpu_nanos;
    Ok((v, cpu))
}

/// The cache-line round trip between a `ping` and a `pong` process.
fn ping_pong(secs: f64, root: &Path) -> Result<(PingReport, u64)> {
    let deadline = Instant::now() + RUN_TIMEOUT;
    let mut c = Command::new(exe()?);
    c.args(["child", "ping", "--cpu", &producer_cpu().to_string()])
        .args(["--secs", &secs.to_string()]);
    let mut ping = Proc::spawn(c, "ping", root)?;
    let rendezvous = ping.expect("ready", deadline)?;
    let mut c = Command::new(exe()?);
    c.args(["child", "pong", "--cpu", &consumer_cpu().to_string()])
        .args(["--rendezvous", &rendezvous]);
    let mut pong = Proc::spawn(c, "pong", root)?;
    let v: PingReport = ping.json("result", deadline)?;
    let pong_done: PongReport = pong.json("done", deadline)?;
    ping.finish(deadline)?;
    pong.finish(deadline)?;
    let cpu = v.cpu_nanos + pong_done.cpu_nanos;
    Ok((v, cpu))
}

/// Fails unless `exe child` can run at all (e.g. the binary was deleted by a rebuild).
pub(crate) fn check_exe() -> Result<()> {
    let exe = exe()?;
    if !exe.exists() {
        return Err(anyhow!("{} is gone (rebuilt meanwhile?)", exe.display()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peers::PEERS;

    #[test]
    fn every_repetition_runs_every_row_once_and_rotates_the_order() {
        let plan = Plan {
            quick: true,
            reps: 3,
            sizes: vec![64, 4096],
            peers: PEERS.iter().collect(),
            secs: 0.1,
            ref_secs: 0.1,
            every_byte: false,
        };
        let key = |j: &Job| (j.peer.name, j.size, j.mode, j.wait);
        let expected: usize = PEERS
            .iter()
            .map(|p| usize::from(p.throughput) + p.latency_waits.len())
            .sum::<usize>()
            * plan.sizes.len();
        let mut firsts = Vec::new();
        for rep in 0..plan.reps {
            let jobs = jobs(&plan, rep);
            let mut keys: Vec<_> = jobs.iter().map(key).collect();
            assert_eq!(keys.len(), expected);
            keys.sort();
            keys.dedup();
            assert_eq!(keys.len(), expected, "no row twice");
            firsts.push(jobs[0].peer.name);
        }
        firsts.dedup();
        assert_eq!(
            firsts.len(),
            plan.reps,
            "a different peer starts each repetition"
        );
    }
}
