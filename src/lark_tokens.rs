//! The tokens of Lark grammar text, as lark's own lexer of grammars cuts them (lark 1.2-1.3's
//! `TERMINALS`, tried in `grammarmask/frontends/lark_syntax.py`'s `_ORDER`: the first that matches
//! at a position wins), without Python's `re`: compiling that scanner took 0.7 ms of a fresh
//! process's first compile and running it 1 us a token.
//!
//! Each token pattern is matched here as `re` matches it, including its backtracking (the lazy
//! bodies of `"..."` and `/.../` are a small recurrence over positions, [`Bodies`]). Only ASCII
//! decides anything here; where `re` would ask whether a non-ASCII character is a space (`\s`) or a
//! digit (`\d`), [`tokens`] gives up and the caller runs `re` (that is the only thing that differs
//! between Unicode versions).

/// lark's grammar tokens, in the order they are tried (`_ORDER` of `lark_syntax.py`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Regexp,
    String,
    Comment,
    Rule,
    Terminal,
    NlOr,
    Nl,
    Backslash,
    Number,
    Ws,
    Override,
    Declare,
    Extend,
    Ignore,
    Import,
    RuleModifiers,
    DotDot,
    To,
    Op,
    Dot,
    LBra,
    LBrace,
    LPar,
    Or,
    RBra,
    RBrace,
    RPar,
    Tilde,
    Colon,
    Comma,
}

/// A token: its kind and its span in characters (code points, as Python indexes a `str`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Token {
    pub kind: Kind,
    pub start: usize,
    pub end: usize,
}

/// Why no tokens: no pattern matches at `at`, or `re` must decide (a non-ASCII character where a
/// space or a digit may stand).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    NoToken(usize),
    Unicode,
}

/// Every token of `text` in order (skipped ones included: whitespace, comments, backslashes).
pub fn tokens(text: &str) -> Result<Vec<Token>, Stop> {
    let s: Vec<char> = text.chars().collect();
    cut(&s)
}

fn cut(s: &[char]) -> Result<Vec<Token>, Stop> {
    let mut bodies = Bodies::new(s);
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < s.len() {
        let (kind, end) = token_at(s, pos, &mut bodies)?.ok_or(Stop::NoToken(pos))?;
        out.push(Token {
            kind,
            start: pos,
            end,
        });
        pos = end;
    }
    Ok(out)
}

/// A token the grammar reader takes, placed as lark places it: line and column of its first
/// character, line and column past its last (lines and columns from 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    pub token: Token,
    pub line: usize,
    pub column: usize,
    pub end_line: usize,
    pub end_column: usize,
}

/// The tokens of `text` but whitespace, comments and line continuations, placed.
pub fn placed(text: &str) -> Result<Vec<Placed>, Stop> {
    let s: Vec<char> = text.chars().collect();
    let (mut line, mut line_start) = (1, 0);
    let mut out = Vec::new();
    for token in cut(&s)? {
        let body = &s[token.start..token.end];
        let newlines = body.iter().filter(|&&c| c == '\n').count();
        let column = token.start - line_start + 1;
        if let Some(last) = body.iter().rposition(|&c| c == '\n') {
            line_start = token.start + last + 1;
        }
        if !matches!(token.kind, Kind::Ws | Kind::Comment | Kind::Backslash) {
            out.push(Placed {
                token,
                line,
                column,
                end_line: line + newlines,
                end_column: token.end - line_start + 1,
            });
        }
        line += newlines;
    }
    Ok(out)
}

/// `re`'s `\s` on an ASCII character ([`Stop::Unicode`] past ASCII).
fn space(c: char) -> Result<bool, Stop> {
    if c.is_ascii() {
        Ok(matches!(
            c,
            ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c' | '\x1c'..='\x1f'
        ))
    } else {
        Err(Stop::Unicode)
    }
}

/// `re`'s `\d` on an ASCII character ([`Stop::Unicode`] past ASCII).
fn digit(c: char) -> Result<bool, Stop> {
    if c.is_ascii() {
        Ok(c.is_ascii_digit())
    } else {
        Err(Stop::Unicode)
    }
}

