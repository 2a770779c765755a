//! The settings a `SIGHUP` reloads without a restart (docs/protocol.md, "Session ops"): the `auth` section (the
//! token table) and the `tls` section with its certificate files.
//!
//! `Live` holds the settings in force; every front reads it when it accepts a connection (and
//! at AUTH), so new connections use new settings while open ones keep what they started with.
//! The reload runs on its own thread: it re-reads the config file, validates the whole file,
//! builds the new settings, and only then swaps them in. A reload that fails keeps the running
//! settings and logs one error line naming the key.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use crate::auth;
use crate::config::Config;
use crate::tls::ServerTls;

/// Everything a reload replaces.
pub struct Settings {
    pub auth: auth::Table,
    /// `None`: the client port speaks plaintext.
    pub tls: Option<ServerTls>,
}

impl Settings {
    /// Builds the settings from a validated config; the error names the key.
    pub fn from_config(c: &Config) -> Result<Settings, String> {
        Ok(Settings {
            auth: auth::Table::from_config(c)?,
            tls: ServerTls::load(&c.tls)?,
        })
    }

    /// One line for the log: what is in force.
    fn describe(&self) -> String {
        format!(
            "auth.required = {}, {} token(s), tls {}",
            self.auth.required,
            self.auth.len(),
            match &self.tls {
                Some(_) => "on (certificate files re-read)",
                None => "off",
            }
        )
    }
}

/// The settings in force, shared by every front.
pub struct Live {
    current: RwLock<Arc<Settings>>,
    /// Bumped by every reload that swapped settings in: an HTTP event stream polls it and
    /// checks its token again when it moves.
    generation: std::sync::atomic::AtomicU64,
    /// The `--config` file a reload re-reads (`None`: embedded defaults, nothing to reload).
    config_path: Option<PathBuf>,
}

impl Live {
    pub fn new(config: &Config, config_path: Option<PathBuf>) -> Result<Arc<Live>, String> {
        Ok(Arc::new(Live {
            current: RwLock::new(Arc::new(Settings::from_config(config)?)),
            generation: Default::default(),
            config_path,
        }))
    }

    /// The settings in force now.
    pub fn current(&self) -> Arc<Settings> {
        // A poisoned lock still holds a whole Arc (the swap is one assignment).
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// How many reloads have swapped settings in (one atomic load).
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Re-reads the config file and swaps in its `auth` and `tls` settings, or keeps the
    /// running ones and returns the reason (naming the file and key).
    pub fn reload(&self) -> Result<String, String> {
        let Some(path) = &self.config_path else {
            return Err("no --config file: nothing to reload".into());
        };
        let config = Config::load(path).map_err(|e| e.0)?;
        let next = Arc::new(Settings::from_config(&config)?);
        let line = next.describe();
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = next;
        (self.generation).fetch_add(1, std::sync::atomic::Ordering::Release);
        Ok(line)
    }
}

/// Starts the thread that reloads `live` on every SIGHUP.
pub fn reload_on_sighup(live: Arc<Live>) -> Result<(), String> {
    let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGHUP])
        .map_err(|e| format!("cannot install the SIGHUP handler: {e}"))?;
    std::thread::Builder::new()
        .name("reload".into())
        .spawn(move || {
            for _ in signals.forever() {
                match live.reload() {
                    Ok(line) => log::info!("SIGHUP: reloaded auth and tls ({line})"),
                    Err(e) => log::error!("SIGHUP: reload failed, running settings kept: {e}"),
                }
            }
        })
        .map_err(|e| format!("cannot start the reload thread: {e}"))?;
    Ok(())
}
