//! The reasoning budget: how many tokens a model may generate inside a reasoning block
//! (`<think>` ... `</think>`, or gpt-oss's analysis channel) before the block is closed for
//! it. On a paged CPU a thinking model can spend minutes in a block; llama-server's
//! `--reasoning-budget` and Anthropic's `thinking.budget_tokens` bound it.
//!
//! [`ReasoningBudget`] is the state machine of llama.cpp's `reasoning-budget` sampler: it
//! watches the generated text for the block's opening, counts the tokens inside, and once
//! the budget is spent (and the text is at a character boundary) names the tokens of a
//! message and the closing, one per step, for the sampler to force. A block the model
//! closes itself ends the count; a new opening starts a fresh one. Without a budget it only
//! counts (the replies' `reasoning_tokens`). The tags are matched in the text, not as
//! token sequences: a grammar may make a model write `analysis` in other pieces than the
//! tokenizer would, and the reply's parser reads text too. Pure: it sees token ids and
//! their bytes only, and tests drive it without a model.

/// Where a [`ReasoningBudget`] stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetState {
    /// Outside a block, watching for its opening.
    Idle,
    /// Inside a block, counting.
    Counting,
    /// The budget is spent, but the text ends inside a character: the close waits for it.
    WaitingForCharacter,
    /// Forcing the closing tokens; the next is `forced[at]`.
    Forcing { at: usize },
    /// The block was closed (by the model or forced); watching for another opening.
    Done,
}

/// Invariants:
/// 1. `open` (its tokens and text), `close` (its text) and `forced` are not empty (`new`
///    refuses otherwise);
/// 2. `recent` holds the last bytes of the text accepted since the last change of state,
///    fewer than the longer tag's text, so the match of a tag never spans a state change
///    (a forced closing never counts as the model opening a block);
/// 3. in `Forcing { at }`, `at < forced.len()`;
/// 4. with a budget, `left <= budget`, and in `Counting` `left > 0` (a spent budget
///    leaves `Counting` at once);
/// 5. without `forces`, there is no budget, and the state is never `WaitingForCharacter`
///    or `Forcing` (nothing, not even a client's end, closes a block).
#[derive(Debug, Clone)]
pub struct ReasoningBudget {
    /// Tokens per block (`None`: no limit, only counted).
    budget: Option<u32>,
    /// The opening's tokens, as the vocabulary writes it.
    open: Vec<i32>,
    open_text: Vec<u8>,
    close_text: Vec<u8>,
    forced: Vec<i32>,
    state: BudgetState,
    left: u32,
    recent: Vec<u8>,
    /// The longer tag's text's length: `recent` keeps one byte fewer.
    window: usize,
    /// Whether the text ended on a whole character after the last token taken.
    at_char_boundary: bool,
    /// Tokens counted inside blocks so far.
    counted: u32,
    /// Blocks whose close was forced.
    closes_forced: u32,
    /// Whether a close may be forced at all ([`ReasoningBudget::count_only`] clears it).
    forces: bool,
    /// While everything the reply wrote is the start of the opening (and no block was
    /// opened yet): how many bytes of it.
    opening_so_far: Option<usize>,
}

/// A budget that cannot be set up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    #[error("the reasoning block's {0} tag is empty or not in the vocabulary")]
    EmptyTag(&'static str),
}

impl ReasoningBudget {
    /// A budget of `budget` tokens per block (`None`: none, the blocks are only counted)
    /// opened by the text `open_text` (whose tokens are `open`) and closed by `close_text`;
    /// `forced` is what a spent budget writes (the tokens of a message, then the close).
    /// `starts_open`: the prompt already opened a block (the template writes the opening),
    /// so counting starts with the first generated token.
    pub fn new(
        budget: Option<u32>,
        (open, open_text): (Vec<i32>, &[u8]),
        close_text: &[u8],
        forced: Vec<i32>,
        starts_open: bool,
    ) -> Result<ReasoningBudget, BudgetError> {
        for (name, empty) in [
            ("opening", open.is_empty() || open_text.is_empty()),
            ("closing", close_text.is_empty()),
            ("forced", forced.is_empty()),
        ] {
            if empty {
                return Err(BudgetError::EmptyTag(name));
            }
        }
        let window = open_text.len().max(close_text.len());
        let mut b = ReasoningBudget {
            budget,
            open,
            open_text: open_text.to_vec(),
            close_text: close_text.to_vec(),
            forced,
            state: BudgetState::Idle,
            left: budget.unwrap_or(0),
            recent: Vec::with_capacity(window),
            window,
            at_char_boundary: true,
            counted: 0,
            closes_forced: 0,
            forces: true,
            opening_so_far: Some(0),
        };
        if starts_open {
            b.enter_block();
        }
        Ok(b)
    }