/// The end of the run of `\s` from `i`.
fn spaces(s: &[char], mut i: usize) -> Result<usize, Stop> {
    while i < s.len() && space(s[i])? {
        i += 1;
    }
    Ok(i)
}

fn lower(c: Option<&char>) -> bool {
    matches!(c, Some('a'..='z'))
}

/// The first token at `pos` and its end (None: no pattern matches there).
fn token_at(s: &[char], pos: usize, bodies: &mut Bodies) -> Result<Option<(Kind, usize)>, Stop> {
    use Kind::*;
    let at = |k: usize| s.get(pos + k).copied();
    let starts = |w: &str| {
        let n = w.chars().count();
        pos + n <= s.len() && s[pos..pos + n].iter().copied().eq(w.chars())
    };
    let c = s[pos];
    // REGEXP: /(?!/)(\\/|\\\\|[^/])*?/[imslux]*
    if c == '/' && at(1) != Some('/') {
        if let Some(mut end) = bodies.end(pos + 1, '/') {
            while matches!(s.get(end), Some('i' | 'm' | 's' | 'l' | 'u' | 'x')) {
                end += 1;
            }
            return Ok(Some((Regexp, end)));
        }
    }
    // STRING: "(\\"|\\\\|[^"\n])*?"i?
    if c == '"' {
        if let Some(mut end) = bodies.end(pos + 1, '"') {
            if s.get(end) == Some(&'i') {
                end += 1;
            }
            return Ok(Some((String, end)));
        }
    }
    // COMMENT: \s*//[^\n]*|\s*#[^\n]*
    let after = spaces(s, pos)?;
    let comment = match s.get(after) {
        Some('/') => s.get(after + 1) == Some(&'/'),
        Some('#') => true,
        _ => false,
    };
    if comment {
        let mut end = after;
        while end < s.len() && s[end] != '\n' {
            end += 1;
        }
        return Ok(Some((Comment, end)));
    }
    // RULE: _?[a-z][_a-z0-9]*   TERMINAL: _?[A-Z][_A-Z0-9]*
    let first = if c == '_' { 1 } else { 0 };
    match at(first) {
        Some('a'..='z') => {
            let mut end = pos + first + 1;
            while matches!(s.get(end), Some('_' | 'a'..='z' | '0'..='9')) {
                end += 1;
            }
            return Ok(Some((Rule, end)));
        }
        Some('A'..='Z') => {
            let mut end = pos + first + 1;
            while matches!(s.get(end), Some('_' | 'A'..='Z' | '0'..='9')) {
                end += 1;
            }
            return Ok(Some((Terminal, end)));
        }
        _ => {}
    }
    // _NL_OR: (\r?\n)+\s*\|   _NL: (\r?\n)+\s*  (\s takes \r and \n: the end is the run's)
    let newline = match c {
        '\n' => Some(pos + 1),
        '\r' if at(1) == Some('\n') => Some(pos + 2),
        _ => None,
    };
    if let Some(from) = newline {
        let end = spaces(s, from)?;
        if s.get(end) == Some(&'|') {
            return Ok(Some((NlOr, end + 1)));
        }
        return Ok(Some((Nl, end)));
    }
    // BACKSLASH: \\[ ]*\n
    if c == '\\' {
        let mut end = pos + 1;
        while s.get(end) == Some(&' ') {
            end += 1;
        }
        if s.get(end) == Some(&'\n') {
            return Ok(Some((Backslash, end + 1)));
        }
    }
    // NUMBER: [+-]?\d+
    let sign = usize::from(c == '+' || c == '-');
    if let Some(&d) = s.get(pos + sign) {
        if digit(d)? {
            let mut end = pos + sign + 1;
            while end < s.len() && digit(s[end])? {
                end += 1;
            }
            return Ok(Some((Number, end)));
        }
    }
    // WS: [ \t]+
    if c == ' ' || c == '\t' {
        let mut end = pos + 1;
        while matches!(s.get(end), Some(' ' | '\t')) {
            end += 1;
        }
        return Ok(Some((Ws, end)));
    }
    for (word, kind) in [
        ("%override", Override),
        ("%declare", Declare),
        ("%extend", Extend),
        ("%ignore", Ignore),
        ("%import", Import),
    ] {
        if starts(word) {
            return Ok(Some((kind, pos + word.chars().count())));
        }
    }
    // RULE_MODIFIERS: (!|![?]?|[?]!?)(?=[_a-z])
    let rule_start = |k: usize| matches!(at(k), Some('_' | 'a'..='z'));
    match c {
        '!' if rule_start(1) => return Ok(Some((RuleModifiers, pos + 1))),
        '!' if at(1) == Some('?') && rule_start(2) => return Ok(Some((RuleModifiers, pos + 2))),
        '?' if at(1) == Some('!') && rule_start(2) => return Ok(Some((RuleModifiers, pos + 2))),
        '?' if rule_start(1) => return Ok(Some((RuleModifiers, pos + 1))),
        _ => {}
    }
    if starts("..") {
        return Ok(Some((DotDot, pos + 2)));
    }
    if starts("->") {
        return Ok(Some((To, pos + 2)));
    }
    // OP: [+*]|[?](?![a-z_])
    if c == '+' || c == '*' || (c == '?' && !(lower(at(1).as_ref()) || at(1) == Some('_'))) {
        return Ok(Some((Op, pos + 1)));
    }
    let single = match c {
        '.' => Dot, // (not before another: that was `..`)
        '[' => LBra,
        '{' => LBrace,
        '(' => LPar,
        '|' => Or,
        ']' => RBra,
        '}' => RBrace,
        ')' => RPar,
        '~' => Tilde,
        ':' => Colon,
        ',' => Comma,
        _ => return Ok(None),
    };
    Ok(Some((single, pos + 1)))
}

