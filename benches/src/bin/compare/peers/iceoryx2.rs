//! iceoryx2 publish-subscribe (benches feature `iceoryx2`): an `ipc` service of `[u8]` slices;
//! the consumer creates the service and its subscriber (and, for a sleeping consumer, an event
//! service and its listener) before it says `ready <service name>`; the producer opens the
//! service, creates its publisher, and checks the subscriber is there before `armed`.

#[cfg(not(feature = "iceoryx2"))]
use anyhow::{Result, bail};

#[cfg(not(feature = "iceoryx2"))]
use crate::common::RunArgs;
use crate::common::Wait;

pub(crate) const HOW: &str = "iceoryx2 0.10 `ipc` publish-subscribe service of `[u8]` (one \
    publisher, one subscriber, `history_size(0)`, `enable_safe_overflow(true)`: the publisher \
    never blocks, a full buffer drops its oldest message), subscriber buffer of 64 MiB / size \
    messages, 16 to 4096 (4096 for 64 B and 4 KiB, 64 for 1 MiB), static allocation, 2 loans; \
    the producer loans an uninitialised slice, `write_from_slice`s the message (one copy) and \
    `send`s it, the consumer reads each `receive()`d sample in place; spinning (and every \
    throughput run): `receive()` in a busy loop; sleeping: the producer also `notify()`s an \
    event service after each send, the consumer drains `receive()`, then blocks in the \
    listener's `timed_wait(100 ms)`.";
pub(crate) const LATENCY_WAITS: &[Wait] = &[Wait::Spin, Wait::Sleep];
/// The consumer's subscriber exists before it says `ready`, and the producer checks it sees it
/// (and connects to it) before `armed`.
pub(crate) const NEEDS_JOIN: bool = false;

#[cfg(not(feature = "iceoryx2"))]
pub(crate) fn available() -> Result<(), String> {
    Err("not built (cargo feature `iceoryx2`)".into())
}

#[cfg(not(feature = "iceoryx2"))]
pub(crate) fn consumer(_args: &RunArgs) -> Result<()> {
    bail!("iceoryx2 is not built in (cargo feature `iceoryx2`)")
}

#[cfg(not(feature = "iceoryx2"))]
pub(crate) fn producer(_args: &RunArgs) -> Result<()> {
    bail!("iceoryx2 is not built in (cargo feature `iceoryx2`)")
}

#[cfg(feature = "iceoryx2")]
pub(crate) use imp::{available, consumer, producer};

#[cfg(feature = "iceoryx2")]
mod imp {
    use std::io::Read;
    use std::os::unix::ffi::OsStrExt;
    use std::time::{Duration, Instant};

    use anyhow::{Context, Result, anyhow, bail};
    use iceoryx2::port::update_connections::UpdateConnections;
    use iceoryx2::prelude::*;
    use iceoryx2::service::port_factory;

    use snapbus_benches::wait_for;

    use crate::common::{Mode, RunArgs, Tally, Wait, finish_consumer, run_producer, say};

    /// Payload bytes the subscriber's buffer may hold (as snapbus's 64 MiB lane).
    const BUFFER_BYTES: usize = 64 << 20;
    /// The largest subscriber buffer, in messages.
    const MAX_BUFFER: usize = 4096;
    /// The smallest subscriber buffer, in messages.
    const MIN_BUFFER: usize = 16;
    /// Samples the publisher may hold loaned at once (it holds one at a time).
    const PUBLISHER_LOANS: usize = 2;
    /// Samples the subscriber may hold at once (it holds one at a time).
    const SUBSCRIBER_BORROWS: usize = 2;
    /// The sleeping consumer's wait for a notification.
    const SLEEP_TIMEOUT: Duration = Duration::from_millis(100);
    /// The consumer gives up after this long without a message.
    const SILENCE: Duration = Duration::from_secs(60);
    /// Where POSIX shared memory objects appear (for the clean-up of the run's own ones).
    const SHM_DIR: &str = "/dev/shm";

    pub(crate) fn available() -> Result<(), String> {
        Ok(())
    }

    /// The subscriber's buffer, in messages, for messages of `size` bytes.
    fn buffer_len(size: usize) -> usize {
        (BUFFER_BYTES / size.max(1)).clamp(MIN_BUFFER, MAX_BUFFER)
    }

