//! The thread a worker's background tasks run on while its run trains: the heartbeat that
//! renews the run's lease and the writer that records what the run reports. A training step
//! blocks the runtime it runs on, so they need a thread of their own; they share it, and one
//! connection to the store, so that a cluster's hundreds of workers stay within a PostgreSQL
//! server's connection limit.

use crate::store::{Store, StoreError, StoreLocation};
use std::future::Future;
use std::sync::Arc;

/// How long ending the thread waits for the shared connection to close.
const CLOSE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(1);

/// The background thread and its runtime. Its tasks run until they end or it is dropped.
pub struct Background {
    runtime: tokio::runtime::Handle,
    store: SharedStore,
    /// Ends the thread's runtime (dropping what is left of its tasks).
    end: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Background {
    /// Starts the thread for the worker of run `run_id` of `store`.
    pub fn start(store: &Store, run_id: i64) -> anyhow::Result<Background> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| anyhow::anyhow!("cannot start the runtime of the worker's heartbeat and writer: {e}"))?;
        let handle = runtime.handle().clone();
        let store = SharedStore {
            location: store.location().clone(),
            host: store.host().to_string(),
            name: format!("run {run_id}"),
            opened: Arc::default(),
        };
        let (end, ended) = tokio::sync::oneshot::channel::<()>();
        let closing = store.clone();
        let thread = std::thread::Builder::new()
            .name(format!("run {run_id} store"))
            .spawn(move || {
                runtime.block_on(async move {
                    let _ = ended.await;
                    // Politely, unless a task still holds the connection in a query that
                    // does not end (the network cut): then it is dropped with the runtime.
                    let _ = tokio::time::timeout(CLOSE_PATIENCE, closing.close()).await;
                })
            })
            .map_err(|e| anyhow::anyhow!("cannot start the thread of the worker's heartbeat and writer: {e}"))?;
        Ok(Background { runtime: handle, store, end: Some(end), thread: Some(thread) })
    }

    /// The store handle the tasks share.
    pub fn store(&self) -> SharedStore {
        self.store.clone()
    }

    /// Runs `task` on the background thread.
    pub fn spawn<F>(&self, task: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.runtime.spawn(task)
    }
}

impl Drop for Background {
    /// Ends the thread: the shared connection is closed (within `CLOSE_PATIENCE`), then
    /// what is left of the tasks is dropped with the runtime.
    fn drop(&mut self) {
        if let Some(end) = self.end.take() {
            let _ = end.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One store handle with one connection, opened at its first use and again at the next use
/// after a failure to open (the server restarting, or out of connections for now).
#[derive(Clone)]
pub struct SharedStore {
    location: StoreLocation,
    host: String,
    /// What the server lists the connection under: `workbench run 12`.
    name: String,
    opened: Arc<tokio::sync::Mutex<Option<Store>>>,
}

impl SharedStore {
    /// The handle, opened if it is not yet.
    pub async fn get(&self) -> Result<Store, StoreError> {
        let mut opened = self.opened.lock().await;
        if let Some(store) = opened.as_ref() {
            return Ok(store.clone());
        }
        let store = Store::connect_serial(&self.location, &self.name).await?.with_host(&self.host);
        *opened = Some(store.clone());
        Ok(store)
    }

    async fn close(&self) {
        if let Some(store) = self.opened.lock().await.take() {
            store.close().await;
        }
    }
}
