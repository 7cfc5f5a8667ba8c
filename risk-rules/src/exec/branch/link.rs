//! Linking: a rule set's separately built rule programs joined into one program with a
//! single exit, live rules first, each hit recorded by its own node.

use super::program::{Branches, Linked, Node, NodeInfo, Test, FALSE, TRUE};
use crate::error::Span;

impl Branches {
    /// Links the separately compiled rules into one program: `live` rules (index,
    /// entry) in evaluation order, then `shadow` rules. Each rule's true exit goes to a
    /// [`Test::Hit`] (or [`Test::Shadow`]) node that records it, its false exit straight
    /// to the next rule, so a whole evaluation is one loop with a single exit. With
    /// `first_hit`, a live hit ends the live part. Returns the program and, per rule in
    /// the order given, its segment `(entry, hit node)`.
    pub fn link(
        &self,
        live: &[(u32, u32)],
        shadow: &[(u32, u32)],
        first_hit: bool,
    ) -> (Branches, Linked) {
        let mut out = Branches {
            nodes: Vec::with_capacity(self.nodes.len() + live.len() + shadow.len()),
            info: Vec::with_capacity(self.nodes.len() + live.len() + shadow.len()),
            arith: self.arith.clone(),
            pairs: self.pairs.clone(),
            em: self.em.clone(),
        };
        let mut linked = Linked::default();
        let mut patch_end: Vec<usize> = Vec::new();
        for (part, rules) in [(0, live), (1, shadow)] {
            let part_start = out.nodes.len() as u32;
            // Hit nodes of `first_hit` live rules, to point at the shadow part.
            let mut to_shadow: Vec<usize> = Vec::new();
            for &(rule, entry) in rules {
                if entry == FALSE {
                    continue;
                }
                let base = out.nodes.len();
                let (lo, hi) = if entry == TRUE {
                    (0, 0)
                } else {
                    (entry as usize, self.rule_end(entry as usize))
                };
                let hit = (base + (hi - lo)) as u32;
                let next = hit + 1;
                let map = |i: u32| match i {
                    TRUE => hit,
                    i if (lo as u32..hi as u32).contains(&i) => base as u32 + (i - lo as u32),
                    // FALSE, or the successor of a node no path reaches.
                    _ => next,
                };
                for k in lo..hi {
                    let n = self.nodes[k];
                    out.nodes.push(Node {
                        test: n.test,
                        t: map(n.t),
                        f: map(n.f),
                    });
                    out.info.push(self.info[k].clone());
                }
                out.nodes.push(Node {
                    test: if part == 0 {
                        Test::Hit(rule)
                    } else {
                        Test::Shadow(rule)
                    },
                    t: next,
                    f: next,
                });
                out.info.push(NodeInfo {
                    span: Span::new(0, 0),
                    slots: Vec::new(),
                });
                if part == 0 && first_hit {
                    to_shadow.push(hit as usize);
                }
                linked.segments.push((rule, base as u32, hit));
            }
            if part == 0 {
                linked.live_start = part_start;
                patch_end = to_shadow;
            } else {
                linked.shadow_start = part_start;
            }
        }
        // The live part falls through into the shadow part, which falls off the end.
        let shadow_start = linked.shadow_start;
        for i in patch_end {
            out.nodes[i].t = shadow_start;
            out.nodes[i].f = shadow_start;
        }
        let end = out.nodes.len() as u32;
        for n in &mut out.nodes {
            for t in [&mut n.t, &mut n.f] {
                if *t >= end && *t < FALSE {
                    *t = FALSE;
                }
            }
        }
        (out, linked)
    }

    /// One past the last node of the rule program entered at `entry` (programs are
    /// contiguous, entry first; the end is the largest node index reachable).
    fn rule_end(&self, entry: usize) -> usize {
        let mut end = entry + 1;
        let mut k = entry;
        while k < end {
            let n = &self.nodes[k];
            for t in [n.t, n.f] {
                if t < FALSE {
                    end = end.max(t as usize + 1);
                }
            }
            k += 1;
        }
        end
    }
}
