//! A validated tree ensemble in a plain node layout: the reference walk, the source of
//! the flat fast layout, and what TreeSHAP reads.

use super::TreeError;

/// No child.
pub const LEAF: u32 = u32::MAX;
/// Deepest tree accepted.
pub const MAX_DEPTH: usize = 64;
/// How far a child's cover may exceed its parent's (relative) before the tree is refused.
/// XGBoost's children sum to their parent (non-negative hessians), so a child is never
/// larger up to rounding; the slack only absorbs rounding.
pub const COVER_SLACK: f32 = 1e-3;

/// LightGBM's zero range (`kZeroThreshold`, the float `1e-35f` read as a double): see
/// [`Ensemble::zero_as_missing`].
pub const ZERO_THRESHOLD: f32 = 1e-35;

/// Not a categorical split ([`Node::cat`]).
pub const NO_CAT: u32 = u32::MAX;
/// Most 32-bit words in one tree's category sets (2^20 words: 32 M categories).
pub const MAX_CAT_WORDS: usize = 1 << 20;

/// How a categorical split reads a value as a category.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatCast {
    /// LightGBM: truncated toward zero (`static_cast<int>`); negative after that is no
    /// category (so `-0.5` is category 0).
    Truncate,
    /// XGBoost: a value below 0 or at least 2^24 is no category (`InvalidCat`), else
    /// truncated toward zero.
    XGBoost,
}

/// A categorical split: the row's value, read as a category ([`CatCast`]), is looked up
/// in a set of categories.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatSplit {
    /// The set: category `c` is in it when bit `c % 32` of word `c / 32` is set.
    pub words: Vec<u32>,
    /// Where a missing (NaN) value goes.
    pub nan_left: bool,
    /// Where a value that is no category goes (negative after truncation).
    pub invalid_left: bool,
    /// Whether the categories in the set go left (else right).
    pub in_left: bool,
    /// How the value becomes a category.
    pub cast: CatCast,
}

impl CatSplit {
    /// Whether `v` goes left.
    #[inline]
    pub fn goes_left(&self, v: f32) -> bool {
        if v.is_nan() {
            return self.nan_left;
        }
        let c = match self.cast {
            // Truncation toward zero, as C's `static_cast<int>`; beyond i32 it saturates
            // (a huge value is then no category in any set small enough to be read).
            CatCast::Truncate => match v as i32 {
                c if c < 0 => return self.invalid_left,
                c => c as usize,
            },
            CatCast::XGBoost => {
                if !(0.0..16_777_216.0).contains(&v) {
                    return self.invalid_left;
                }
                v as usize
            }
        };
        let hit = self
            .words
            .get(c / 32)
            .is_some_and(|w| w >> (c % 32) & 1 == 1);
        hit == self.in_left
    }
}

/// One node. Internal nodes test `x[feature] < threshold` (left if true; a missing value
/// follows `default_left`), or, for a categorical split ([`cat`](Self::cat) set), the
/// tree's [`CatSplit`]; leaves carry `value`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Node {
    /// Feature index (internal nodes).
    pub feature: u32,
    /// Split threshold (internal nodes).
    pub threshold: f32,
    /// Left child or [`LEAF`].
    pub left: u32,
    /// Right child or [`LEAF`].
    pub right: u32,
    /// Direction of a missing value.
    pub default_left: bool,
    /// Leaf value (leaves).
    pub value: f32,
    /// Sum of hessians of the training rows reaching the node (TreeSHAP weights).
    pub cover: f32,
    /// Index of the node's categorical split in [`Tree::cats`], or [`NO_CAT`].
    pub cat: u32,
}

impl Node {
    /// Whether the node is a leaf.
    #[inline]
    pub fn is_leaf(&self) -> bool {
        self.left == LEAF
    }
}

/// One tree; node 0 is the root.
#[derive(Debug, Clone, PartialEq)]
pub struct Tree {
    /// Nodes.
    pub nodes: Vec<Node>,
    /// Longest root-to-leaf path (edges).
    pub depth: usize,
    /// The categorical splits its nodes name ([`Node::cat`]).
    pub cats: Vec<CatSplit>,
}

