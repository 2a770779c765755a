//! MIGRATE_INSTANCES and DELETE_INSTANCES on the async client (`crate::lifecycle`): one call
//! each, and a driver that calls again with each reply's cursor until the machine is walked.

use super::Client;
use crate::error::Result;
use crate::lifecycle::{self, DeleteReply, DeleteRequest, MigrateReply, MigrateRequest};

impl Client {
    /// MIGRATE_INSTANCES: one call (at most `r.limit` instances examined).
    /// In cluster mode: one call to every group not yet done (each with its own cursor), the
    /// counts summed (`remaining` too), with one combined cursor (`None` once every group is
    /// done).
    pub async fn migrate_instances(&self, r: &MigrateRequest) -> Result<MigrateReply> {
        if self.is_cluster() {
            let f = |cursor| {
                lifecycle::migrate_instances(&MigrateRequest {
                    cursor,
                    ..r.clone()
                })
            };
            return self.fan_out(r.cursor.as_deref(), f).await;
        }
        self.run(lifecycle::migrate_instances(r)).await
    }

    /// MIGRATE_INSTANCES from `r.cursor` to the end: `on_call` sees each reply as it comes
    /// (its `cursor` resumes after a later error); the result is their sum
    /// (`MigrateReply::add`), `cursor` `None`.
    pub async fn migrate_to_end(
        &self,
        mut r: MigrateRequest,
        mut on_call: impl FnMut(&MigrateReply),
    ) -> Result<MigrateReply> {
        let mut total = MigrateReply::default();
        loop {
            let reply = self.migrate_instances(&r).await?;
            on_call(&reply);
            r.cursor.clone_from(&reply.cursor);
            total.add(reply);
            if r.cursor.is_none() {
                return Ok(total);
            }
        }
    }

    /// DELETE_INSTANCES: one call (at most `r.limit` instances examined).
    /// In cluster mode: as `migrate_instances`, every group not yet done, the counts summed.
    pub async fn delete_instances(&self, r: &DeleteRequest) -> Result<DeleteReply> {
        if self.is_cluster() {
            let f = |cursor| {
                lifecycle::delete_instances(&DeleteRequest {
                    cursor,
                    ..r.clone()
                })
            };
            return self.fan_out(r.cursor.as_deref(), f).await;
        }
        self.run(lifecycle::delete_instances(r)).await
    }

    /// DELETE_INSTANCES from `r.cursor` to the end (see `migrate_to_end`).
    pub async fn delete_to_end(
        &self,
        mut r: DeleteRequest,
        mut on_call: impl FnMut(&DeleteReply),
    ) -> Result<DeleteReply> {
        let mut total = DeleteReply::default();
        loop {
            let reply = self.delete_instances(&r).await?;
            on_call(&reply);
            r.cursor.clone_from(&reply.cursor);
            total.add(reply);
            if r.cursor.is_none() {
                return Ok(total);
            }
        }
    }
}
