//! MIGRATE_INSTANCES and DELETE_INSTANCES on the async client (`crate::lifecycle`): one call
//! each, and a driver that calls again with each reply's cursor until the machine is walked.

use super::Client;
use crate::error::Result;
use crate::lifecycle::{self, DeleteReply, DeleteRequest, MigrateReply, MigrateRequest};

impl Client {
    /// MIGRATE_INSTANCES: one call (at most `r.limit` instances examined).
    pub async fn migrate_instances(&self, r: &MigrateRequest) -> Result<MigrateReply> {
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
    pub async fn delete_instances(&self, r: &DeleteRequest) -> Result<DeleteReply> {
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