    pub fn state(&self) -> BudgetState {
        self.state
    }

    /// Whether the text is inside a reasoning block (its close not yet taken).
    pub fn in_block(&self) -> bool {
        !matches!(self.state, BudgetState::Idle | BudgetState::Done)
    }

    /// The token the next pick must be, while a close is forced.
    pub fn forced_token(&self) -> Option<i32> {
        match self.state {
            BudgetState::Forcing { at } => self.forced.get(at).copied(),
            _ => None,
        }
    }

    /// The block's opening when it is one token (`<think>` in Qwen's vocabularies): what
    /// a constrained reply's first pick may take outside its grammar.
    pub fn opening_token(&self) -> Option<i32> {
        match self.open.as_slice() {
            [t] => Some(*t),
            _ => None,
        }
    }

    /// Whether all the reply wrote so far is the start of the block's opening, which it
    /// may still complete (and it has not opened a block yet).
    pub fn opening_under_way(&self) -> bool {
        self.opening_so_far.is_some()
    }

    /// Only count from now on: no close is forced, by the budget or by
    /// [`ReasoningBudget::end_now`] (an answer under a strict grammar, which could take a
    /// block's opening as text, a JSON string's, and a forced message with it).
    pub fn count_only(&mut self) {
        self.forces = false;
        self.budget = None;
        self.left = 0;
        if matches!(
            self.state,
            BudgetState::WaitingForCharacter | BudgetState::Forcing { .. }
        ) {
            self.set(BudgetState::Counting);
        }
    }

    /// Tokens generated inside reasoning blocks so far (what the budget counted).
    pub fn counted(&self) -> u32 {
        self.counted
    }

    /// Blocks whose close the budget forced.
    pub fn closes_forced(&self) -> u32 {
        self.closes_forced
    }

    /// Take the generated `token`, whose text is `piece` (special tokens' text included);
    /// `at_char_boundary`: the text so far ends on a whole character (no UTF-8 sequence
    /// left open by this token).
    pub fn accept(&mut self, token: i32, piece: &[u8], at_char_boundary: bool) {
        self.at_char_boundary = at_char_boundary;
        match self.state {
            BudgetState::Idle | BudgetState::Done => {
                self.opening_so_far = self.opening_so_far.and_then(|n| {
                    let end = n + piece.len();
                    (self.open_text.get(n..end) == Some(piece)).then_some(end)
                });
                if self.push_matches(piece, Tag::Open) {
                    self.enter_block();
                }
            }
            BudgetState::Counting => {
                if self.push_matches(piece, Tag::Close) {
                    self.set(BudgetState::Done);
                    return;
                }
                self.counted += 1;
                if self.budget.is_some() {
                    self.left = self.left.saturating_sub(1);
                    if self.left == 0 {
                        self.spent(at_char_boundary);
                    }
                }
            }
            BudgetState::WaitingForCharacter => {
                if self.push_matches(piece, Tag::Close) {
                    self.set(BudgetState::Done);
                } else {
                    self.counted += 1;
                    self.spent(at_char_boundary);
                }
            }
            BudgetState::Forcing { at } => {
                // A pick other than the forced token means a grammar refused it: the close
                // cannot be forced, so the budget stops watching this block.
                let next = at + 1;
                if self.forced.get(at) != Some(&token) || next == self.forced.len() {
                    self.set(BudgetState::Done);
                } else {
                    self.state = BudgetState::Forcing { at: next };
                }
            }
        }
    }