impl Tree {
    /// Validates structure: every node reachable from the root exactly once (no cycles,
    /// no shared children, no orphans), children in range, depth within [`MAX_DEPTH`],
    /// finite thresholds and leaf values, features in range; and the covers TreeSHAP
    /// divides by: finite and non-negative everywhere, positive on internal nodes, a
    /// child's at most its parent's (within [`COVER_SLACK`]).
    ///
    /// Why a zero cover on an internal node is refused rather than handled: TreeSHAP
    /// weights each branch by `cover(child) / cover(node)`, which is 0/0 there, and no
    /// value of it is exact (XGBoost's own `pred_contribs` divides the same way and
    /// yields NaN). Training does not write such nodes: a row's hessian under the
    /// logistic objectives is positive (XGBoost clamps it at 1e-16), and a split whose
    /// child gets no hessian has zero gain, so it is never made. (Only re-fitting
    /// statistics on other data, the `refresh` updater, or zero sample weights can leave
    /// one, and then XGBoost's own explanations are NaN too.) A leaf of zero cover is
    /// fine (its branch weight is exactly 0) and is accepted.
    pub fn new(nodes: Vec<Node>, tree: usize, num_features: usize) -> Result<Self, TreeError> {
        Self::with_categories(nodes, Vec::new(), tree, num_features)
    }

    /// [`new`](Self::new) for a tree with categorical splits: every node's
    /// [`cat`](Node::cat) is [`NO_CAT`] or names one of `cats`, and the sets hold at most
    /// [`MAX_CAT_WORDS`] words together.
    pub fn with_categories(
        nodes: Vec<Node>,
        cats: Vec<CatSplit>,
        tree: usize,
        num_features: usize,
    ) -> Result<Self, TreeError> {
        let bad = |node: usize, reason: String| TreeError::BadTree { tree, node, reason };
        if cats.iter().map(|c| c.words.len()).sum::<usize>() > MAX_CAT_WORDS {
            return Err(bad(
                0,
                format!("category sets of more than {MAX_CAT_WORDS} words"),
            ));
        }
        if nodes.is_empty() {
            return Err(bad(0, "tree has no nodes".into()));
        }
        let n = nodes.len();
        let mut seen = vec![false; n];
        let mut depth = 0;
        let mut stack = vec![(0usize, 0usize)];
        let mut visited = 0;
        while let Some((i, d)) = stack.pop() {
            if seen[i] {
                return Err(bad(i, "node reached twice (cycle or shared child)".into()));
            }
            seen[i] = true;
            visited += 1;
            depth = depth.max(d);
            if d > MAX_DEPTH {
                return Err(bad(i, format!("deeper than {MAX_DEPTH}")));
            }
            let nd = &nodes[i];
            if !nd.cover.is_finite() || nd.cover < 0.0 {
                return Err(bad(
                    i,
                    format!("cover {} is not a finite non-negative number", nd.cover),
                ));
            }
            match (nd.left, nd.right) {
                (LEAF, LEAF) => {
                    if !nd.value.is_finite() {
                        return Err(bad(i, format!("leaf value {} is not finite", nd.value)));
                    }
                }
                (LEAF, _) | (_, LEAF) => return Err(bad(i, "node has exactly one child".into())),
                (l, r) => {
                    for c in [l, r] {
                        if c as usize >= n {
                            return Err(bad(
                                i,
                                format!("child {c} out of range (tree has {n} nodes)"),
                            ));
                        }
                    }
                    // NaN and negative covers were refused above; this refuses 0.
                    if nd.cover <= 0.0 {
                        return Err(bad(
                            i,
                            format!(
                                "internal node has cover {} (TreeSHAP divides by it; it must \
                                 be positive)",
                                nd.cover
                            ),
                        ));
                    }
                    if nd.cat != NO_CAT && nd.cat as usize >= cats.len() {
                        return Err(bad(
                            i,
                            format!(
                                "categorical split {} out of range ({} in the tree)",
                                nd.cat,
                                cats.len()
                            ),
                        ));
                    }
                    if !nd.threshold.is_finite() {
                        return Err(bad(i, format!("threshold {} is not finite", nd.threshold)));
                    }
                    if nd.feature as usize >= num_features {
                        return Err(bad(
                            i,
                            format!(
                                "feature {} out of range (model has {num_features})",
                                nd.feature
                            ),
                        ));
                    }
                    stack.push((l as usize, d + 1));
                    stack.push((r as usize, d + 1));
                }
            }
        }
        if visited != n {
            return Err(bad(
                0,
                format!("{} node(s) unreachable from the root", n - visited),
            ));
        }
        // A tree now, with finite covers: children against parents.
        for (i, nd) in nodes.iter().enumerate().filter(|(_, nd)| !nd.is_leaf()) {
            for c in [nd.left, nd.right] {
                let cc = nodes[c as usize].cover;
                if cc > nd.cover * (1.0 + COVER_SLACK) {
                    return Err(bad(
                        i,
                        format!(
                            "child {c} has cover {cc}, more than its parent's {}",
                            nd.cover
                        ),
                    ));
                }
            }
        }
        Ok(Self { nodes, depth, cats })
    }

