//! One typed method per operation of docs/protocol.md, each a thin `run` of the request built in
//! `ops` (retried per the client's policy where that is safe).

use serde_json::Value;

use super::{Client, Subscription};
use crate::error::Result;
use crate::lifecycle::{self, DeleteReply, DeleteRequest, MigrateReply, MigrateRequest};
use crate::ops::{self, *};
use crate::queries::{FindQuery, FoundPage};

impl Client {
    /// PING → `{pong: true}`. Allowed before HELLO.
    pub fn ping(&mut self) -> Result<Pong> {
        self.run(ops::ping())
    }

    /// INFO → version, uptime, role, shard count, limits, WAL totals.
    pub fn info(&mut self) -> Result<Info> {
        self.run(ops::info())
    }

    /// AUTH with a bearer token.
    pub fn auth(&mut self, token: &str) -> Result<Authenticated> {
        self.run(ops::auth(token))
    }

    /// BYE: the server answers, then closes the connection.
    pub fn bye(&mut self) -> Result<Value> {
        self.run(ops::bye())
    }

    /// PUT_MACHINE (the identical definition again is `created: false`).
    pub fn put_machine(
        &mut self,
        machine: &str,
        version: u64,
        definition: &Value,
    ) -> Result<MachinePut> {
        self.run(ops::put_machine(machine, version, definition))
    }

    /// GET_MACHINE; the latest version when `version` is `None`.
    pub fn get_machine(&mut self, machine: &str, version: Option<u64>) -> Result<Machine> {
        self.run(ops::get_machine(machine, version))
    }

    /// LIST_MACHINES.
    pub fn list_machines(&mut self) -> Result<Machines> {
        self.run(ops::list_machines())
    }

    /// CREATE_INSTANCE.
    pub fn create_instance(
        &mut self,
        machine: &str,
        version: u64,
        id: &str,
        context: &Value,
    ) -> Result<Created> {
        self.create_instance_with(machine, version, id, context, &CreateOptions::default())
    }

    /// CREATE_INSTANCE with an idempotency key (which also makes it safe to retry).
    pub fn create_instance_with(
        &mut self,
        machine: &str,
        version: u64,
        id: &str,
        context: &Value,
        opts: &CreateOptions,
    ) -> Result<Created> {
        self.run(ops::create_instance(machine, version, id, context, opts))
    }

    /// GET_INSTANCE.
    pub fn get_instance(&mut self, id: &str) -> Result<Instance> {
        self.run(ops::get_instance(id))
    }

    /// LIST_INSTANCES: one page.
    /// In cluster mode: every group's page, merged by id, with one combined cursor.
    pub fn list_instances(&mut self, filter: &ListFilter) -> Result<InstancePage> {
        if self.is_cluster() {
            let f = |cursor| {
                ops::list_instances(&ListFilter {
                    cursor,
                    ..filter.clone()
                })
            };
            return self.fan_out(filter.cursor.as_deref(), f);
        }
        self.run(ops::list_instances(filter))
    }

    /// FIND_INSTANCES: one page.
    /// In cluster mode: every group's page, merged by id (up to `limit` per group; `versions`
    /// of every group), with one combined cursor.
    pub fn find_instances(&mut self, q: &FindQuery) -> Result<FoundPage> {
        if self.is_cluster() {
            let f = |cursor| {
                crate::queries::find_instances(&FindQuery {
                    cursor,
                    ..q.clone()
                })
            };
            return self.fan_out(q.cursor.as_deref(), f);
        }
        self.run(crate::queries::find_instances(q))
    }

    /// SCAN_INSTANCES: one page (it may hold fewer than `limit` items and still go on).
    /// In cluster mode: as `find_instances` (`examined` summed).
    pub fn scan_instances(&mut self, q: &FindQuery) -> Result<FoundPage> {
        if self.is_cluster() {
            let f = |cursor| {
                crate::queries::scan_instances(&FindQuery {
                    cursor,
                    ..q.clone()
                })
            };
            return self.fan_out(q.cursor.as_deref(), f);
        }
        self.run(crate::queries::scan_instances(q))
    }

