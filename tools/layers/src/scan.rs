//! Reading a crate: which file is which module, and what each file imports.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::spanned::Spanned;
use syn::visit::Visit;

use crate::ReadError;

/// A module path (`["state", "mem"]`; the crate root is empty).
pub(crate) type ModPath = Vec<String>;

/// One path of one file that names a module of the same crate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Import {
    /// Line of the path in its file.
    pub line: usize,
    /// The path as written, segments joined by `::`.
    pub path: String,
    /// The module of the crate it resolves to (the longest module prefix of the path).
    pub target: Vec<String>,
    /// The path names a macro (`crate::some_macro!`): exported macros live at the root.
    pub is_macro: bool,
}

/// Every module file under `src`, by module path, with its path relative to `src`.
pub(crate) fn discover(src: &Path) -> Result<BTreeMap<ModPath, PathBuf>, ReadError> {
    let mut out = BTreeMap::new();
    walk(src, Path::new(""), &mut out)?;
    Ok(out)
}

fn walk(src: &Path, rel: &Path, out: &mut BTreeMap<ModPath, PathBuf>) -> Result<(), ReadError> {
    let dir = src.join(rel);
    let entries = std::fs::read_dir(&dir).map_err(|e| ReadError::Io(dir.clone(), e))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| ReadError::Io(dir.clone(), e))?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    let folder: ModPath = rel
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    for name in names {
        let path = rel.join(&name);
        if src.join(&path).is_dir() {
            walk(src, &path, out)?;
        } else if let Some(stem) = name.strip_suffix(".rs") {
            let mut module = folder.clone();
            let is_root = folder.is_empty() && (stem == "lib" || stem == "main");
            if stem != "mod" && !is_root {
                module.push(stem.to_string());
            }
            out.insert(module, path);
        }
    }
    Ok(())
}

/// The imports of one file (`file`, relative to `src`) whose module path is `module`.
pub(crate) fn imports(
    src: &Path,
    file: &Path,
    module: &[String],
    known: &[ModPath],
) -> Result<Vec<Import>, ReadError> {
    let full = src.join(file);
    let text = std::fs::read_to_string(&full).map_err(|e| ReadError::Io(full.clone(), e))?;
    let ast = syn::parse_file(&text).map_err(|e| ReadError::Parse(full.clone(), e))?;
    let mut v = Collector {
        cur: module.to_vec(),
        known,
        out: Vec::new(),
    };
    v.visit_file(&ast);
    Ok(v.out)
}

struct Collector<'a> {
    /// The module the visitor is in (the file's, plus inline `mod x { }` names).
    cur: ModPath,
    known: &'a [ModPath],
    out: Vec<Import>,
}

