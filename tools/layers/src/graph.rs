//! Judging the imports: floors, the crate root, cycles.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use crate::scan::{Import, ModPath};
use crate::{Problem, Report};

/// The floor of `module`: the longest table entry that is a prefix of it. The root is above all.
fn floor_of(module: &[String], floors: &[&[&str]]) -> Option<usize> {
    if module.is_empty() {
        return Some(floors.len());
    }
    let mut best: Option<(usize, usize)> = None;
    for (floor, entries) in floors.iter().enumerate() {
        for entry in entries.iter() {
            let segs: Vec<&str> = entry.split('/').filter(|s| !s.is_empty()).collect();
            let matches =
                segs.len() <= module.len() && segs.iter().zip(module).all(|(a, b)| a == b);
            if matches && best.is_none_or(|(len, _)| segs.len() > len) {
                best = Some((segs.len(), floor));
            }
        }
    }
    best.map(|(_, floor)| floor)
}

fn name(m: &[String]) -> String {
    if m.is_empty() {
        "crate root".to_string()
    } else {
        m.join("/")
    }
}

pub(crate) fn judge(
    modules: &BTreeMap<ModPath, PathBuf>,
    imports: &BTreeMap<ModPath, Vec<Import>>,
    floors: &[&[&str]],
) -> Report {
    let mut problems = Vec::new();
    for (module, file) in modules {
        if floor_of(module, floors).is_none() {
            problems.push(Problem::Unplaced {
                file: file.display().to_string(),
                module: name(module),
            });
        }
    }
    // importer -> imported -> first line
    let mut edges: BTreeMap<&ModPath, BTreeMap<&ModPath, usize>> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for (module, list) in imports {
        if module.is_empty() {
            continue; // the root only declares and re-exports
        }
        let file = modules[module].display().to_string();
        let from = floor_of(module, floors);
        for imp in list {
            if &imp.target == module || imp.target.starts_with(module) {
                continue; // itself, or its own sub-modules
            }
            if imp.target.is_empty() {
                if !imp.is_macro && seen.insert((file.clone(), imp.line, imp.path.clone())) {
                    problems.push(Problem::ThroughRoot {
                        file: file.clone(),
                        line: imp.line,
                        path: imp.path.clone(),
                    });
                }
                continue;
            }
            let to = floor_of(&imp.target, floors);
            if let (Some(from), Some(to)) = (from, to) {
                if to > from && seen.insert((file.clone(), imp.line, imp.path.clone())) {
                    problems.push(Problem::Upward {
                        file: file.clone(),
                        line: imp.line,
                        path: imp.path.clone(),
                        target: name(&imp.target),
                        from_floor: from,
                        to_floor: to,
                    });
                }
            }
            edges
                .entry(module)
                .or_default()
                .entry(&imp.target)
                .or_insert(imp.line);
        }
    }
    for scc in strongly_connected(modules.keys().collect(), &edges) {
        let members: BTreeSet<&ModPath> = scc.iter().copied().collect();
        let mut described = Vec::new();
        for m in &scc {
            if let Some((to, line)) = edges
                .get(m)
                .and_then(|out| out.iter().find(|(to, _)| members.contains(*to)))
            {
                described.push(format!("{}:{line} -> {}", modules[*m].display(), name(to)));
            }
        }
        problems.push(Problem::Cycle { edges: described });
    }
    Report { problems }
}

/// Tarjan's algorithm; components of more than one module, each sorted, in a stable order.
fn strongly_connected<'a>(
    nodes: Vec<&'a ModPath>,
    edges: &BTreeMap<&'a ModPath, BTreeMap<&'a ModPath, usize>>,
) -> Vec<Vec<&'a ModPath>> {
    struct State<'a> {
        index: BTreeMap<&'a ModPath, usize>,
        low: BTreeMap<&'a ModPath, usize>,
        stack: Vec<&'a ModPath>,
        on_stack: BTreeSet<&'a ModPath>,
        out: Vec<Vec<&'a ModPath>>,
    }
    fn visit<'a>(
        v: &'a ModPath,
        edges: &BTreeMap<&'a ModPath, BTreeMap<&'a ModPath, usize>>,
        s: &mut State<'a>,
    ) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in edges.get(v).into_iter().flat_map(|m| m.keys().copied()) {
            if !s.index.contains_key(w) {
                visit(w, edges, s);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                comp.push(w);
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in nodes {
        if !s.index.contains_key(v) {
            visit(v, edges, &mut s);
        }
    }
    s.out.sort();
    s.out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_entry_places_a_module() {
        let m = |s: &str| s.split('/').map(String::from).collect::<Vec<_>>();
        let floors: &[&[&str]] = &[&["scorer"], &["ensemble"], &["scorer/registry"]];
        assert_eq!(floor_of(&m("scorer"), floors), Some(0));
        assert_eq!(floor_of(&m("scorer/constant"), floors), Some(0));
        assert_eq!(floor_of(&m("scorer/registry"), floors), Some(2));
        assert_eq!(floor_of(&m("scorers"), floors), None);
        assert_eq!(floor_of(&[], floors), Some(3));
    }
}