    /// End the open block now, whatever is left of its budget (a client's `reasoning_end`):
    /// its close is forced from the next pick, or once the character is whole. False when
    /// no block is being counted (outside one, or its close already under way).
    pub fn end_now(&mut self) -> bool {
        if self.state != BudgetState::Counting || !self.forces {
            return false;
        }
        self.spent(self.at_char_boundary);
        true
    }

    fn enter_block(&mut self) {
        self.opening_so_far = None;
        self.set(BudgetState::Counting);
        if let Some(budget) = self.budget {
            self.left = budget;
            if budget == 0 {
                self.spent(true);
            }
        }
    }

    /// The budget is spent: force the close now, or once the character is whole.
    fn spent(&mut self, at_char_boundary: bool) {
        if at_char_boundary {
            self.closes_forced += 1;
            self.set(BudgetState::Forcing { at: 0 });
        } else {
            self.set(BudgetState::WaitingForCharacter);
        }
    }

    fn set(&mut self, state: BudgetState) {
        self.state = state;
        self.recent.clear();
    }

    /// Append `piece` to the recent text; whether the text since the last change of state
    /// now holds `tag` with its end in `piece` (a piece may hold more than the tag).
    fn push_matches(&mut self, piece: &[u8], tag: Tag) -> bool {
        self.recent.extend_from_slice(piece);
        let seq = match tag {
            Tag::Open => &self.open_text,
            Tag::Close => &self.close_text,
        };
        let found = self.recent.windows(seq.len()).any(|w| w == seq.as_slice());
        // Keep only what a tag's match could still start in.
        let keep = self.window - 1;
        if self.recent.len() > keep {
            self.recent.drain(..self.recent.len() - keep);
        }
        found
    }
}

#[derive(Clone, Copy)]
enum Tag {
    Open,
    Close,
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPEN: i32 = 100;
    const CLOSE: i32 = 101;
    const MSG: i32 = 102;

    /// Token `t` reads `<t>`, so a tag of tokens is the text of its pieces.
    fn piece(t: i32) -> Vec<u8> {
        format!("<{t}>").into_bytes()
    }

    fn text(tokens: &[i32]) -> Vec<u8> {
        tokens.iter().flat_map(|&t| piece(t)).collect()
    }

    fn make(
        budget: Option<u32>,
        open: Vec<i32>,
        close: Vec<i32>,
        forced: Vec<i32>,
        starts_open: bool,
    ) -> Result<ReasoningBudget, BudgetError> {
        let open_text = text(&open);
        ReasoningBudget::new(
            budget,
            (open, &open_text),
            &text(&close),
            forced,
            starts_open,
        )
    }

    fn accept(b: &mut ReasoningBudget, t: i32, at_char_boundary: bool) {
        b.accept(t, &piece(t), at_char_boundary);
    }

    fn budget(n: u32, starts_open: bool) -> ReasoningBudget {
        make(
            Some(n),
            vec![OPEN],
            vec![CLOSE],
            vec![MSG, CLOSE],
            starts_open,
        )
        .unwrap()
    }

    /// Run `b` over a model that would pick `model` tokens in turn; forced tokens replace
    /// its picks (and consume them, as a forced step's logits go unused). Returns the
    /// tokens generated.
    fn run(b: &mut ReasoningBudget, model: &[i32]) -> Vec<i32> {
        let mut out = Vec::new();
        for &t in model {
            let pick = b.forced_token().unwrap_or(t);
            accept(b, pick, true);
            out.push(pick);
            check_invariants(b);
        }
        out
    }

    fn check_invariants(b: &ReasoningBudget) {
        assert!(!b.open.is_empty() && !b.open_text.is_empty());
        assert!(!b.close_text.is_empty() && !b.forced.is_empty());
        assert!(b.recent.len() < b.window);
        assert_eq!(b.window, b.open_text.len().max(b.close_text.len()));
        if let BudgetState::Forcing { at } = b.state {
            assert!(at < b.forced.len());
        }
        if let Some(n) = b.budget {
            assert!(b.left <= n);
            if b.state == BudgetState::Counting {
                assert!(b.left > 0);
            }
        }
        if !b.forces {
            assert!(b.budget.is_none());
            assert!(!matches!(
                b.state,
                BudgetState::WaitingForCharacter | BudgetState::Forcing { .. }
            ));
        }
    }

