//! The reasoning budget: how many tokens a model may generate inside a reasoning block
//! (`<think>` ... `</think>`, or gpt-oss's analysis channel) before the block is closed for
//! it. On a paged CPU a thinking model can spend minutes in a block; llama-server's
//! `--reasoning-budget` and Anthropic's `thinking.budget_tokens` bound it.
//!
//! [`ReasoningBudget`] is the state machine of llama.cpp's `reasoning-budget` sampler: it
//! watches the generated tokens for the block's opening, counts the tokens inside, and once
//! the budget is spent (and the text is at a character boundary) names the tokens of a
//! message and the closing, one per step, for the sampler to force. A block the model
//! closes itself ends the count; a new opening starts a fresh one. Without a budget it only
//! counts (the replies' `reasoning_tokens`). Pure: it sees token ids only, and tests drive
//! it without a model.

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
/// 1. `open`, `close` and `forced` are not empty (`new` refuses otherwise);
/// 2. `recent` holds the tokens accepted since the last change of state, at most the
///    longer of `open` and `close`, so the match of a tag never spans a state change
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
    open: Vec<i32>,
    close: Vec<i32>,
    forced: Vec<i32>,
    state: BudgetState,
    left: u32,
    recent: Vec<i32>,
    /// The longer tag's length: how many tokens `recent` keeps.
    window: usize,
    /// Whether the text ended on a whole character after the last token taken.
    at_char_boundary: bool,
    /// Tokens counted inside blocks so far.
    counted: u32,
    /// Blocks whose close was forced.
    closes_forced: u32,
    /// Whether a close may be forced at all ([`ReasoningBudget::count_only`] clears it).
    forces: bool,
}

/// A budget that cannot be set up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    #[error("the reasoning block's {0} tag is empty or not in the vocabulary")]
    EmptyTag(&'static str),
}

