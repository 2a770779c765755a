//! A subscription as an iterator of events that owns its connection. When the connection is
//! lost (a server restart, a balancer reset) it reconnects with capped backoff and opens the
//! subscription again from its cursor, so no event is missed or repeated. A
//! `subscription_lagged` is yielded as `Error::Lagged` carrying the resume cursor; iterating on
//! resumes from it (or drop the subscription to stop). WATCH_ALL through a cluster client
//! watches every group and merges (`watch_fanout`).

use std::time::{Duration, Instant};

use serde_json::Value;

use super::watch_fanout::ClusterSubscription;
use super::Client;
use crate::error::{Error, Result};
use crate::ops::{Event, WatchAllFilter, WatchOptions};
use crate::resume::{classify, Position, Target};

/// How long a subscription keeps trying to reconnect before it yields the error.
pub const RESUBSCRIBE_FOR: Duration = Duration::from_secs(30);

pub struct Subscription {
    client: Client,
    position: Position,
    id: Value,
    /// The subscription must be opened again before reading (lost connection or lag).
    reopen: bool,
    /// The connection was lost: reconnect before reopening.
    lost: bool,
    /// Reconnections so far.
    pub reconnects: u64,
    /// WATCH_ALL through a cluster client: one subscription per group, merged
    /// (`watch_fanout`); the fields above then keep only the seed connection.
    fanout: Option<Box<ClusterSubscription>>,
}

impl Subscription {
    pub(super) fn all(client: Client, filter: WatchAllFilter) -> Result<Subscription> {
        if client.is_cluster() {
            let fanout = ClusterSubscription::open(&client, filter.clone())?;
            return Ok(Subscription {
                client,
                position: Position::new(Target::All(filter)),
                id: Value::Null,
                reopen: false,
                lost: false,
                reconnects: 0,
                fanout: Some(Box::new(fanout)),
            });
        }
        Subscription::open(client, Target::All(filter))
    }

    pub(super) fn instance(client: Client, id: &str, opts: WatchOptions) -> Result<Subscription> {
        let target = Target::Instance {
            id: id.to_string(),
            opts,
        };
        Subscription::open(client, target)
    }

    fn open(client: Client, target: Target) -> Result<Subscription> {
        let mut s = Subscription {
            client,
            position: Position::new(target),
            id: Value::Null,
            reopen: true,
            lost: false,
            reconnects: 0,
            fanout: None,
        };
        s.reopen()?;
        Ok(s)
    }

    /// The cursor after the last event delivered (to store for a later `from_cursor`); over
    /// a cluster, one cursor holding each group's.
    pub fn cursor(&self) -> Option<&str> {
        match &self.fanout {
            Some(f) => Some(f.cursor()),
            None => self.position.cursor(),
        }
    }

    /// The server's id of the current subscription.
    pub fn id(&self) -> &Value {
        &self.id
    }

    fn reopen(&mut self) -> Result<()> {
        let started = Instant::now();
        let policy = self.client.retry_policy();
        let mut attempt = 1;
        loop {
            let r = if self.lost {
                self.client.reconnect().map(|()| {
                    self.reconnects += 1;
                    self.lost = false;
                })
            } else {
                Ok(())
            };
            let r = r.and_then(|()| self.client.run(self.position.request()));
            match r {
                Ok(w) => {
                    self.position.opened(&w);
                    self.id = w.subscription_id;
                    self.reopen = false;
                    return Ok(());
                }
                Err(e) if e.is_connection_lost() && started.elapsed() < RESUBSCRIBE_FOR => {
                    if policy.attempts <= 1 {
                        return Err(e);
                    }
                    self.lost = true;
                    std::thread::sleep(policy.backoff(attempt));
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The next event, waiting at most `wait`: `Ok(None)` when none came in time.
    pub fn next_timeout(&mut self, wait: Duration) -> Result<Option<Event>> {
        self.next_event(Some(wait))
    }

    fn next_event(&mut self, wait: Option<Duration>) -> Result<Option<Event>> {
        if let Some(f) = &mut self.fanout {
            return f.next_timeout(wait);
        }
        let deadline = wait.map(|w| Instant::now() + w);
        loop {
            if self.reopen {
                self.reopen()?;
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left == Some(Duration::ZERO) {
                return Ok(None);
            }
            match self.client.next_push(left) {
                Ok(Some(push)) => match classify(&push, &self.id) {
                    Some(Ok(event)) => {
                        self.position.delivered(&event);
                        return Ok(Some(event));
                    }
                    Some(Err(resume_cursor)) => {
                        self.position.lagged(&resume_cursor);
                        self.reopen = true;
                        return Err(Error::Lagged {
                            subscription_id: self.id.clone(),
                            resume_cursor,
                        });
                    }
                    None => {}
                },
                Ok(None) if deadline.is_some() => return Ok(None),
                Ok(None) => {}
                Err(e) if e.is_connection_lost() && self.client.retry_policy().attempts > 1 => {
                    self.lost = true;
                    self.reopen = true;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Ends the subscription (UNWATCH) and returns the connection.
    pub fn close(mut self) -> Result<Client> {
        if self.fanout.take().is_some() {
            // Dropped: each group's thread ends its own subscription.
            return Ok(self.client);
        }
        if !self.reopen {
            self.client.unwatch(&self.id)?;
        }
        Ok(self.client)
    }
}

impl Iterator for Subscription {
    type Item = Result<Event>;

    fn next(&mut self) -> Option<Result<Event>> {
        match self.next_event(None) {
            Ok(Some(e)) => Some(Ok(e)),
            // No deadline: `next_event` returns only with an event or an error.
            Ok(None) => None,
            Err(e) => Some(Err(e)),
        }
    }
}
