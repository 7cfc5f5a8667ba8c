//! Which bench groups the command line's filter can select, so that `bench_main` skips the
//! set-up of the others (`cargo bench ... -- '^lean/'` used to pay ~30 s of every group's
//! set-up first: LLM prefill and quantization, rule-engine agreement, tree peers, and a
//! Redis connection that panics without the server).
//!
//! Criterion 0.5 applies its filter (a regex on `group/function`) only when a benchmark
//! runs, after the target function has built its inputs, and does not expose it; so the
//! filter is read from the arguments here with criterion's own option list. The rule is
//! conservative: a group is skipped only when every `|` alternative of the filter is
//! anchored (`^...`) with a literal start that no id of the group can begin with. Any
//! other filter (unanchored, `--exact` with a different group excepted) runs every set-up,
//! as before.

/// Criterion 0.5's options that take a value (`--opt value` or `--opt=value`).
const WITH_VALUE: &[&str] = &[
    "--color",
    "-c",
    "--save-baseline",
    "-s",
    "--baseline",
    "-b",
    "--baseline-lenient",
    "--format",
    "--profile-time",
    "--load-baseline",
    "--sample-size",
    "--warm-up-time",
    "--measurement-time",
    "--nresamples",
    "--noise-threshold",
    "--confidence-level",
    "--significance-level",
    "--plotting-backend",
    "--output-format",
    "--logfile",
];

/// The filter and whether `--exact` was given, from criterion's arguments (no program name).
pub fn parse<S: AsRef<str>>(args: &[S]) -> (Option<String>, bool) {
    let mut filter = None;
    let mut exact = false;
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_ref();
        if a == "--exact" {
            exact = true;
        } else if WITH_VALUE.contains(&a) {
            i += 1; // its value
        } else if a == "--" {
            if let Some(f) = args.get(i + 1) {
                filter.get_or_insert_with(|| f.as_ref().to_string());
            }
            break;
        } else if !a.starts_with('-') && filter.is_none() {
            filter = Some(a.to_string());
        }
        i += 1;
    }
    (filter, exact)
}

/// Whether `filter` can select a benchmark of one of `groups` (ids `group/...`).
pub fn selects(filter: Option<&str>, exact: bool, groups: &[&str]) -> bool {
    let Some(f) = filter else { return true };
    if exact {
        return groups.iter().any(|g| f.starts_with(&format!("{g}/")));
    }
    let Some(alts) = alternatives(f) else {
        return true; // unbalanced: let criterion judge it
    };
    alts.iter().any(|alt| {
        let Some(anchored) = alt.strip_prefix('^') else {
            return true; // matches anywhere: any group may hold it
        };
        let lit = literal_start(anchored);
        groups.iter().any(|g| {
            let g = format!("{g}/");
            lit.starts_with(&g) || g.starts_with(&lit)
        })
    })
}

/// Whether this process's filter can select a benchmark of one of `groups`.
pub fn wanted(groups: &[&str]) -> bool {
    static PARSED: std::sync::OnceLock<(Option<String>, bool)> = std::sync::OnceLock::new();
    let (f, exact) = PARSED.get_or_init(|| {
        let args: Vec<String> = std::env::args().skip(1).collect();
        parse(&args)
    });
    selects(f.as_deref(), *exact, groups)
}

/// The top-level `|` alternatives of a regex (`None` when its brackets do not balance).
fn alternatives(re: &str) -> Option<Vec<String>> {
    let mut out = vec![String::new()];
    let (mut depth, mut class, mut esc) = (0i32, false, false);
    for ch in re.chars() {
        let top = depth == 0 && !class && !esc;
        match ch {
            _ if esc => esc = false,
            '\\' => esc = true,
            '[' if !class => class = true,
            ']' if class => class = false,
            '(' if !class => depth += 1,
            ')' if !class => depth -= 1,
            '|' if top => {
                out.push(String::new());
                continue;
            }
            _ => {}
        }
        if depth < 0 {
            return None;
        }
        out.last_mut().expect("never empty").push(ch);
    }
    (depth == 0 && !class && !esc).then_some(out)
}

/// The characters a regex matches literally before its first special one (a character
/// followed by a quantifier is not certain, so it is left out).
fn literal_start(re: &str) -> String {
    let chars: Vec<char> = re.chars().collect();
    let mut lit = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if "\\.^$*+?()[]{}|".contains(c) {
            break;
        }
        if matches!(chars.get(i + 1), Some('*' | '?' | '{')) {
            break;
        }
        lit.push(c);
    }
    lit
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(args: &[&str], groups: &[&str]) -> bool {
        let (f, exact) = parse(args);
        selects(f.as_deref(), exact, groups)
    }

    #[test]
    fn no_filter_runs_everything() {
        assert!(sel(&["--bench"], &["llm"]));
        assert!(sel(&["--bench", "--warm-up-time", "1"], &["llm"]));
    }

    #[test]
    fn anchored_filters_skip_other_groups() {
        let a = [
            "--bench",
            "^lean/",
            "--warm-up-time",
            "1",
            "--measurement-time",
            "3",
        ];
        assert!(sel(&a, &["lean"]));
        assert!(!sel(&a, &["llm"]));
        assert!(!sel(&a, &["lean_other"]));
        let b = ["--bench", "^state/|^state_scale"];
        assert!(sel(&b, &["state", "state_throughput"]));
        assert!(sel(&b, &["state_scale"]));
        assert!(sel(&b, &["state_scale_throughput"]));
        assert!(!sel(&b, &["state_redis", "state_redis_throughput"]));
        assert!(!sel(&b, &["lean"]));
        // A filter deeper than the group name, and one shorter than it.
        assert!(sel(&["^state_scale/read_update"], &["state_scale"]));
        assert!(sel(&["^tree"], &["trees", "trees_load"]));
        assert!(!sel(&["^state_scale/read"], &["state"]));
    }

    #[test]
    fn unanchored_or_unclear_filters_run_every_set_up() {
        assert!(sel(&["prefill"], &["llm"]));
        assert!(sel(&["^lean/|prefill"], &["llm"]));
        assert!(sel(&["^(lean|llm)/"], &["llm"]));
        assert!(sel(&["^(lean|quant)/"], &["llm"])); // conservative: a group in parentheses
        assert!(sel(&["^lea?n/"], &["len"])); // "le" then a quantified "a": only "le" is sure
        assert!(!sel(&["^lea?n/"], &["llm"]));
        assert!(sel(&["^lean/("], &["llm"])); // unbalanced
    }

    #[test]
    fn option_values_are_not_the_filter() {
        assert!(sel(&["--save-baseline", "lean", "^llm/"], &["llm"]));
        assert!(!sel(&["--save-baseline", "llm", "^lean/"], &["llm"]));
        assert!(!sel(&["--sample-size=10", "^lean/"], &["llm"]));
        assert!(sel(&["--", "^llm/"], &["llm"]));
    }

    #[test]
    fn exact_names_one_benchmark() {
        assert!(sel(&["--exact", "lean/example_engine_decide"], &["lean"]));
        assert!(!sel(&["--exact", "lean/example_engine_decide"], &["llm"]));
    }
}
