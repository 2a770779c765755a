//! Fixture tests of the WAL, each in a real glommio executor on ext4 under /tmp.

mod archive;
mod basic;
mod helpers;
mod poison;
mod reader;
mod recovery;
mod rewind;
mod snapshots;
mod space;
mod speed;