impl ReasoningBudget {
    /// A budget of `budget` tokens per block (`None`: none, the blocks are only counted)
    /// opened by `open` and closed by `close`; `forced` is what a spent budget writes (a
    /// message, then `close`). `starts_open`: the prompt already opened a block (the
    /// template writes the opening), so counting starts with the first generated token.
    pub fn new(
        budget: Option<u32>,
        open: Vec<i32>,
        close: Vec<i32>,
        forced: Vec<i32>,
        starts_open: bool,
    ) -> Result<ReasoningBudget, BudgetError> {
        for (name, seq) in [("opening", &open), ("closing", &close), ("forced", &forced)] {
            if seq.is_empty() {
                return Err(BudgetError::EmptyTag(name));
            }
        }
        let window = open.len().max(close.len());
        let mut b = ReasoningBudget {
            budget,
            open,
            close,
            forced,
            state: BudgetState::Idle,
            left: budget.unwrap_or(0),
            recent: Vec::with_capacity(window),
            window,
            at_char_boundary: true,
            counted: 0,
            closes_forced: 0,
            forces: true,
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

    /// Take the generated `token`; `at_char_boundary`: the text so far ends on a whole
    /// character (no UTF-8 sequence left open by this token).
    pub fn accept(&mut self, token: i32, at_char_boundary: bool) {
        self.at_char_boundary = at_char_boundary;
        match self.state {
            BudgetState::Idle | BudgetState::Done => {
                if self.push_matches(token, Tag::Open) {
                    self.enter_block();
                }
            }
            BudgetState::Counting => {
                if self.push_matches(token, Tag::Close) {
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
                if self.push_matches(token, Tag::Close) {
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

    /// Append `token` to the recent tokens; whether they now end with `tag`.
    fn push_matches(&mut self, token: i32, tag: Tag) -> bool {
        if self.recent.len() == self.window {
            self.recent.remove(0);
        }
        self.recent.push(token);
        let seq = match tag {
            Tag::Open => &self.open,
            Tag::Close => &self.close,
        };
        self.recent.ends_with(seq)
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

    fn budget(n: u32, starts_open: bool) -> ReasoningBudget {
        ReasoningBudget::new(
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
            b.accept(pick, true);
            out.push(pick);
            check_invariants(b);
        }
        out
    }

    fn check_invariants(b: &ReasoningBudget) {
        assert!(!b.open.is_empty() && !b.close.is_empty() && !b.forced.is_empty());
        assert!(b.recent.len() <= b.window);
        assert_eq!(b.window, b.open.len().max(b.close.len()));
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
        b.accept(1, false);
        assert_eq!(b.state(), BudgetState::WaitingForCharacter);
        assert_eq!(b.forced_token(), None);
        b.accept(2, false);
        assert_eq!(b.forced_token(), None);
        b.accept(3, true);
        assert_eq!(b.forced_token(), Some(MSG));
        assert_eq!(b.counted(), 3);
        // The model may close the block itself while the character completes.
        let mut b = budget(1, true);
        b.accept(1, false);
        b.accept(CLOSE, true);
        assert_eq!((b.state(), b.closes_forced()), (BudgetState::Done, 0));
    }

    #[test]
    fn tags_of_several_tokens_match_only_whole_and_in_their_state() {
        let mut b =
            ReasoningBudget::new(Some(2), vec![7, 8], vec![9, 10], vec![9, 10], false).unwrap();
        // 8 alone, or 7 then something else, opens nothing.
        assert_eq!(run(&mut b, &[8, 7, 1, 7]), [8, 7, 1, 7]);
        assert_eq!(b.state(), BudgetState::Idle);
        assert_eq!(run(&mut b, &[8]), [8]);
        assert_eq!(b.state(), BudgetState::Counting);
        // The close's first token is counted; the whole close ends the block.
        assert_eq!(run(&mut b, &[9, 10, 1]), [9, 10, 1]);
        assert_eq!((b.state(), b.counted()), (BudgetState::Done, 1));
        // A forced close is not taken for an opening, nor does it count.
        let mut b =
            ReasoningBudget::new(Some(1), vec![7, 8], vec![9, 10], vec![8, 9, 10], true).unwrap();
        assert_eq!(run(&mut b, &[7, 0, 0, 0, 5]), [7, 8, 9, 10, 5]);
        assert_eq!((b.state(), b.counted()), (BudgetState::Done, 1));
    }

    #[test]
    fn a_refused_force_stops_watching_the_block() {
        let mut b = budget(1, true);
        b.accept(1, true);
        assert_eq!(b.forced_token(), Some(MSG));
        b.accept(42, true);
        assert_eq!((b.state(), b.forced_token()), (BudgetState::Done, None));
    }

    #[test]
    fn a_block_ended_now_is_closed_at_the_next_pick_with_or_without_a_budget() {
        for limit in [None, Some(100)] {
            let mut b =
                ReasoningBudget::new(limit, vec![OPEN], vec![CLOSE], vec![MSG, CLOSE], true)
                    .unwrap();
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
        b.accept(1, false);
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
        b.accept(1, true);
        assert_eq!(b.forced_token(), Some(MSG));
        b.count_only();
        check_invariants(&b);
        assert_eq!((b.state(), b.forced_token()), (BudgetState::Counting, None));
    }

    #[test]
    fn the_opening_token_is_offered_only_when_it_is_one_token() {
        assert_eq!(budget(1, false).opening_token(), Some(OPEN));
        let two = ReasoningBudget::new(None, vec![7, 8], vec![9], vec![9], false).unwrap();
        assert_eq!(two.opening_token(), None);
    }

    #[test]
    fn empty_tags_are_refused() {
        let e = ReasoningBudget::new(Some(1), vec![], vec![1], vec![1], false).unwrap_err();
        assert_eq!(e, BudgetError::EmptyTag("opening"));
        assert!(e.to_string().contains("opening tag"));
        assert!(ReasoningBudget::new(None, vec![1], vec![], vec![1], false).is_err());
        assert!(ReasoningBudget::new(Some(1), vec![1], vec![1], vec![], false).is_err());
    }

    #[test]
    fn without_a_budget_blocks_are_only_counted() {
        let mut b = ReasoningBudget::new(None, vec![OPEN], vec![CLOSE], vec![CLOSE], true).unwrap();
        let model = [1, 2, 3, CLOSE, 4, OPEN, 5, 6, CLOSE, 7];
        assert_eq!(run(&mut b, &model), model);
        assert_eq!((b.counted(), b.closes_forced()), (5, 0));
    }
}
