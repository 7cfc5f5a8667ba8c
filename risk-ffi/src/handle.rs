//! The handle registry: live handles by id, each mapped to a reference-counted object of
//! its type, so a freed, never-created or wrong-type handle is refused with
//! `RISK_ERR_HANDLE` instead of dereferenced.
//!
//! A handle is not an address: it is an id from a counter that starts at [`HANDLE_BASE`] and
//! only counts up, cast to the opaque pointer type (never dereferenced, by C or by us). Ids
//! are never reused, so a stale handle can never alias a newer one, and the registry holds
//! only the live entries: freeing a handle frees everything kept for it.
//!
//! Calls look the handle up, clone its `Arc` and release the registry lock before working,
//! so `_free` never waits for calls in flight: they finish on their own reference, and
//! later calls with the handle get `RISK_ERR_HANDLE`.

use crate::error::fail;
use crate::error::risk_result::{self, *};
use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};

/// Types a handle can name. Each implements it next to its definition; the registry
/// knows none of them: it keeps every object as `dyn Any` and a lookup downcasts to the
/// type the caller's pointer names, so a handle of another type is refused.
pub(crate) trait Handle: Send + Sync + 'static {
    /// The type's name in error messages ("engine", "subscription").
    const NAME: &'static str;
}

/// A live handle's object, of whichever [`Handle`] type registered it.
type Entry = Arc<dyn Any + Send + Sync>;

/// The entry as a `T`, if it is one.
fn downcast<T: Handle>(e: &Entry) -> Option<Arc<T>> {
    Arc::clone(e).downcast::<T>().ok()
}

/// Live handles by id.
pub(crate) struct Registry {
    live: HashMap<usize, Entry>,
    /// The id the next handle gets; never 0 (NULL), never handed out twice.
    next: usize,
}

/// The first handle id. Callers' runtimes keep handles in pointer-typed variables (Go's
/// `unsafe.Pointer`, cgo's `*C.risk_engine`), and their garbage collectors inspect them: a
/// small integer there is fatal (Go's stack copier throws "invalid pointer found on stack"
/// for any value below a page), and a value inside their heap would be mistaken for an
/// object. On 64-bit targets ids therefore start in the upper half of the address space,
/// where no user-space allocation can be (kernel addresses on x86-64 and AArch64), so a GC
/// ignores them; on 32-bit targets, above the first page.
#[cfg(target_pointer_width = "64")]
pub(crate) const HANDLE_BASE: usize = 0xFFFF_8000_0000_0000;
/// The first handle id (see the 64-bit definition).
#[cfg(not(target_pointer_width = "64"))]
pub(crate) const HANDLE_BASE: usize = 0x1000;

impl Default for Registry {
    fn default() -> Self {
        Self {
            live: HashMap::new(),
            next: HANDLE_BASE,
        }
    }
}

impl Registry {
    /// Registers `obj` under a new id and returns it as a handle. Panics (caught at the
    /// boundary) only when the ids run out: 2^63 handles on 64-bit targets.
    pub(crate) fn insert<T: Handle>(&mut self, obj: Arc<T>) -> *mut T {
        let id = self.next;
        self.next = id.checked_add(1).expect("handle ids exhausted");
        self.live.insert(id, obj);
        std::ptr::without_provenance_mut(id)
    }

    /// The object behind a live handle of type `T`.
    pub(crate) fn get<T: Handle>(&self, p: *const T) -> Result<Arc<T>, risk_result> {
        if p.is_null() {
            return Err(fail(RISK_ERR_NULL, format!("{} handle is NULL", T::NAME)));
        }
        match self.live.get(&p.addr()) {
            Some(e) => downcast(e).ok_or_else(|| {
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

    /// Removes a live handle of type `T`; `None` if it was not one.
    pub(crate) fn remove<T: Handle>(&mut self, p: *mut T) -> Option<Arc<T>> {
        if p.is_null() {
            return None;
        }
        let id = p.addr();
        if !self.live.get(&id)?.is::<T>() {
            return None;
        }
        self.live.remove(&id).and_then(|e| downcast(&e))
    }

    /// Entries the registry holds: live handles and whatever it keeps for freed ones.
    #[cfg(test)]
    pub(crate) fn retained(&self) -> usize {
        self.live.len()
    }
}

fn registry() -> &'static RwLock<Registry> {
    static R: OnceLock<RwLock<Registry>> = OnceLock::new();
    R.get_or_init(|| RwLock::new(Registry::default()))
}

/// The object behind a live handle of type `T`. The registry lock is held only for the
/// lookup: calls run on their own reference, so a long call (a poll, a drain) never
/// blocks other handles, and `_free` never waits for it.
pub(crate) fn lookup<T: Handle>(p: *const T) -> Result<Arc<T>, risk_result> {
    registry().read().unwrap_or_else(|e| e.into_inner()).get(p)
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
    let obj = Arc::new(obj);
    registry()
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(obj)
}

/// Removes a live handle of type `T`; `None` if it was not one.
pub(crate) fn unregister_handle<T: Handle>(p: *mut T) -> Option<Arc<T>> {
    registry()
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .remove(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A handle type of the tests' own (the registry's tests name no real one).
    #[derive(Debug)]
    struct Thing;

    impl Handle for Thing {
        const NAME: &'static str = "thing";
    }

    /// Another, to be refused where a `Thing` is expected.
    #[derive(Debug)]
    struct Other;

    impl Handle for Other {
        const NAME: &'static str = "other";
    }

    fn thing() -> Arc<Thing> {
        Arc::new(Thing)
    }

    #[test]
    fn freed_handles_leave_nothing_behind() {
        let mut reg = Registry::default();
        let keep = reg.insert(thing());
        let first = reg.insert(thing());
        assert!(reg.remove(first).is_some());
        let before = reg.retained();
        for _ in 0..10_000 {
            let h = reg.insert(thing());
            assert_ne!(h, first, "a new handle aliases a freed one");
            assert!(reg.remove(h).is_some());
        }
        assert_eq!(
            reg.retained(),
            before,
            "the registry grows with every handle"
        );
        assert_eq!(reg.retained(), 1);
        assert!(
            reg.live.capacity() <= 16,
            "capacity {}",
            reg.live.capacity()
        );
        // Stale handles stay refused, live ones stay served.
        assert_eq!(reg.get(first).unwrap_err(), RISK_ERR_HANDLE);
        assert!(reg.remove(first).is_none());
        assert!(reg.get(keep).is_ok());
    }

    #[test]
    fn a_handle_of_another_type_is_refused_and_kept() {
        let mut reg = Registry::default();
        let t = reg.insert(thing());
        let as_other = t.cast::<Other>();
        assert_eq!(reg.get(as_other).unwrap_err(), RISK_ERR_HANDLE);
        assert!(crate::error::last_message().contains("not a other handle"));
        assert!(
            reg.remove(as_other).is_none(),
            "freed through the wrong type"
        );
        assert!(reg.get(t).is_ok(), "a wrong-type free removed the handle");
        assert_eq!(
            reg.get(std::ptr::null::<Thing>()).unwrap_err(),
            RISK_ERR_NULL
        );
        assert!(reg.remove(t).is_some());
    }
}
