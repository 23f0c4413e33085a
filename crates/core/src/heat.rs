//! Expert heat that outlives a run: how often each (layer, expert) was selected in the past
//! runs of one model, each run's share halved by every later run. A server reads it at
//! start and, while no request runs, reads the hottest experts into the expert cache's free
//! room (a warm start), so that the first request after a restart finds them resident.
//!
//! The file (`encode` / `decode`), little-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 8 | magic `EPMHEAT\0` |
//! | 4 | format version, [`HEAT_FORMAT_VERSION`] |
//! | 4 | experts per layer |
//! | 4 | layers |
//! | 4 per layer | the layers' ids, ascending |
//! | 4 per (layer, expert) | heat as `f32`, layer by layer, experts in id order |
//!
//! A file of another model's shape is refused, as is any count the remaining bytes cannot
//! hold (checked before anything is allocated).

/// The file's first bytes.
pub const HEAT_MAGIC: &[u8; 8] = b"EPMHEAT\0";
/// The format this build writes and reads.
pub const HEAT_FORMAT_VERSION: u32 = 1;
/// What a past run's heat keeps of its weight when a run ends: recent runs count most, and
/// a run's habits fade after a few more.
pub const HEAT_KEPT_PER_RUN: f32 = 0.5;

/// Why a heat file cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HeatError {
    #[error("not an expert heat file (no `EPMHEAT` magic)")]
    Magic,
    #[error("heat file format {found}, this build reads {HEAT_FORMAT_VERSION}")]
    Version { found: u32 },
    #[error("the heat file is cut short: {need} bytes needed, {have} left")]
    Truncated { need: u64, have: u64 },
    #[error("the heat file is of another model: {found} (this model: {expected})")]
    Shape { found: String, expected: String },
    #[error("the heat file holds a heat that is negative or not a number")]
    Value,
}

/// Selection heat per (layer, expert) of one model.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpertHeat {
    /// 1. Ascending, no duplicates.
    layers: Vec<u32>,
    n_expert: u32,
    /// 2. `layers.len() * n_expert` entries, each finite and >= 0.
    heat: Vec<f32>,
}

impl ExpertHeat {
    /// No heat: nothing to warm.
    pub fn empty(layers: &[u32], n_expert: u32) -> ExpertHeat {
        let mut layers = layers.to_vec();
        layers.sort_unstable();
        layers.dedup();
        ExpertHeat {
            heat: vec![0.0; layers.len() * n_expert as usize],
            layers,
            n_expert,
        }
    }

    fn shape(&self) -> String {
        format!(
            "{} layers ({:?}...) of {} experts",
            self.layers.len(),
            &self.layers[..self.layers.len().min(3)],
            self.n_expert
        )
    }

    /// This heat after one more run, whose selections per (layer, expert) are `selections`
    /// (in this heat's order): the past halved, plus the run's selections as shares of
    /// all of its selections, so that every run weighs the same however long it was. A run
    /// that selected nothing changes nothing.
    pub fn after_run(&self, selections: &[u64]) -> ExpertHeat {
        let total: u64 = selections.iter().sum();
        if total == 0 || selections.len() != self.heat.len() {
            return self.clone();
        }
        let heat = self
            .heat
            .iter()
            .zip(selections)
            .map(|(&h, &n)| h * HEAT_KEPT_PER_RUN + (n as f64 / total as f64) as f32)
            .collect();
        ExpertHeat {
            layers: self.layers.clone(),
            n_expert: self.n_expert,
            heat,
        }
    }

    /// Every (layer, expert) with heat, the hottest first (ties: the lower layer, then the
    /// lower expert).
    pub fn hottest(&self) -> Vec<(u32, u32)> {
        let n = self.n_expert as usize;
        let mut slots: Vec<usize> = (0..self.heat.len())
            .filter(|&s| self.heat[s] > 0.0)
            .collect();
        slots.sort_by(|&a, &b| self.heat[b].total_cmp(&self.heat[a]).then(a.cmp(&b)));
        slots
            .into_iter()
            .map(|s| (self.layers[s / n], (s % n) as u32))
            .collect()
    }

