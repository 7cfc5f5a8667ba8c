//! The handle registry: live handles by address, each mapped to a reference-counted object
//! of its type, so a freed, never-created or wrong-type handle is refused with
//! `RISK_ERR_HANDLE` instead of dereferenced.

use crate::engine::risk_engine;
use crate::error::fail;
use crate::error::risk_result::{self, *};
use crate::subscription::risk_subscription;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};

/// Handle types. A handle is the address of a small token allocated for it and never
/// freed or reused, so a stale handle can never alias a newer one; the registry maps
/// tokens to reference-counted objects of the right type.
pub(crate) trait Handle: Sized {
    const NAME: &'static str;
    fn wrap(a: Arc<Self>) -> Entry;
    fn unwrap(e: &Entry) -> Option<&Arc<Self>>;
}

pub(crate) enum Entry {
    Engine(Arc<risk_engine>),
    Subscription(Arc<risk_subscription>),
}

impl Handle for risk_engine {
    const NAME: &'static str = "engine";
    fn wrap(a: Arc<Self>) -> Entry {
        Entry::Engine(a)
    }
    fn unwrap(e: &Entry) -> Option<&Arc<Self>> {
        match e {
            Entry::Engine(a) => Some(a),
            Entry::Subscription(_) => None,
        }
    }
}

impl Handle for risk_subscription {
    const NAME: &'static str = "subscription";
    fn wrap(a: Arc<Self>) -> Entry {
        Entry::Subscription(a)
    }
    fn unwrap(e: &Entry) -> Option<&Arc<Self>> {
        match e {
            Entry::Subscription(a) => Some(a),
            Entry::Engine(_) => None,
        }
    }
}

#[derive(Default)]
struct Registry {
    live: HashMap<usize, Entry>,
    /// Every token ever handed out, kept allocated so its address is never reused (boxed:
    /// each token needs its own stable address, which a `Vec<u64>` would move).
    #[allow(clippy::vec_box)]
    tokens: Vec<Box<u64>>,
}

fn registry_lock() -> &'static RwLock<Registry> {
    static R: OnceLock<RwLock<Registry>> = OnceLock::new();
    R.get_or_init(|| RwLock::new(Registry::default()))
}

/// The object behind a live handle of type `T`. The registry lock is held only for the
/// lookup: calls run on their own reference, so a long call (a poll, a drain) never
/// blocks other handles, and `_free` never waits.
pub(crate) fn lookup<T: Handle>(p: *const T) -> Result<Arc<T>, risk_result> {
    if p.is_null() {
        return Err(fail(RISK_ERR_NULL, format!("{} handle is NULL", T::NAME)));
    }
    let g = registry_lock().read().unwrap_or_else(|e| e.into_inner());
    match g.live.get(&(p as usize)) {
        Some(e) => T::unwrap(e).cloned().ok_or_else(|| {
            fail(
                RISK_ERR_HANDLE,
                format!("the handle is not a {} handle", T::NAME),
            )
        }),
        None => Err(fail(
            RISK_ERR_HANDLE,
            format!("not a live {} handle (freed, or never created)", T::NAME),
        )),
    }
}

/// Runs `f` on the object behind a live handle of type `T`, or returns the lookup's error.
pub(crate) fn with_handle<T: Handle>(
    p: *const T,
    f: impl FnOnce(&T) -> risk_result,
) -> risk_result {
    match lookup(p) {
        Ok(h) => f(&h),
        Err(r) => r,
    }
}

/// Registers `obj` and returns its new handle.
pub(crate) fn register_handle<T: Handle>(obj: T) -> *mut T {
    let token = Box::new(0u64);
    let addr = &*token as *const u64 as usize;
    let mut g = registry_lock().write().unwrap_or_else(|e| e.into_inner());
    g.tokens.push(token);
    g.live.insert(addr, T::wrap(Arc::new(obj)));
    addr as *mut T
}

/// Removes a live handle of type `T`; `None` if it was not one.
pub(crate) fn unregister_handle<T: Handle>(p: *mut T) -> Option<Arc<T>> {
    if p.is_null() {
        return None;
    }
    let mut g = registry_lock().write().unwrap_or_else(|e| e.into_inner());
    let addr = p as usize;
    T::unwrap(g.live.get(&addr)?)?;
    g.live.remove(&addr).and_then(|e| T::unwrap(&e).cloned())
}
