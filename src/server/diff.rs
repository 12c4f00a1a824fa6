//! A unified diff of two texts, line by line, for the run page's changed files: the
//! longest common subsequence of the lines, shown as hunks with three lines of context.
//! Texts too large for the quadratic table get no diff (the page links the files instead).

/// Lines of context around each change.
const CONTEXT: usize = 3;
/// The most cells (lines before × lines after) the table may have.
const MAX_CELLS: usize = 4_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Same(usize, usize),
    Del(usize),
    Add(usize),
}

/// The edit script from `a` to `b`.
fn script(a: &[&str], b: &[&str]) -> Vec<Op> {
    let (n, m) = (a.len(), b.len());
    // lcs[i][j]: the common subsequence of a[i..] and b[j..], one row of m+1 per i.
    let mut lcs = vec![0u32; (n + 1) * (m + 1)];
    let at = |i: usize, j: usize| i * (m + 1) + j;
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[at(i, j)] = if a[i] == b[j] {
                lcs[at(i + 1, j + 1)] + 1
            } else {
                lcs[at(i + 1, j)].max(lcs[at(i, j + 1)])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, Vec::with_capacity(n + m));
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            out.push(Op::Same(i, j));
            (i, j) = (i + 1, j + 1);
        } else if i < n && (j == m || lcs[at(i + 1, j)] >= lcs[at(i, j + 1)]) {
            // Removals before additions, as diff shows them.
            out.push(Op::Del(i));
            i += 1;
        } else {
            out.push(Op::Add(j));
            j += 1;
        }
    }
    out
}

/// The unified diff of `before` and `after` (hunks only, no file header); `None` when the
/// texts are too large to compare. Equal texts give an empty string.
pub fn unified(before: &str, after: &str) -> Option<String> {
    let a: Vec<&str> = before.lines().collect();
    let b: Vec<&str> = after.lines().collect();
    if (a.len() + 1).saturating_mul(b.len() + 1) > MAX_CELLS {
        return None;
    }
    let ops = script(&a, &b);
    let changed: Vec<usize> = (0..ops.len())
        .filter(|&k| !matches!(ops[k], Op::Same(..)))
        .collect();
    let mut out = String::new();
    let mut k = 0;
    while k < changed.len() {
        // A hunk: changes closer than twice the context are one.
        let start = changed[k].saturating_sub(CONTEXT);
        let mut last = changed[k];
        while k + 1 < changed.len() && changed[k + 1] <= last + 2 * CONTEXT {
            k += 1;
            last = changed[k];
        }
        let end = (last + CONTEXT + 1).min(ops.len());
        hunk(&ops[start..end], &a, &b, &mut out);
        k += 1;
    }
    Some(out)
}

fn hunk(ops: &[Op], a: &[&str], b: &[&str], out: &mut String) {
    let first_a = ops.iter().find_map(|o| match o {
        Op::Same(i, _) | Op::Del(i) => Some(*i),
        Op::Add(_) => None,
    });
    let first_b = ops.iter().find_map(|o| match o {
        Op::Same(_, j) | Op::Add(j) => Some(*j),
        Op::Del(_) => None,
    });
    let len_a = ops.iter().filter(|o| !matches!(o, Op::Add(_))).count();
    let len_b = ops.iter().filter(|o| !matches!(o, Op::Del(_))).count();
    // A side with no lines in the hunk is numbered as the line before it (unified format).
    let from = |first: Option<usize>, len: usize| first.map_or(0, |f| f + usize::from(len > 0));
    out.push_str(&format!(
        "@@ -{},{len_a} +{},{len_b} @@\n",
        from(first_a, len_a),
        from(first_b, len_b)
    ));
    for op in ops {
        let (mark, line) = match *op {
            Op::Same(i, _) => (' ', a[i]),
            Op::Del(i) => ('-', a[i]),
            Op::Add(j) => ('+', b[j]),
        };
        out.push(mark);
        out.push_str(line);
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_line_is_a_hunk_with_its_context() {
        let before = "1\n2\n3\n4\n5\n6\n7\n8\n9\n";
        let after = "1\n2\n3\n4\nfive\n6\n7\n8\n9\n";
        let d = unified(before, after).unwrap();
        assert_eq!(d, "@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n");
    }

    #[test]
    fn an_added_file_is_all_additions_and_equal_texts_have_no_hunk() {
        assert_eq!(unified("", "a\nb\n").unwrap(), "@@ -0,0 +1,2 @@\n+a\n+b\n");
        assert_eq!(unified("same\n", "same\n").unwrap(), "");
    }
}