    /// The file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(20 + 4 * (self.layers.len() + self.heat.len()));
        out.extend_from_slice(HEAT_MAGIC);
        out.extend_from_slice(&HEAT_FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&self.n_expert.to_le_bytes());
        out.extend_from_slice(&(self.layers.len() as u32).to_le_bytes());
        for l in &self.layers {
            out.extend_from_slice(&l.to_le_bytes());
        }
        for h in &self.heat {
            out.extend_from_slice(&h.to_le_bytes());
        }
        out
    }

    /// The heat a file holds, which must be of the model whose MoE layers are `layers` with
    /// `n_expert` experts each.
    pub fn decode(bytes: &[u8], layers: &[u32], n_expert: u32) -> Result<ExpertHeat, HeatError> {
        let expected = ExpertHeat::empty(layers, n_expert);
        let mut r = Reader { bytes, at: 0 };
        if r.take(8)? != HEAT_MAGIC {
            return Err(HeatError::Magic);
        }
        let version = r.u32()?;
        if version != HEAT_FORMAT_VERSION {
            return Err(HeatError::Version { found: version });
        }
        let found_experts = r.u32()?;
        let found_layers = r.u32()? as usize;
        r.need(4 * found_layers as u64)?;
        let file_layers: Vec<u32> = (0..found_layers)
            .map(|_| r.u32())
            .collect::<Result<_, _>>()?;
        if file_layers != expected.layers || found_experts != n_expert {
            let found = ExpertHeat {
                layers: file_layers,
                n_expert: found_experts,
                heat: Vec::new(),
            };
            return Err(HeatError::Shape {
                found: found.shape(),
                expected: expected.shape(),
            });
        }
        r.need(4 * expected.heat.len() as u64)?;
        let heat: Vec<f32> = (0..expected.heat.len())
            .map(|_| r.u32().map(f32::from_bits))
            .collect::<Result<_, _>>()?;
        if heat.iter().any(|h| !h.is_finite() || *h < 0.0) {
            return Err(HeatError::Value);
        }
        Ok(ExpertHeat { heat, ..expected })
    }
}

/// One process's part in a heat file that other processes of the same model (a server and
/// a `generate`, two chats) may save too. A process saves more than once (while idle, at
/// the end), each save replacing its last: the heat it started from with its run so far
/// added. Where another process saved in between, that save is built on instead (with
/// this run's selections since its own last save, as a run of their own), so that the
/// file keeps both processes' runs rather than the last one's alone.
#[derive(Debug, Clone)]
pub struct HeatShare {
    /// 1. What this process's selections since `from` are added to; of the same shape as
    ///    every heat given to [`HeatShare::to_save`].
    base: ExpertHeat,
    /// 2. Per (layer, expert), this process's selections already in `base`: none, or
    ///    those at a save of its own that another process built on.
    from: Vec<u64>,
    /// What the file held when this process last read or wrote it.
    seen: ExpertHeat,
    /// 3. Per (layer, expert), this process's selections at its last save; `from <=
    ///    saved`, entry by entry.
    saved: Vec<u64>,
}

impl HeatShare {
    /// The part of a process that read `past` from the file at its start.
    pub fn new(past: ExpertHeat) -> HeatShare {
        let zeros = vec![0; past.heat.len()];
        HeatShare {
            seen: past.clone(),
            base: past,
            from: zeros.clone(),
            saved: zeros,
        }
    }

