//! One thread that terminates ONNX Runtime runs whose budget ran out.
//!
//! `arm` registers a run's `RunOptions` with its deadline and returns a guard; dropping
//! the guard (the run finished) disarms it. The thread sleeps until the earliest
//! deadline and calls `terminate()` on every run still armed past it.

use ort::session::RunOptions;
use parking_lot::{Condvar, Mutex};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

type Entry = (Instant, u64);

#[derive(Default)]
struct State {
    armed: BTreeMap<Entry, Arc<RunOptions>>,
    next_id: u64,
    stop: bool,
}

struct Shared {
    state: Mutex<State>,
    cv: Condvar,
}

/// The watchdog (one thread per scorer).
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
}

/// Disarms on drop.
pub(crate) struct Armed<'a> {
    dog: &'a Watchdog,
    key: Entry,
}

impl Drop for Armed<'_> {
    fn drop(&mut self) {
        self.dog.shared.state.lock().armed.remove(&self.key);
    }
}

impl Watchdog {
    pub(crate) fn start() -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
        });
        let s2 = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("risk-onnx-watchdog".into())
            .spawn(move || run(&s2))?;
        Ok(Self { shared })
    }

    pub(crate) fn arm(&self, opts: Arc<RunOptions>, budget: Duration) -> Armed<'_> {
        let deadline = Instant::now()
            .checked_add(budget)
            .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400 * 365));
        let mut st = self.shared.state.lock();
        st.next_id += 1;
        let key = (deadline, st.next_id);
        st.armed.insert(key, opts);
        drop(st);
        self.shared.cv.notify_one();
        Armed { dog: self, key }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.shared.state.lock().stop = true;
        self.shared.cv.notify_one();
    }
}

fn run(s: &Shared) {
    let mut st = s.state.lock();
    loop {
        if st.stop {
            return;
        }
        let now = Instant::now();
        while let Some((&key, _)) = st.armed.iter().next() {
            if key.0 > now {
                break;
            }
            if let Some(opts) = st.armed.remove(&key) {
                let _ = opts.terminate();
            }
        }
        match st.armed.keys().next().map(|k| k.0) {
            Some(at) => {
                s.cv.wait_until(&mut st, at);
            }
            None => s.cv.wait(&mut st),
        }
    }
}

/// The inputs of one run, by name (what `ort::inputs![name => value, ...]` builds).
pub(crate) type Inputs<'i, 'v> = Vec<(
    std::borrow::Cow<'i, str>,
    ort::session::SessionInputValue<'v>,
)>;

impl Watchdog {
    /// Runs `session` on `inputs`; with a `budget`, the run is terminated when it passes
    /// ([`risk_core::ScoreError::Cancelled`]). `read` takes what it needs from the
    /// outputs (they borrow the run's options, so they cannot outlive this call).
    pub(crate) fn run_within<T>(
        &self,
        session: &mut ort::session::Session,
        inputs: Inputs<'_, '_>,
        budget: Option<Duration>,
        read: impl FnOnce(&ort::session::SessionOutputs<'_>) -> Result<T, risk_core::ScoreError>,
    ) -> Result<T, risk_core::ScoreError> {
        use risk_core::ScoreError;
        let fail = |e: ort::Error| ScoreError::Failed(e.to_string());
        // Only a bounded run needs its own RunOptions (to be terminated).
        let opts = match budget {
            Some(_) => Some(Arc::new(RunOptions::new().map_err(fail)?)),
            None => None,
        };
        let _armed = match (&opts, budget) {
            (Some(o), Some(b)) => Some(self.arm(Arc::clone(o), b)),
            _ => None,
        };
        let result = match &opts {
            None => session.run(inputs),
            Some(o) => session.run_with_options(inputs, &**o),
        };
        match result {
            Ok(out) => read(&out),
            Err(e) if e.to_string().contains("terminate") => Err(ScoreError::Cancelled),
            Err(e) => Err(fail(e)),
        }
    }
}
