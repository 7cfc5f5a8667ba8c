//! A key's exact windows as its record reaches them: the event logs in the record's
//! spill (see [`super::exact`]), read and written beside the ring's buckets. Apart from
//! `exact` so that `record` (which holds the logs) and `exact` (the log itself) do not
//! import each other.

use super::exact::{EventLog, LogAt, Win};
use super::group::{Cols, GroupInput, GroupRead, GroupSpec, Kind};
use super::record::Rec;

impl Rec<'_> {
    /// The log at `at`, made on first use (`None`: the source keeps no spill).
    fn log(&mut self, at: LogAt) -> Option<&mut EventLog> {
        let sp = self
            .spill
            .as_deref_mut()?
            .get_or_insert_with(Default::default);
        if sp.logs.len() < at.n {
            sp.logs.resize_with(at.n, EventLog::default);
        }
        sp.logs.get_mut(at.li)
    }

    /// Reads exact group `spec`'s window for an event at `te` into `out` (over the
    /// ring's values), then enters the event when `add` and it passes; `keep` as in
    /// [`EventLog::insert`]. False when the read fell back to the ring's values.
    #[allow(clippy::too_many_arguments)]
    pub fn exact(
        &mut self,
        at: LogAt,
        spec: &GroupSpec,
        te: i64,
        keep: i64,
        input: &GroupInput,
        add: bool,
        out: &mut GroupRead,
    ) -> bool {
        let Some(log) = self.log(at) else {
            return false;
        };
        let label = spec.kind == Kind::Label;
        let ok = log.read(Win::of(spec), te, spec.cols >= Cols::MinMax, label, out);
        if add {
            self.exact_add(at, spec, te, keep, input);
        }
        ok
    }

    /// Enters an event in exact group `spec` (an outcome group, after the decision).
    pub fn exact_add(
        &mut self,
        at: LogAt,
        spec: &GroupSpec,
        te: i64,
        keep: i64,
        input: &GroupInput,
    ) {
        if !input.pass {
            return;
        }
        if let Some(log) = self.log(at) {
            let v = if spec.kind == Kind::Label {
                0.0
            } else {
                input.value
            };
            log.insert(Win::of(spec), te, v, spec.max_events as usize, keep);
        }
    }

    /// A label for the transaction at `te` in exact label group `at`.
    pub fn exact_label(&mut self, at: LogAt, te: i64, delta: i32) -> bool {
        self.log(at).is_some_and(|l| l.label(te, delta))
    }
}