    /// The run's scratch directory name and the harness's scratch root name (unique per run
    /// and per harness process).
    fn run_names(args: &RunArgs) -> Result<(String, String)> {
        let part = |p: Option<&std::ffi::OsStr>| {
            p.and_then(|n| n.to_str())
                .map(str::to_owned)
                .ok_or_else(|| anyhow!("bad scratch directory {}", args.scratch.display()))
        };
        let run = part(args.scratch.file_name())?;
        let root = part(args.scratch.parent().and_then(|p| p.file_name()))?;
        Ok((root, run))
    }

    /// The prefix of the shared memory objects of every run of this harness process (our
    /// parent): `iox2_sbc<harness pid>_`.
    fn harness_prefix() -> String {
        format!("iox2_sbc{}_", std::os::unix::process::parent_id())
    }

    /// The prefix of the run's shared memory objects (`/dev/shm/<prefix>…`): the harness's
    /// prefix and a hash of the run's scratch path (short: the listener's socket path, under
    /// the scratch directory, must fit in 108 bytes).
    fn shm_prefix(args: &RunArgs) -> String {
        // FNV-1a, 64 bits, folded to 32.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in args.scratch.as_os_str().as_bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        format!("{}{:08x}_", harness_prefix(), (h ^ (h >> 32)) as u32)
    }

    /// The run's own iceoryx2 domain, so that a run leaves nothing behind and no two runs (or
    /// other iceoryx2 users) meet: its files under the run's scratch directory (removed by the
    /// harness), its shared memory objects named with a prefix of its own.
    fn domain(args: &RunArgs) -> Result<Config> {
        let mut config = Config::default();
        let root = args.scratch.join("iox2");
        let root = Path::new(root.as_os_str().as_bytes())
            .map_err(|e| anyhow!("iceoryx2 root {}: {e:?}", root.display()))?;
        config.global.set_root_path(&root);
        let prefix = shm_prefix(args);
        config.global.prefix = FileName::new(prefix.as_bytes())
            .map_err(|e| anyhow!("iceoryx2 prefix {prefix:?}: {e:?}"))?;
        Ok(config)
    }

    /// Removes the shared memory objects of the run's domain that are left: after a normal end
    /// only the global management segment (a node counter iceoryx2 keeps across processes and
    /// never removes itself); after a failure whatever the other process, which the harness
    /// kills, still has (unlinking a name leaves its mappings valid).
    fn remove_shm(args: &RunArgs) -> Result<()> {
        let prefix = shm_prefix(args);
        remove_shm_where(|name| name.starts_with(&prefix))
    }