    /// FIND_INSTANCES page after page from `q.cursor` to the last: an iterator of pages that
    /// stops after the last page or the first error.
    pub fn find_pages(&mut self, q: FindQuery) -> impl Iterator<Item = Result<FoundPage>> + '_ {
        let mut next = Some(q);
        std::iter::from_fn(move || {
            let q = next.take()?;
            let page = self.find_instances(&q);
            if let Ok(FoundPage {
                next_cursor: Some(cursor),
                ..
            }) = &page
            {
                next = Some(FindQuery {
                    cursor: Some(cursor.clone()),
                    ..q
                });
            }
            Some(page)
        })
    }

    /// MIGRATE_INSTANCES: one call (at most `r.limit` instances examined).
    /// In cluster mode: one call to every group not yet done (each with its own cursor), the
    /// counts summed (`remaining` too), with one combined cursor (`None` once every group is
    /// done).
    pub fn migrate_instances(&mut self, r: &MigrateRequest) -> Result<MigrateReply> {
        if self.is_cluster() {
            let f = |cursor| {
                lifecycle::migrate_instances(&MigrateRequest {
                    cursor,
                    ..r.clone()
                })
            };
            return self.fan_out(r.cursor.as_deref(), f);
        }
        self.run(lifecycle::migrate_instances(r))
    }

    /// MIGRATE_INSTANCES call after call from `r.cursor` until the machine is walked: an
    /// iterator of replies that stops after the last or the first error (the last good reply's
    /// `cursor` resumes). Sum them with `MigrateReply::add`.
    pub fn migrate_pages(
        &mut self,
        r: MigrateRequest,
    ) -> impl Iterator<Item = Result<MigrateReply>> + '_ {
        lifecycle::pages(
            r,
            move |r| self.migrate_instances(r),
            |reply| reply.cursor.clone(),
            |r, cursor| MigrateRequest {
                cursor: Some(cursor),
                ..r
            },
        )
    }

    /// DELETE_INSTANCES: one call (at most `r.limit` instances examined).
    /// In cluster mode: as `migrate_instances`, every group not yet done, the counts summed.
    pub fn delete_instances(&mut self, r: &DeleteRequest) -> Result<DeleteReply> {
        if self.is_cluster() {
            let f = |cursor| {
                lifecycle::delete_instances(&DeleteRequest {
                    cursor,
                    ..r.clone()
                })
            };
            return self.fan_out(r.cursor.as_deref(), f);
        }
        self.run(lifecycle::delete_instances(r))
    }

    /// DELETE_INSTANCES call after call to the end (see `migrate_pages`).
    pub fn delete_pages(
        &mut self,
        r: DeleteRequest,
    ) -> impl Iterator<Item = Result<DeleteReply>> + '_ {
        lifecycle::pages(
            r,
            move |r| self.delete_instances(r),
            |reply| reply.cursor.clone(),
            |r, cursor| DeleteRequest {
                cursor: Some(cursor),
                ..r
            },
        )
    }

    /// DELETE_INSTANCE.
    pub fn delete_instance(&mut self, id: &str) -> Result<Deleted> {
        self.run(ops::delete_instance(id))
    }

    /// APPLY_EVENT.
    pub fn apply_event(
        &mut self,
        instance_id: &str,
        event: &str,
        payload: Option<&Value>,
    ) -> Result<Applied> {
        self.apply_event_with(instance_id, event, payload, &ApplyOptions::default())
    }

    /// APPLY_EVENT with expectations or an idempotency key (which makes it safe to retry).
    pub fn apply_event_with(
        &mut self,
        instance_id: &str,
        event: &str,
        payload: Option<&Value>,
        opts: &ApplyOptions,
    ) -> Result<Applied> {
        self.run(ops::apply_event(instance_id, event, payload, opts))
    }

    /// GET_HISTORY; `from` is a 1-based event number.
    pub fn history(&mut self, id: &str, from: Option<u64>, limit: Option<u64>) -> Result<History> {
        self.run(ops::get_history(id, from, limit))
    }

    /// WATCH_INSTANCE on this connection; events then arrive as pushes (`next_push`). For an
    /// iterator that survives reconnects, use `subscribe_instance`.
    pub fn watch_instance(&mut self, instance_id: &str, opts: &WatchOptions) -> Result<Watching> {
        self.run(ops::watch_instance(instance_id, opts))
    }

    /// WATCH_ALL on this connection (see `watch_instance`; `subscribe_all` for an iterator).
    pub fn watch_all(&mut self, filter: &WatchAllFilter) -> Result<Watching> {
        self.run(ops::watch_all(filter))
    }

    /// UNWATCH.
    pub fn unwatch(&mut self, subscription_id: &Value) -> Result<Unwatched> {
        self.run(ops::unwatch(subscription_id))
    }

    /// BATCH of ops made from single-op requests: `client.batch(BatchMode::Atomic,
    /// &[ops::get_instance("a").into()])`.
    /// In cluster mode a best-effort batch is split by group primary (results in order), and
    /// an atomic one goes to its slot's group primary.
    pub fn batch(&mut self, mode: BatchMode, ops: &[BatchOp]) -> Result<BatchResults> {
        if mode == BatchMode::BestEffort && self.is_cluster() {
            return self.batch_routed(ops);
        }
        if let Some(key) = crate::fanout::atomic_key(ops).filter(|_| self.is_cluster()) {
            return self.run_routed(ops::batch(mode, ops), &key);
        }
        self.run(ops::batch(mode, ops))
    }

    /// REPLICATION_STATUS: role, peers, positions and lag.
    pub fn replication_status(&mut self) -> Result<ReplicationStatus> {
        self.run(ops::replication_status())
    }

    /// PROMOTE: a replica becomes a primary.
    pub fn promote(&mut self) -> Result<Value> {
        self.run(ops::promote())
    }

    /// TIMERS_RESUME: a data dir restored with paused timers fires them from now on.
    pub fn timers_resume(&mut self) -> Result<Value> {
        self.run(ops::timers_resume())
    }

    /// WATCH_ALL as an iterator of events that owns this connection and resumes from its
    /// cursor on a new connection when the old one is lost.
    pub fn subscribe_all(self, filter: WatchAllFilter) -> Result<Subscription> {
        Subscription::all(self, filter)
    }

    /// WATCH_INSTANCE as an iterator (see `subscribe_all`).
    pub fn subscribe_instance(self, instance_id: &str, opts: WatchOptions) -> Result<Subscription> {
        Subscription::instance(self, instance_id, opts)
    }
}
