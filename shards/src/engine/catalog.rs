//! The machine catalog of one shard: every stored (machine, version), immutable once stored.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::definition::CompiledMachine;
use super::names::NameMap;
use super::rfc3339::format_ms;
use super::Entry;

/// One stored machine version.
#[derive(Debug, Clone)]
pub(crate) struct StoredMachine {
    /// The normalised definition object.
    pub(crate) definition: Value,
    pub(crate) checksum: String,
    pub(crate) created_at_ms: u64,
    pub(crate) compiled: CompiledMachine,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Catalog {
    /// name -> version -> machine. Hashed by name for the hot path, ordered by version.
    machines: NameMap<String, BTreeMap<u32, StoredMachine>>,
    versions: usize,
    /// Stored versions that declare an index (`engine::indexes`).
    indexed: usize,
}

impl Catalog {
    pub(crate) fn get(&self, name: &str, version: u32) -> Option<&StoredMachine> {
        self.machines.get(name)?.get(&version)
    }

    /// The highest version of `name`.
    pub(crate) fn latest(&self, name: &str) -> Option<(u32, &StoredMachine)> {
        let (version, stored) = self.machines.get(name)?.last_key_value()?;
        Some((*version, stored))
    }

    /// Every stored version of `name`, ascending (`None`: no such machine).
    pub(crate) fn versions(&self, name: &str) -> Option<impl Iterator<Item = &StoredMachine>> {
        let versions = self.machines.get(name).filter(|v| !v.is_empty())?;
        Some(versions.values())
    }

    /// Every stored (version, machine) of `name`, ascending (`None`: no such machine).
    pub(crate) fn numbered_versions(
        &self,
        name: &str,
    ) -> Option<impl Iterator<Item = (u32, &StoredMachine)>> {
        let versions = self.machines.get(name).filter(|v| !v.is_empty())?;
        Some(versions.iter().map(|(v, m)| (*v, m)))
    }

    /// Stores a new version; returns false (and stores nothing) when it already exists.
    pub(crate) fn insert(&mut self, name: String, version: u32, stored: StoredMachine) -> bool {
        let versions = self.machines.entry(name).or_default();
        if versions.contains_key(&version) {
            return false;
        }
        self.indexed += usize::from(!stored.compiled.indexes().is_empty());
        versions.insert(version, stored);
        self.versions += 1;
        true
    }

    /// Whether any stored machine version has a timed transition.
    pub(crate) fn has_timers(&self) -> bool {
        (self.machines.values())
            .flat_map(|versions| versions.values())
            .any(|m| m.compiled.has_timers())
    }

    /// Whether any stored machine version declares an index.
    pub(crate) fn has_indexes(&self) -> bool {
        self.indexed > 0
    }

    /// Number of stored machine versions.
    pub(crate) fn count(&self) -> usize {
        self.versions
    }

    /// (name, versions ascending), sorted by name.
    pub(crate) fn list(&self) -> Vec<(String, Vec<u32>)> {
        let mut out: Vec<(String, Vec<u32>)> = self
            .machines
            .iter()
            .filter(|(_, versions)| !versions.is_empty())
            .map(|(name, versions)| (name.clone(), versions.keys().copied().collect()))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// One `PutMachine` entry per stored version, ordered by name then version.
    pub(crate) fn entries(&self) -> Vec<Entry> {
        let mut names: Vec<&String> = self.machines.keys().collect();
        names.sort();
        let mut out = Vec::with_capacity(self.versions);
        for name in names {
            for (version, stored) in self.machines.get(name).into_iter().flatten() {
                out.push(Entry::PutMachine {
                    machine: name.clone(),
                    version: *version,
                    definition: stored.definition.clone(),
                    checksum: stored.checksum.clone(),
                    at_ms: stored.created_at_ms,
                });
            }
        }
        out
    }
}

impl StoredMachine {
    /// The GET_MACHINE result.
    pub(crate) fn to_json(&self, name: &str, version: u32) -> Value {
        json!({
            "machine": name,
            "version": version,
            "definition": self.definition,
            "checksum": self.checksum,
            "created_at": format_ms(self.created_at_ms),
        })
    }
}