    /// Whether the internal node `n` of this tree sends the value `v` left.
    #[inline]
    pub fn goes_left(&self, n: &Node, v: f32) -> bool {
        if n.cat != NO_CAT {
            return self.cats[n.cat as usize].goes_left(v);
        }
        if v.is_nan() {
            n.default_left
        } else {
            v < n.threshold
        }
    }

    /// Whether any node is a categorical split (the padded layout declines such trees;
    /// the SHAP tables take them by their threshold pass).
    pub fn has_categorical(&self) -> bool {
        !self.cats.is_empty()
    }

    /// The leaf reached by `x`.
    #[inline]
    pub fn leaf(&self, x: &[f32]) -> &Node {
        let mut i = 0usize;
        loop {
            let n = &self.nodes[i];
            if n.is_leaf() {
                return n;
            }
            let left = self.goes_left(n, x[n.feature as usize]);
            i = if left { n.left } else { n.right } as usize;
        }
    }
}

/// How the margin becomes the model's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Link {
    /// The logistic of the margin: a probability (binary objectives).
    Logistic,
    /// The margin itself (squared error, absolute error, Huber, quantile, ...).
    Identity,
    /// `exp` of the margin (Poisson, gamma, Tweedie: a log link).
    Exp,
    /// One class's share of a softmax over every class's margin: a multi-class model's
    /// objective. Its per-class ensembles carry [`Identity`](Self::Identity) margins and
    /// [`MultiClassModel`](super::multiclass::MultiClassModel) takes the softmax.
    Softmax,
}

impl Link {
    /// The output for a margin.
    #[inline]
    pub fn apply(self, margin: f64) -> f64 {
        match self {
            Self::Logistic => sigmoid(margin),
            Self::Identity => margin,
            Self::Exp => margin.exp(),
            // Alone, a class's margin says nothing of its share: the margin itself.
            Self::Softmax => margin,
        }
    }

    /// Whether the output is a probability in `[0, 1]`.
    pub fn is_probability(self) -> bool {
        self == Self::Logistic
    }
}

/// A tree ensemble: margin = base margin + sum of leaves; output = `link(margin)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Ensemble {
    /// Trees.
    pub trees: Vec<Tree>,
    /// Margin added to every prediction (the base score in margin units).
    pub base_margin: f64,
    /// How the margin becomes the output.
    pub link: Link,
    /// Features the model reads.
    pub num_features: usize,
    /// Feature names, when the model has them.
    pub feature_names: Option<Vec<String>>,
    /// Features whose values in LightGBM's zero range (`|x| <= 1e-35`) are missing
    /// (LightGBM's `zero_as_missing`; empty for XGBoost): rows are read through
    /// [`prepare`](Self::prepare) before the trees.
    pub zero_as_missing: Vec<u32>,
}

impl Ensemble {
    /// Raw margin by walking every tree (reference path; prepares `x` itself).
    pub fn margin_walk(&self, x: &[f32]) -> f64 {
        let mut buf = Vec::new();
        let x = self.prepare(x, &mut buf);
        self.trees
            .iter()
            .map(|t| t.leaf(x).value as f64)
            .sum::<f64>()
            + self.base_margin
    }

    /// `x` as the trees read it: itself, or (features in
    /// [`zero_as_missing`](Self::zero_as_missing)) a copy in `buf` with their zero range
    /// read as NaN, so that it takes the default branch as LightGBM sends it.
    #[inline]
    pub fn prepare<'a>(&self, x: &'a [f32], buf: &'a mut Vec<f32>) -> &'a [f32] {
        if self.zero_as_missing.is_empty() {
            return x;
        }
        buf.clear();
        buf.extend_from_slice(x);
        for &f in &self.zero_as_missing {
            if let Some(v) = buf.get_mut(f as usize) {
                if v.abs() <= ZERO_THRESHOLD {
                    *v = f32::NAN;
                }
            }
        }
        buf
    }

    /// Whether any tree has a categorical split.
    pub fn has_categorical(&self) -> bool {
        self.trees.iter().any(Tree::has_categorical)
    }

    /// Deepest tree.
    pub fn max_depth(&self) -> usize {
        self.trees.iter().map(|t| t.depth).max().unwrap_or(0)
    }
}

/// Logistic function.
#[inline]
pub fn sigmoid(z: f64) -> f64 {
    1.0 / (1.0 + (-z).exp())
}
