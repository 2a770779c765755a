//! Ctrl-C for commands that run until interrupted (`watch`) or call after call (`migrate`,
//! `delete-instances`, which stop between calls): the first SIGINT sets a flag the
//! command polls, so it can UNWATCH and exit cleanly; a second SIGINT while the flag is still
//! set ends the process at once with status 130, so a stuck command can always be killed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// Exit status of a process ended by a second Ctrl-C (128 + SIGINT, as shells report it).
const EXIT_INTERRUPTED: i32 = 130;

static FLAG: OnceLock<Option<Arc<AtomicBool>>> = OnceLock::new();

/// Installs the handlers once; `false` when they could not be installed (Ctrl-C then keeps its
/// default action and simply ends the process).
pub fn install() -> bool {
    FLAG.get_or_init(|| {
        let flag = Arc::new(AtomicBool::new(false));
        // Registration order matters: the conditional shutdown must see the flag before the
        // second handler sets it, so the first Ctrl-C only sets it.
        let sig = signal_hook::consts::SIGINT;
        signal_hook::flag::register_conditional_shutdown(sig, EXIT_INTERRUPTED, flag.clone())
            .and_then(|_| signal_hook::flag::register(sig, flag.clone()))
            .ok()
            .map(|_| flag)
    })
    .is_some()
}

/// True (once) when Ctrl-C was pressed since the last call.
pub fn take() -> bool {
    FLAG.get()
        .and_then(Option::as_ref)
        .is_some_and(|f| f.swap(false, Ordering::SeqCst))
}
