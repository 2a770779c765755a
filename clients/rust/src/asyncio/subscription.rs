//! A subscription as a `Stream` of events. A task of its own reads the connection's queue for
//! it, keeps its position, and when the connection is lost (or the client-side queue
//! overflows) opens it again from its cursor on the client's next connection, so events
//! arrive without gap or duplicate. `subscription_lagged` is delivered as `Error::Lagged`
//! with the resume cursor, then the stream resumes from it.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::mpsc;

use super::conn::Conn;
use super::{Client, SUBSCRIPTION_QUEUE_MAX};
use crate::error::{Error, Result};
use crate::ops::Event;
use crate::resume::{classify, Position, Target};
use smdb_protocol::op::Op;

/// How long a subscription keeps trying to open itself again before it yields the error.
pub const RESUBSCRIBE_FOR: Duration = Duration::from_secs(30);
/// Events handed to the consumer but not yet taken.
const DELIVERY_QUEUE: usize = 256;

pub struct Subscription {
    rx: mpsc::Receiver<Result<Event>>,
    cursor: Arc<Mutex<Option<String>>>,
    task: tokio::task::JoinHandle<()>,
}

struct Worker {
    client: Client,
    /// The connection the subscription lives on.
    conn: Arc<Conn>,
    position: Position,
    id: Value,
    queue: mpsc::Receiver<Value>,
    out: mpsc::Sender<Result<Event>>,
    cursor: Arc<Mutex<Option<String>>>,
}

impl Subscription {
    pub(super) async fn open(client: Client, target: Target) -> Result<Subscription> {
        let mut position = Position::new(target);
        let (qtx, queue) = mpsc::channel(SUBSCRIPTION_QUEUE_MAX);
        let (conn, w) = client.watch(&position.request(), qtx).await?;
        position.opened(&w);
        let cursor = Arc::new(Mutex::new(position.cursor().map(str::to_string)));
        let (out, rx) = mpsc::channel(DELIVERY_QUEUE);
        let worker = Worker {
            client,
            conn,
            position,
            id: w.subscription_id,
            queue,
            out,
            cursor: cursor.clone(),
        };
        let task = tokio::spawn(worker.run());
        Ok(Subscription { rx, cursor, task })
    }

    /// A subscription fed by another task (`watch_fanout`'s merger).
    pub(super) fn from_parts(
        rx: mpsc::Receiver<Result<Event>>,
        cursor: Arc<Mutex<Option<String>>>,
        task: tokio::task::JoinHandle<()>,
    ) -> Subscription {
        Subscription { rx, cursor, task }
    }

    /// The next event (`None` once the subscription ended for good).
    pub async fn next(&mut self) -> Option<Result<Event>> {
        self.rx.recv().await
    }

    /// The cursor after the last event delivered to this stream's queue.
    pub fn cursor(&self) -> Option<String> {
        self.cursor
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl futures_core::Stream for Subscription {
    type Item = Result<Event>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}

impl Worker {
    async fn run(mut self) {
        loop {
            let Some(push) = self.queue.recv().await else {
                // The connection is gone, or this queue overflowed and was dropped.
                if let Err(e) = self.reopen().await {
                    let _ = self.out.send(Err(e)).await;
                    return;
                }
                continue;
            };
            match classify(&push, &self.id) {
                Some(Ok(event)) => {
                    self.position.delivered(&event);
                    *self.cursor.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some(event.cursor.clone());
                    if self.out.send(Ok(event)).await.is_err() {
                        self.unwatch().await;
                        return;
                    }
                }
                Some(Err(resume_cursor)) => {
                    self.position.lagged(&resume_cursor);
                    let lag = Error::Lagged {
                        subscription_id: self.id.clone(),
                        resume_cursor,
                    };
                    if self.out.send(Err(lag)).await.is_err() {
                        return;
                    }
                    if let Err(e) = self.reopen().await {
                        let _ = self.out.send(Err(e)).await;
                        return;
                    }
                }
                None => {}
            }
        }
    }

    /// Ends the subscription on its connection, if that still lives (ids are per connection:
    /// never UNWATCH an old id on a new connection).
    async fn unwatch(&self) {
        self.conn.forget(&self.id);
        if self.conn.is_alive() {
            let p = serde_json::json!({"subscription_id": self.id});
            let _ = super::call_on(&self.conn, Op::Unwatch.as_str().into(), Some(&p), None).await;
        }
    }

    /// Opens the subscription again where it stands (after dropping the old one if its
    /// connection still lives).
    async fn reopen(&mut self) -> Result<()> {
        self.unwatch().await;
        let started = Instant::now();
        let policy = self.client.policy();
        let mut attempt = 1;
        loop {
            let (qtx, queue) = mpsc::channel(SUBSCRIPTION_QUEUE_MAX);
            match self.client.watch(&self.position.request(), qtx).await {
                Ok((conn, w)) => {
                    self.conn = conn;
                    self.position.opened(&w);
                    self.id = w.subscription_id;
                    self.queue = queue;
                    return Ok(());
                }
                Err(e) if e.is_connection_lost() && started.elapsed() < RESUBSCRIBE_FOR => {
                    tokio::time::sleep(policy.backoff(attempt)).await;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }
}