    #[test]
    fn an_open_prompt_is_closed_after_the_budget() {
        let mut b = budget(3, true);
        let out = run(&mut b, &[1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(out, [1, 2, 3, MSG, CLOSE, 6, 7]);
        assert_eq!(b.state(), BudgetState::Done);
        assert_eq!((b.counted(), b.closes_forced()), (3, 1));
    }

    #[test]
    fn a_block_the_model_opens_is_counted_from_its_opening() {
        let mut b = budget(2, false);
        let out = run(&mut b, &[1, OPEN, 2, 3, 4, 5, 6]);
        assert_eq!(out, [1, OPEN, 2, 3, MSG, CLOSE, 6]);
        assert_eq!(b.counted(), 2);
    }

    #[test]
    fn a_block_closed_within_the_budget_is_left_alone_and_a_new_one_rearms() {
        let mut b = budget(2, true);
        let out = run(&mut b, &[1, CLOSE, 2, OPEN, 3, 4, 5, 6]);
        assert_eq!(out, [1, CLOSE, 2, OPEN, 3, 4, MSG, CLOSE]);
        assert_eq!((b.counted(), b.closes_forced()), (3, 1));
    }

    #[test]
    fn a_zero_budget_closes_at_once() {
        let mut b = budget(0, true);
        assert_eq!(run(&mut b, &[1, 2, 3]), [MSG, CLOSE, 3]);
        let mut b = budget(0, false);
        assert_eq!(run(&mut b, &[OPEN, 2, 3, 4]), [OPEN, MSG, CLOSE, 4]);
        assert_eq!(b.counted(), 0);
    }

    #[test]
    fn the_close_waits_for_a_whole_character() {
        let mut b = budget(1, true);
        accept(&mut b, 1, false);
        assert_eq!(b.state(), BudgetState::WaitingForCharacter);
        assert_eq!(b.forced_token(), None);
        accept(&mut b, 2, false);
        assert_eq!(b.forced_token(), None);
        accept(&mut b, 3, true);
        assert_eq!(b.forced_token(), Some(MSG));
        assert_eq!(b.counted(), 3);
        // The model may close the block itself while the character completes.
        let mut b = budget(1, true);
        accept(&mut b, 1, false);
        accept(&mut b, CLOSE, true);
        assert_eq!((b.state(), b.closes_forced()), (BudgetState::Done, 0));
    }

    #[test]
    fn tags_of_several_tokens_match_only_whole_and_in_their_state() {
        let mut b = make(Some(2), vec![7, 8], vec![9, 10], vec![9, 10], false).unwrap();
        // 8 alone, or 7 then something else, opens nothing.
        assert_eq!(run(&mut b, &[8, 7, 1, 7]), [8, 7, 1, 7]);
        assert_eq!(b.state(), BudgetState::Idle);
        assert_eq!(run(&mut b, &[8]), [8]);
        assert_eq!(b.state(), BudgetState::Counting);
        // The close's first token is counted; the whole close ends the block.
        assert_eq!(run(&mut b, &[9, 10, 1]), [9, 10, 1]);
        assert_eq!((b.state(), b.counted()), (BudgetState::Done, 1));
        // A forced close is not taken for an opening, nor does it count.
        let mut b = make(Some(1), vec![7, 8], vec![9, 10], vec![8, 9, 10], true).unwrap();
        assert_eq!(run(&mut b, &[7, 0, 0, 0, 5]), [7, 8, 9, 10, 5]);
        assert_eq!((b.state(), b.counted()), (BudgetState::Done, 1));
    }

    #[test]
    fn a_refused_force_stops_watching_the_block() {
        let mut b = budget(1, true);
        accept(&mut b, 1, true);
        assert_eq!(b.forced_token(), Some(MSG));
        accept(&mut b, 42, true);
        assert_eq!((b.state(), b.forced_token()), (BudgetState::Done, None));
    }

    #[test]
    fn a_block_ended_now_is_closed_at_the_next_pick_with_or_without_a_budget() {
        for limit in [None, Some(100)] {
            let mut b = make(limit, vec![OPEN], vec![CLOSE], vec![MSG, CLOSE], true).unwrap();
            assert_eq!(run(&mut b, &[1, 2]), [1, 2]);
            assert!(b.end_now());
            check_invariants(&b);
            assert_eq!(run(&mut b, &[3, 4, 5]), [MSG, CLOSE, 5]);
            // Outside a block there is nothing to end.
            assert!(!b.end_now());
            assert_eq!((b.counted(), b.closes_forced()), (2, 1));
        }
        // Mid-character, the close waits for the character.
        let mut b = budget(100, true);
        accept(&mut b, 1, false);
        assert!(b.end_now());
        assert_eq!(b.state(), BudgetState::WaitingForCharacter);
    }

    #[test]
    fn a_budget_that_only_counts_never_forces() {
        for starts_open in [false, true] {
            let mut b = budget(1, starts_open);
            b.count_only();
            check_invariants(&b);
            let model = [OPEN, 1, 2, 3, CLOSE, OPEN, 4];
            assert_eq!(run(&mut b, &model), model);
            assert!(!b.end_now());
            check_invariants(&b);
            assert_eq!(b.closes_forced(), 0);
        }
        // Taken while forcing, the close is called off.
        let mut b = budget(1, true);
        accept(&mut b, 1, true);
        assert_eq!(b.forced_token(), Some(MSG));
        b.count_only();
        check_invariants(&b);
        assert_eq!((b.state(), b.forced_token()), (BudgetState::Counting, None));
    }

    /// A grammar may make a model spell a tag in other pieces than the tokenizer's; a piece
    /// may hold a tag and more.
    #[test]
    fn tags_are_matched_in_the_text_whatever_its_pieces() {
        let mut b = make(Some(2), vec![7, 8], vec![9], vec![9], false).unwrap();
        assert!(b.opening_under_way());
        b.accept(50, b"<7", true);
        assert!(b.opening_under_way());
        b.accept(51, b"><", true);
        check_invariants(&b);
        assert_eq!(b.state(), BudgetState::Idle);
        b.accept(52, b"8>x", true);
        assert_eq!(b.state(), BudgetState::Counting);
        assert!(!b.opening_under_way());
        // Closed by a piece that ends with more text.
        b.accept(53, b"y<9>z", true);
        assert_eq!((b.state(), b.counted()), (BudgetState::Done, 0));
        check_invariants(&b);
        // A reply that starts with anything but the opening's start is past it.
        let mut b = make(Some(2), vec![7, 8], vec![9], vec![9], false).unwrap();
        b.accept(50, b"<7><", true);
        assert!(b.opening_under_way());
        b.accept(51, b"9>", true);
        assert!(!b.opening_under_way());
        b.accept(52, b"<7><8>", true);
        assert!(!b.opening_under_way());
        assert_eq!(b.state(), BudgetState::Counting);
        // A prompt that opened the block leaves nothing to open.
        assert!(!budget(1, true).opening_under_way());
    }

    #[test]
    fn the_opening_token_is_offered_only_when_it_is_one_token() {
        assert_eq!(budget(1, false).opening_token(), Some(OPEN));
        let two = make(None, vec![7, 8], vec![9], vec![9], false).unwrap();
        assert_eq!(two.opening_token(), None);
    }

    #[test]
    fn empty_tags_are_refused() {
        let e = make(Some(1), vec![], vec![1], vec![1], false).unwrap_err();
        assert_eq!(e, BudgetError::EmptyTag("opening"));
        assert!(e.to_string().contains("opening tag"));
        assert!(make(None, vec![1], vec![], vec![1], false).is_err());
        assert!(make(Some(1), vec![1], vec![1], vec![], false).is_err());
    }

    #[test]
    fn without_a_budget_blocks_are_only_counted() {
        let mut b = make(None, vec![OPEN], vec![CLOSE], vec![CLOSE], true).unwrap();
        let model = [1, 2, 3, CLOSE, 4, OPEN, 5, 6, CLOSE, 7];
        assert_eq!(run(&mut b, &model), model);
        assert_eq!((b.counted(), b.closes_forced()), (5, 0));
    }
}