/// Where the lazy body `(\\q|\\\\|[^q...])*?q` of a `"..."` (q `"`, newlines excluded) or a
/// `/.../` (q `/`) ends when it starts at `i`, as `re` finds it: at each position it first tries
/// to close, then `\q`, then `\\`, then one other character, and takes the first choice that
/// leads to a close. Whether one does depends on the position alone, so it is worked out once
/// per position, from the right (`re` would search again from every quote).
struct Bodies<'a> {
    s: &'a [char],
    /// per quote kind (0 `"`, 1 `/`): the end from each position, once known (0: none)
    ends: [Vec<Option<usize>>; 2],
    /// per quote kind: positions from here on are known
    known_from: [usize; 2],
}

impl<'a> Bodies<'a> {
    fn new(s: &'a [char]) -> Self {
        Bodies {
            s,
            ends: [vec![None; s.len() + 1], vec![None; s.len() + 1]],
            known_from: [s.len() + 1, s.len() + 1],
        }
    }

    fn end(&mut self, i: usize, q: char) -> Option<usize> {
        let k = usize::from(q == '/');
        let s = self.s;
        while self.known_from[k] > i {
            let p = self.known_from[k] - 1;
            let got = |x: usize, ends: &Vec<Option<usize>>| ends.get(x).copied().flatten();
            let ends = &self.ends[k];
            let here = if p >= s.len() {
                None
            } else if s[p] == q {
                Some(p + 1)
            } else {
                let next = s.get(p + 1).copied();
                let escaped = s[p] == '\\' && (next == Some(q) || next == Some('\\'));
                let two = if escaped { got(p + 2, ends) } else { None };
                let other = s[p] != '\n' || q == '/';
                two.or_else(|| if other { got(p + 1, ends) } else { None })
            };
            self.ends[k][p] = here;
            self.known_from[k] = p;
        }
        self.ends[k][i]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<(Kind, &str)> {
        let chars: Vec<char> = text.chars().collect();
        tokens(text)
            .unwrap()
            .into_iter()
            .map(|t| {
                let a: usize = chars[..t.start].iter().map(|c| c.len_utf8()).sum();
                let b: usize = chars[..t.end].iter().map(|c| c.len_utf8()).sum();
                (t.kind, &text[a..b])
            })
            .collect()
    }

    #[test]
    fn a_rule_reads_as_lark_cuts_it() {
        use Kind::*;
        assert_eq!(
            kinds("?start: a \"b\"i /c\\/d/x | E*\n"),
            vec![
                (RuleModifiers, "?"),
                (Rule, "start"),
                (Colon, ":"),
                (Ws, " "),
                (Rule, "a"),
                (Ws, " "),
                (String, "\"b\"i"),
                (Ws, " "),
                (Regexp, "/c\\/d/x"),
                (Ws, " "),
                (Or, "|"),
                (Ws, " "),
                (Terminal, "E"),
                (Op, "*"),
                (Nl, "\n"),
            ]
        );
    }

    #[test]
    fn lazy_bodies_backtrack_as_re_does() {
        use Kind::*;
        // no close after the escaped slash: the body ends at it
        assert_eq!(kinds("/a\\/"), vec![(Regexp, "/a\\/")]);
        assert_eq!(
            kinds("\"a\\\"b\" \"é\""),
            vec![(String, "\"a\\\"b\""), (Ws, " "), (String, "\"é\"")]
        );
        // a string does not cross a newline
        assert_eq!(tokens("\"a\nb\""), Err(Stop::NoToken(0)));
        assert_eq!(
            kinds("\n  | x"),
            vec![(NlOr, "\n  |"), (Ws, " "), (Rule, "x")]
        );
        assert_eq!(kinds("  // c\n"), vec![(Comment, "  // c"), (Nl, "\n")]);
        assert_eq!(
            kinds("x~1..2"),
            vec![
                (Rule, "x"),
                (Tilde, "~"),
                (Number, "1"),
                (DotDot, ".."),
                (Number, "2")
            ]
        );
    }

    #[test]
    fn any_text_is_cut_whole_or_refused_without_a_panic() {
        let pieces = [
            "a", "B", "_", "/", "\\", "\"", "\n", "\r", " ", "|", "?", "!", ".", "-", ">", "+",
            "1", "#", "%import", "i", "~", "é", "\u{a0}", "\u{661}", "\x1c",
        ];
        let mut rng = crate::test_rng::Rng(0x1a4c_7031);
        for _ in 0..20_000 {
            let text: String = (0..rng.below(14))
                .map(|_| pieces[rng.below(pieces.len())])
                .collect();
            if let Ok(toks) = tokens(&text) {
                let mut at = 0;
                for t in &toks {
                    assert!(t.start == at && t.end > t.start, "{text:?}");
                    at = t.end;
                }
                assert_eq!(at, text.chars().count(), "{text:?}");
            }
        }
    }

    #[test]
    fn placed_tokens_count_lines_and_columns_as_lark_does() {
        let got: Vec<(Kind, usize, usize, usize, usize)> = placed("a: b // c\n  | \"x\ny\"")
            .unwrap_or_default()
            .iter()
            .map(|p| (p.token.kind, p.line, p.column, p.end_line, p.end_column))
            .collect();
        assert!(got.is_empty()); // a string does not cross a newline: refused
        let got: Vec<(Kind, usize, usize, usize, usize)> = placed("a: b // c\n  | /x/")
            .unwrap()
            .iter()
            .map(|p| (p.token.kind, p.line, p.column, p.end_line, p.end_column))
            .collect();
        use Kind::*;
        assert_eq!(
            got,
            vec![
                (Rule, 1, 1, 1, 2),
                (Colon, 1, 2, 1, 3),
                (Rule, 1, 4, 1, 5),
                (NlOr, 1, 10, 2, 4), // the comment and the spaces before it skipped
                (Regexp, 2, 5, 2, 8),
            ]
        );
    }

    #[test]
    fn unicode_spaces_and_digits_are_left_to_re() {
        assert_eq!(tokens("a\u{a0}b"), Err(Stop::Unicode));
        assert_eq!(tokens("x~1\u{661}"), Err(Stop::Unicode));
        assert!(tokens("// é\n\"é\"").is_ok());
    }
}