impl Collector<'_> {
    fn record(&mut self, line: usize, segs: &[String], is_macro: bool) {
        if let Some(target) = resolve(&self.cur, segs, self.known) {
            self.out.push(Import {
                line,
                path: segs.join("::"),
                target,
                is_macro,
            });
        }
    }

    /// Paths such as `crate::a::b` inside a macro's tokens (`format!("{}", crate::x::Y)`).
    fn scan_tokens(&mut self, tokens: TokenStream) {
        let flat: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < flat.len() {
            match &flat[i] {
                TokenTree::Group(g) => self.scan_tokens(g.stream()),
                TokenTree::Ident(id) if id == "crate" || id == "super" => {
                    let line = id.span().start().line;
                    let mut segs = vec![id.to_string()];
                    let mut j = i + 1;
                    while let (
                        Some(TokenTree::Punct(a)),
                        Some(TokenTree::Punct(b)),
                        Some(TokenTree::Ident(next)),
                    ) = (flat.get(j), flat.get(j + 1), flat.get(j + 2))
                    {
                        if a.as_char() != ':' || b.as_char() != ':' {
                            break;
                        }
                        segs.push(next.to_string());
                        j += 3;
                    }
                    if segs.len() > 1 {
                        self.record(line, &segs, false);
                    }
                    i = j;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
    }
}

impl<'ast> Visit<'ast> for Collector<'_> {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if m.content.is_some() {
            self.cur.push(m.ident.to_string());
            syn::visit::visit_item_mod(self, m);
            self.cur.pop();
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let line = u.span().start().line;
        let mut paths = Vec::new();
        flatten(&u.tree, &mut Vec::new(), &mut paths);
        for segs in paths {
            self.record(line, &segs, false);
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segs: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        if matches!(segs.first().map(String::as_str), Some("crate" | "super")) && segs.len() > 1 {
            self.record(p.span().start().line, &segs, false);
        }
        syn::visit::visit_path(self, p);
    }

    /// Paths inside attribute arguments (`#[error("{}", crate::schema::MAX)]`).
    fn visit_attribute(&mut self, a: &'ast syn::Attribute) {
        if let syn::Meta::List(list) = &a.meta {
            self.scan_tokens(list.tokens.clone());
        }
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        let segs: Vec<String> = m
            .path
            .segments
            .iter()
            .map(|s| s.ident.to_string())
            .collect();
        if matches!(segs.first().map(String::as_str), Some("crate" | "super")) {
            self.record(m.path.span().start().line, &segs, true);
        }
        self.scan_tokens(m.tokens.clone());
    }
}

/// Every leaf of a `use` tree as a list of segments (`a::{b, c::*}` gives `a::b` and `a::c`).
fn flatten(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) if n.ident == "self" => out.push(prefix.clone()),
        syn::UseTree::Name(n) => out.push([prefix.as_slice(), &[n.ident.to_string()]].concat()),
        syn::UseTree::Rename(r) => out.push([prefix.as_slice(), &[r.ident.to_string()]].concat()),
        syn::UseTree::Glob(_) => out.push(prefix.clone()),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                flatten(t, prefix, out);
            }
        }
    }
}

/// The crate module a path written in module `cur` names: the longest module prefix of its
/// absolute form. `None` for paths that leave the crate (other crates, `std`, local items).
fn resolve(cur: &[String], segs: &[String], known: &[ModPath]) -> Option<ModPath> {
    let first = segs.first()?;
    let (mut abs, rest): (ModPath, &[String]) = match first.as_str() {
        "crate" => (Vec::new(), &segs[1..]),
        "self" => (cur.to_vec(), &segs[1..]),
        "super" => {
            let mut base = cur.to_vec();
            let mut rest = segs;
            while rest.first().map(String::as_str) == Some("super") {
                base.pop();
                rest = &rest[1..];
            }
            (base, rest)
        }
        // 2018 paths: `use child::Item` names a sub-module of the current module.
        _ => {
            let child: ModPath = [cur, &segs[..1]].concat();
            if !known.contains(&child) {
                return None;
            }
            (cur.to_vec(), segs)
        }
    };
    abs.extend(rest.iter().cloned());
    (0..=abs.len())
        .rev()
        .map(|n| abs[..n].to_vec())
        .find(|p| known.contains(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(s: &str) -> ModPath {
        s.split('/')
            .filter(|x| !x.is_empty())
            .map(String::from)
            .collect()
    }

    #[test]
    fn resolves_crate_super_self_and_child_paths() {
        let known = vec![m(""), m("a"), m("a/b"), m("c")];
        let segs = |s: &str| s.split("::").map(String::from).collect::<Vec<_>>();
        assert_eq!(
            resolve(&m("c"), &segs("crate::a::b::Item"), &known),
            Some(m("a/b"))
        );
        assert_eq!(
            resolve(&m("a/b"), &segs("super::Item"), &known),
            Some(m("a"))
        );
        assert_eq!(
            resolve(&m("a/b"), &segs("super::super::c::X"), &known),
            Some(m("c"))
        );
        assert_eq!(resolve(&m("a"), &segs("b::Item"), &known), Some(m("a/b")));
        assert_eq!(resolve(&m("a"), &segs("std::fmt"), &known), None);
        // An inline `mod tests` inside a/b: `super` is the file's module.
        assert_eq!(
            resolve(&m("a/b/tests"), &segs("super::Item"), &known),
            Some(m("a/b"))
        );
        assert_eq!(resolve(&m("c"), &segs("crate::Item"), &known), Some(m("")));
    }
}