    /// What to write, given what the file holds `now` (`None`: nothing this model's heat,
    /// which is then replaced) and this process's `selections` so far (in the heat's order,
    /// never fewer than at an earlier call). [`HeatShare::saved`] once it is written.
    pub fn to_save(&mut self, now: Option<ExpertHeat>, selections: &[u64]) -> ExpertHeat {
        if let Some(now) = now.filter(|n| *n != self.seen && n.heat.len() == self.base.heat.len()) {
            self.base = now;
            self.from.clone_from(&self.saved);
        }
        let run: Vec<u64> = selections
            .iter()
            .zip(&self.from)
            .map(|(&n, &f)| n.saturating_sub(f))
            .collect();
        self.base.after_run(&run)
    }

    /// `heat`, [`HeatShare::to_save`]'s answer for `selections`, is in the file.
    pub fn saved(&mut self, heat: ExpertHeat, selections: &[u64]) {
        self.seen = heat;
        if selections.len() == self.saved.len() {
            self.saved.copy_from_slice(selections);
        }
    }

    /// The model's MoE layers (ascending) and experts per layer, to read the file with.
    pub fn shape(&self) -> (&[u32], u32) {
        (&self.base.layers, self.base.n_expert)
    }
}

/// Little-endian reads with the remaining bytes checked first.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn need(&self, n: u64) -> Result<(), HeatError> {
        let have = (self.bytes.len() - self.at) as u64;
        if n > have {
            return Err(HeatError::Truncated { need: n, have });
        }
        Ok(())
    }

    fn take(&mut self, n: usize) -> Result<&[u8], HeatError> {
        self.need(n as u64)?;
        let s = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    fn u32(&mut self) -> Result<u32, HeatError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Invariants 1 and 2.
    fn check(h: &ExpertHeat) {
        assert!(h.layers.windows(2).all(|w| w[0] < w[1]), "1");
        assert_eq!(h.heat.len(), h.layers.len() * h.n_expert as usize, "2");
        assert!(h.heat.iter().all(|x| x.is_finite() && *x >= 0.0), "2");
    }

    #[test]
    fn runs_add_shares_and_the_past_fades() {
        let layers = [3, 1];
        let h = ExpertHeat::empty(&layers, 2);
        assert!(h.hottest().is_empty());
        // Layer 1: experts 0, 1; layer 3: experts 0, 1.
        let one = h.after_run(&[6, 0, 0, 2]);
        check(&one);
        assert_eq!(one.heat, [0.75, 0.0, 0.0, 0.25]);
        assert_eq!(one.hottest(), [(1, 0), (3, 1)]);
        // A second run ten times longer weighs the same as the first, which is halved.
        let two = one.after_run(&[0, 0, 80, 0]);
        check(&two);
        assert_eq!(two.heat, [0.375, 0.0, 1.0, 0.125]);
        assert_eq!(two.hottest(), [(3, 0), (1, 0), (3, 1)]);
        // Nothing selected, or the wrong length: unchanged.
        assert_eq!(two.after_run(&[0; 4]), two);
        assert_eq!(two.after_run(&[1; 3]), two);
        // Ties: the lower layer, then the lower expert.
        assert_eq!(
            h.after_run(&[1, 1, 1, 0]).hottest(),
            [(1, 0), (1, 1), (3, 0)]
        );
    }

    /// Invariants 1-3 of a share, with `check`'s on its heats.
    fn check_share(s: &HeatShare) {
        check(&s.base);
        check(&s.seen);
        assert_eq!(s.from.len(), s.base.heat.len(), "2");
        assert!(s.from.iter().zip(&s.saved).all(|(f, n)| f <= n), "3");
    }

    /// `share`'s save for `selections` over the file's `now`, written.
    fn save(share: &mut HeatShare, now: &ExpertHeat, selections: &[u64]) -> ExpertHeat {
        let heat = share.to_save(Some(now.clone()), selections);
        share.saved(heat.clone(), selections);
        check_share(share);
        heat
    }

    #[test]
    fn a_process_s_saves_replace_its_own_and_build_on_another_s() {
        let layers = [0, 1];
        let past = ExpertHeat::empty(&layers, 2).after_run(&[1, 0, 1, 0]);
        // Alone: each save is the past with the run so far, as one run.
        let mut a = HeatShare::new(past.clone());
        let first = save(&mut a, &past, &[2, 0, 0, 2]);
        assert_eq!(first, past.after_run(&[2, 0, 0, 2]));
        let file = save(&mut a, &first, &[4, 0, 0, 4]);
        assert_eq!(file, past.after_run(&[4, 0, 0, 4]));
        // Another process that started from the same past saves over it: it builds on
        // what `a` saved, both runs kept.
        let mut b = HeatShare::new(past.clone());
        let file = save(&mut b, &file, &[0, 6, 0, 0]);
        assert_eq!(file, past.after_run(&[4, 0, 0, 4]).after_run(&[0, 6, 0, 0]));
        // `a` saves again: on `b`'s save, with what it selected since its last.
        let file = save(&mut a, &file, &[4, 0, 0, 6]);
        let both = past
            .after_run(&[4, 0, 0, 4])
            .after_run(&[0, 6, 0, 0])
            .after_run(&[0, 0, 0, 2]);
        assert_eq!(file, both);
        // And again, nobody else in between: that save is replaced.
        let file = save(&mut a, &file, &[4, 0, 0, 8]);
        assert_eq!(
            file,
            past.after_run(&[4, 0, 0, 4])
                .after_run(&[0, 6, 0, 0])
                .after_run(&[0, 0, 0, 4])
        );
        // Every expert the past, `a` or `b` selected is in the heat.
        assert_eq!(file.hottest().len(), 4);
        // A file that is not this model's heat is replaced, not built on.
        let mut c = HeatShare::new(past.clone());
        assert_eq!(
            c.to_save(None, &[1, 0, 0, 0]),
            past.after_run(&[1, 0, 0, 0])
        );
        check_share(&c);
    }

    #[test]
    fn the_file_round_trips_and_refuses_what_does_not_fit() {
        let layers = [0, 2, 5];
        let h = ExpertHeat::empty(&layers, 4).after_run(&[1, 2, 3, 4, 0, 0, 0, 0, 9, 1, 1, 1]);
        let bytes = h.encode();
        assert_eq!(bytes.len(), 20 + 4 * 3 + 4 * 12);
        assert_eq!(&bytes[..8], HEAT_MAGIC);
        assert_eq!(bytes[8..12], 1u32.to_le_bytes());
        assert_eq!(ExpertHeat::decode(&bytes, &layers, 4), Ok(h.clone()));
        // Every cut is refused with the bytes it lacked.
        for cut in 0..bytes.len() {
            let e = ExpertHeat::decode(&bytes[..cut], &layers, 4).unwrap_err();
            assert!(
                matches!(e, HeatError::Truncated { .. } | HeatError::Magic),
                "{cut}: {e}"
            );
        }
        let mut other = bytes.clone();
        other[0] = b'X';
        assert_eq!(
            ExpertHeat::decode(&other, &layers, 4),
            Err(HeatError::Magic)
        );
        let mut newer = bytes.clone();
        newer[8] = 2;
        assert_eq!(
            ExpertHeat::decode(&newer, &layers, 4),
            Err(HeatError::Version { found: 2 })
        );
        assert!(matches!(
            ExpertHeat::decode(&bytes, &layers, 8),
            Err(HeatError::Shape { .. })
        ));
        assert!(matches!(
            ExpertHeat::decode(&bytes, &[0, 2, 6], 4),
            Err(HeatError::Shape { .. })
        ));
        // A layer count far beyond the bytes is refused before anything is allocated.
        let mut huge = bytes.clone();
        huge[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            ExpertHeat::decode(&huge, &layers, 4),
            Err(HeatError::Truncated { .. })
        ));
        let mut nan = bytes.clone();
        let at = bytes.len() - 4;
        nan[at..].copy_from_slice(&f32::NAN.to_le_bytes());
        assert_eq!(ExpertHeat::decode(&nan, &layers, 4), Err(HeatError::Value));
    }
}
