//! [`InProcess`]: a broker on a thread of this process.

use std::time::Duration;

use super::{BrokerConfig, BrokerError, run, supervision};
use crate::client::BusClient;
use crate::runtime::BusDir;

/// A broker running on a thread of this process (tests, benches, and programs that want their
/// own bus). Dropping it shuts the broker down and waits for it.
pub struct InProcess {
    dir: BusDir,
    thread: Option<std::thread::JoinHandle<Result<(), BrokerError>>>,
}

impl InProcess {
    /// Starts a broker for `dir` and returns once it accepts connections.
    pub fn start(dir: BusDir, retention: Duration) -> Result<InProcess, BrokerError> {
        let (tx, rx) = std::sync::mpsc::channel();
        let d = dir.clone();
        let thread = std::thread::Builder::new()
            .name("snapbus-broker".into())
            .spawn(move || {
                let config = BrokerConfig {
                    dir: d,
                    retention,
                    consumer_exe: None,
                    idle_exit: None,
                };
                run(config, || {
                    let _ = tx.send(());
                })
            })
            .map_err(|e| BrokerError::Setup(format!("broker thread: {e}")))?;
        if rx.recv().is_err() {
            // The broker returned before it was ready: that is its error.
            return match thread.join() {
                Ok(Err(e)) => Err(e),
                _ => Err(BrokerError::Setup("the broker thread ended early".into())),
            };
        }
        Ok(InProcess {
            dir,
            thread: Some(thread),
        })
    }

    /// The bus's directory.
    pub fn dir(&self) -> &BusDir {
        &self.dir
    }

    /// Shuts the broker down and returns how it ended.
    pub fn stop(mut self) -> Result<(), BrokerError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), BrokerError> {
        let Some(thread) = self.thread.take() else {
            return Ok(());
        };
        if let Ok(client) = BusClient::connect(&self.dir) {
            let _ = client.down(false);
        }
        let result = thread
            .join()
            .map_err(|_| BrokerError::Setup("the broker thread panicked".into()))?;
        // It supervised no consumer and wrote no log: nothing in its directory is worth keeping.
        let _ = std::fs::remove_file(supervision::state_path(&self.dir));
        let _ = std::fs::remove_dir(self.dir.path());
        result
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}