    /// Removes what runs that ended without cleaning up left (a child killed by the watchdog,
    /// a harness killed): the objects of harness processes that are gone, and those of earlier
    /// runs of this harness (it runs one job at a time).
    fn remove_stale_shm(args: &RunArgs) -> Result<()> {
        let ours = harness_prefix();
        let this_run = shm_prefix(args);
        remove_shm_where(|name| {
            let Some(rest) = name.strip_prefix("iox2_sbc") else {
                return false;
            };
            let Some((pid, _)) = rest.split_once('_') else {
                return false;
            };
            if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
                return false;
            }
            if name.starts_with(&ours) {
                !name.starts_with(&this_run)
            } else {
                !std::path::Path::new(&format!("/proc/{pid}")).exists()
            }
        })
    }

    fn remove_shm_where(mut doomed: impl FnMut(&str) -> bool) -> Result<()> {
        let Ok(dir) = std::fs::read_dir(SHM_DIR) else {
            return Ok(());
        };
        for entry in dir.flatten() {
            let name = entry.file_name();
            if name.to_str().is_some_and(&mut doomed) {
                match std::fs::remove_file(entry.path()) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => {
                        return Err(e)
                            .with_context(|| format!("remove {}", entry.path().display()));
                    }
                }
            }
        }
        Ok(())
    }

    /// The run's publish-subscribe service name.
    fn service_name(args: &RunArgs) -> Result<String> {
        let (root, run) = run_names(args)?;
        Ok(format!("snapbus/compare/{root}/{run}"))
    }

    /// The name of the event service a sleeping consumer waits on.
    fn event_name(service: &str) -> String {
        format!("{service}/wake")
    }

    fn svc_name(name: &str) -> Result<ServiceName> {
        ServiceName::new(name).map_err(|e| anyhow!("service name {name:?}: {e:?}"))
    }

    /// A node of this process in the run's domain; signal handling off, so that the harness's
    /// signals end the process as they do every other peer's.
    fn node(args: &RunArgs) -> Result<Node<ipc::Service>> {
        NodeBuilder::new()
            .config(&domain(args)?)
            .signal_handling_mode(SignalHandlingMode::Disabled)
            .create::<ipc::Service>()
            .map_err(|e| anyhow!("iceoryx2 node: {e:?}"))
    }

    /// Whether the consumer sleeps (on an event service).
    fn sleeps(args: &RunArgs) -> bool {
        args.mode == Mode::Latency && args.wait == Wait::Sleep
    }

    type PubSubService = port_factory::publish_subscribe::PortFactory<ipc::Service, [u8], ()>;
    type EventService = port_factory::event::PortFactory<ipc::Service>;

    /// A service from its `builder`: created (`create`) or opened; an error names `what`.
    fn create_or_open<B, T, C: std::fmt::Debug, O: std::fmt::Debug>(
        builder: B,
        create: bool,
        what: &str,
        create_it: impl FnOnce(B) -> Result<T, C>,
        open_it: impl FnOnce(B) -> Result<T, O>,
    ) -> Result<T> {
        if create {
            create_it(builder).map_err(|e| anyhow!("create {what}: {e:?}"))
        } else {
            open_it(builder).map_err(|e| anyhow!("open {what}: {e:?}"))
        }
    }

    /// The run's publish-subscribe service of `[u8]` with a `buffer`-message subscriber
    /// buffer: created by the consumer (`create`), opened by the producer.
    fn pubsub_service(
        node: &Node<ipc::Service>,
        name: &str,
        buffer: usize,
        create: bool,
    ) -> Result<PubSubService> {
        let builder = node
            .service_builder(&svc_name(name)?)
            .publish_subscribe::<[u8]>()
            .max_publishers(1)
            .max_subscribers(1)
            .history_size(0)
            .subscriber_max_buffer_size(buffer)
            .subscriber_max_borrowed_samples(SUBSCRIBER_BORROWS)
            .enable_safe_overflow(true);
        create_or_open(
            builder,
            create,
            &format!("the publish-subscribe service {name:?}"),
            |b| b.create(),
            |b| b.open(),
        )
    }

    /// The event service a sleeping consumer waits on (`None` when it spins): created by the
    /// consumer (`create`), opened by the producer.
    fn event_service(
        node: &Node<ipc::Service>,
        args: &RunArgs,
        name: &str,
        create: bool,
    ) -> Result<Option<EventService>> {
        if !sleeps(args) {
            return Ok(None);
        }
        let builder = node
            .service_builder(&svc_name(&event_name(name))?)
            .event()
            .max_notifiers(1)
            .max_listeners(1);
        create_or_open(
            builder,
            create,
            "the event service",
            |b| b.create(),
            |b| b.open(),
        )
        .map(Some)
    }

    pub(crate) fn consumer(args: &RunArgs) -> Result<()> {
        let tally = match receive(args) {
            Ok(t) => t,
            Err(e) => {
                let _ = remove_shm(args);
                return Err(e);
            }
        };
        // Every iceoryx2 object of this process is gone by now (before the parent hears the
        // result and lets the producer end and clean up).
        finish_consumer(tally)
    }

    /// Sets up, says `ready`, receives until the end message.
    fn receive(args: &RunArgs) -> Result<Tally> {
        remove_stale_shm(args)?;
        let name = service_name(args)?;
        let node = node(args)?;
        let buffer = buffer_len(args.size);
        let service = pubsub_service(&node, &name, buffer, true)?;
        let subscriber = service
            .subscriber_builder()
            .buffer_size(buffer)
            .create()
            .map_err(|e| anyhow!("create the subscriber: {e:?}"))?;
        let event = event_service(&node, args, &name, true)?;
        let listener = event
            .as_ref()
            .map(|e| e.listener_builder().create())
            .transpose()
            .map_err(|e| anyhow!("create the listener: {e:?}"))?;
        say(&format!("ready {name}"))?;

        let mut tally = Tally::new(args);
        match &listener {
            None => {
                // Busy-poll `receive()`; the clock is read only after 65536 empty polls.
                let mut idle = 0u64;
                let mut idle_since = Instant::now();
                loop {
                    match subscriber.receive().context("receive")? {
                        Some(sample) => {
                            idle = 0;
                            if !tally.on_message(sample.payload()) {
                                break;
                            }
                        }
                        None => {
                            idle += 1;
                            if idle % (1 << 16) == 0 {
                                if idle == 1 << 16 {
                                    idle_since = Instant::now();
                                } else if idle_since.elapsed() > SILENCE {
                                    bail!("nothing from the producer for {SILENCE:?}");
                                }
                            }
                            std::hint::spin_loop();
                        }
                    }
                }
            }
            Some(listener) => {
                let mut last_seen = Instant::now();
                'run: loop {
                    while let Some(sample) = subscriber.receive().context("receive")? {
                        last_seen = Instant::now();
                        if !tally.on_message(sample.payload()) {
                            break 'run;
                        }
                    }
                    listener
                        .timed_wait(|_| {}, SLEEP_TIMEOUT)
                        .map_err(|e| anyhow!("listener wait: {e:?}"))?;
                    if last_seen.elapsed() > SILENCE {
                        bail!("nothing from the producer for {SILENCE:?}");
                    }
                }
            }
        }
        // Ports, then services, then the node (the last process to let go of a service
        // removes it).
        drop(listener);
        drop(event);
        drop(subscriber);
        drop(service);
        drop(node);
        Ok(tally)
    }

    pub(crate) fn producer(args: &RunArgs) -> Result<()> {
        if let Err(e) = send(args) {
            let _ = remove_shm(args);
            return Err(e);
        }
        // Nothing of the run's domain is in use any more: the consumer let go of everything
        // before its result, this process just did.
        remove_shm(args)
    }

    /// Connects, runs the producer's side, says `done`, then holds on to the publisher (and
    /// the samples the consumer may still be reading) until the parent, which has the
    /// consumer's result by then, closes our stdin.
    fn send(args: &RunArgs) -> Result<()> {
        let name = args.rendezvous.as_str();
        let node = node(args)?;
        let service = pubsub_service(&node, name, buffer_len(args.size), false)?;
        let publisher = service
            .publisher_builder()
            .initial_max_slice_len(args.size)
            .max_loaned_samples(PUBLISHER_LOANS)
            .create()
            .map_err(|e| anyhow!("create the publisher: {e:?}"))?;
        let event = event_service(&node, args, name, false)?;
        let notifier = event
            .as_ref()
            .map(|e| e.notifier_builder().create())
            .transpose()
            .map_err(|e| anyhow!("create the notifier: {e:?}"))?;

        // The consumer's subscriber (and listener) exist before it says `ready`; make sure
        // this publisher is connected to them before `armed`, so that nothing sent after `go`
        // is lost for want of a connection.
        let timeout = Duration::from_secs(30);
        if !wait_for(timeout, || {
            service.dynamic_config().number_of_subscribers() >= 1
        }) {
            bail!("no subscriber on {name:?}");
        }
        publisher
            .update_connections()
            .map_err(|e| anyhow!("connect to the subscriber: {e:?}"))?;
        if let Some(e) = &event
            && !wait_for(timeout, || e.dynamic_config().number_of_listeners() >= 1)
        {
            bail!("no listener on {:?}", event_name(name));
        }

        let report = run_producer(
            args,
            &[],
            |msg| {
                let sample = publisher
                    .loan_slice_uninit(msg.len())
                    .map_err(|e| anyhow!("loan: {e:?}"))?;
                let receivers = sample
                    .write_from_slice(msg)
                    .send()
                    .map_err(|e| anyhow!("send: {e:?}"))?;
                if receivers == 0 {
                    bail!("the subscriber is gone");
                }
                if let Some(n) = &notifier {
                    n.notify().map_err(|e| anyhow!("notify: {e:?}"))?;
                }
                Ok(())
            },
            || Ok(()),
        )?;
        say(&format!("done {}", serde_json::to_string(&report)?))?;
        let mut rest = Vec::new();
        let _ = std::io::stdin().lock().read_to_end(&mut rest);
        drop(notifier);
        drop(event);
        drop(publisher);
        drop(service);
        drop(node);
        Ok(())
    }
}
