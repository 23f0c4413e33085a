//! What the pager holds right now, for readers on other threads (the server's pager view):
//! a bitmap each of resident, pinned (selected for the layer being computed) and
//! speculative (read in on a prediction) experts, and each expert's decayed selection
//! count. The pager is the only writer and updates it with plain atomic stores, so the hook
//! takes no lock and allocates nothing for it; a reader sees each word whole, and the
//! bitmaps of one snapshot may be a routing apart.

use std::sync::atomic::{AtomicU64, Ordering};

/// Per-token decay of the heat (a selection's weight halves in about 14 tokens of a
/// sequence, the pager's clock), the pager's default cache-policy decay whatever policy runs.
pub const HEAT_DECAY: f64 = 0.95;

/// The slots are `layer position * n_expert + expert`, as the pager's.
#[derive(Debug, Default)]
pub struct ResidencyView {
    pub n_expert: u32,
    /// The MoE layers' ids, in slot order.
    pub layers: Vec<u32>,
    resident: Vec<AtomicU64>,
    pinned: Vec<AtomicU64>,
    speculative: Vec<AtomicU64>,
    /// ln of each slot's decayed selection count, as f64 bits, scaled to token `clock`
    /// (`ln Σ growth^t` over the tokens `t` it was selected at; `-inf`: never).
    heat_ln: Vec<AtomicU64>,
    /// The pager's token clock at its latest routing.
    clock: AtomicU64,
    /// Routings published so far.
    version: AtomicU64,
}

/// One reading of the view.
#[derive(Debug, Clone, PartialEq)]
pub struct ResidencySnapshot {
    pub n_expert: u32,
    pub layers: Vec<u32>,
    /// Bit `s` (LSB first within each byte) of slot `s`.
    pub resident: Vec<u8>,
    pub pinned: Vec<u8>,
    pub speculative: Vec<u8>,
    /// Per slot, 0..=255: the decayed selection count against the hottest slot's (0: never
    /// selected, or long ago).
    pub heat: Vec<u8>,
    pub version: u64,
}

fn words(n_slots: usize) -> Vec<AtomicU64> {
    (0..n_slots.div_ceil(64))
        .map(|_| AtomicU64::new(0))
        .collect()
}

fn put(bits: &[AtomicU64], s: usize, on: bool) {
    let (w, b) = (s / 64, 1u64 << (s % 64));
    if let Some(word) = bits.get(w) {
        // One writer: load and store, no read-modify-write needed.
        let old = word.load(Ordering::Relaxed);
        word.store(if on { old | b } else { old & !b }, Ordering::Relaxed);
    }
}

fn bytes(bits: &[AtomicU64], n_slots: usize) -> Vec<u8> {
    let mut out: Vec<u8> = bits
        .iter()
        .flat_map(|w| w.load(Ordering::Relaxed).to_le_bytes())
        .collect();
    out.truncate(n_slots.div_ceil(8));
    out
}

impl ResidencyView {
    pub fn new(layers: Vec<u32>, n_expert: u32) -> ResidencyView {
        let n = layers.len() * n_expert as usize;
        ResidencyView {
            n_expert,
            layers,
            resident: words(n),
            pinned: words(n),
            speculative: words(n),
            heat_ln: (0..n)
                .map(|_| AtomicU64::new(f64::NEG_INFINITY.to_bits()))
                .collect(),
            clock: AtomicU64::new(0),
            version: AtomicU64::new(0),
        }
    }

    pub fn n_slots(&self) -> usize {
        self.layers.len() * self.n_expert as usize
    }

    pub fn set_resident(&self, s: usize, on: bool) {
        put(&self.resident, s, on);
    }

    pub fn set_pinned(&self, s: usize, on: bool) {
        put(&self.pinned, s, on);
    }

    pub fn set_speculative(&self, s: usize, on: bool) {
        put(&self.speculative, s, on);
    }

    /// Slot `s` was selected at token `clock`.
    pub fn selected(&self, s: usize, clock: u64) {
        if let Some(h) = self.heat_ln.get(s) {
            let old = f64::from_bits(h.load(Ordering::Relaxed));
            let now = clock as f64 * -HEAT_DECAY.ln();
            h.store(crate::pager::ln_add(old, now).to_bits(), Ordering::Relaxed);
        }
    }

    /// A routing at token `clock` is published.
    pub fn routed(&self, clock: u64) {
        self.clock.store(clock, Ordering::Relaxed);
        self.version.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> ResidencySnapshot {
        let n = self.n_slots();
        let clock = self.clock.load(Ordering::Relaxed) as f64 * -HEAT_DECAY.ln();
        // Decayed counts as of the latest routing, in log space; the hottest maps to 255.
        let ln: Vec<f64> = self
            .heat_ln
            .iter()
            .map(|h| f64::from_bits(h.load(Ordering::Relaxed)) - clock)
            .collect();
        let top = ln.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let heat = ln
            .iter()
            .map(|&l| {
                if top == f64::NEG_INFINITY {
                    0
                } else {
                    ((l - top).exp() * 255.0).round().clamp(0.0, 255.0) as u8
                }
            })
            .collect();
        ResidencySnapshot {
            n_expert: self.n_expert,
            layers: self.layers.clone(),
            resident: bytes(&self.resident, n),
            pinned: bytes(&self.pinned, n),
            speculative: bytes(&self.speculative, n),
            heat,
            version: self.version.load(Ordering::Relaxed),
        }
    }
}

impl ResidencySnapshot {
    /// Whether bit `s` of `bits` is set.
    pub fn bit(bits: &[u8], s: usize) -> bool {
        bits.get(s / 8).is_some_and(|b| b >> (s % 8) & 1 == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_and_heat_read_back() {
        let v = ResidencyView::new(vec![0, 3], 40);
        assert_eq!(v.n_slots(), 80);
        v.set_resident(0, true);
        v.set_resident(79, true);
        v.set_pinned(41, true);
        v.set_speculative(65, true);
        v.set_resident(0, false);
        v.selected(5, 0);
        v.selected(6, 10);
        v.selected(6, 10);
        v.routed(10);
        let s = v.snapshot();
        assert_eq!(s.resident.len(), 10);
        assert!(!ResidencySnapshot::bit(&s.resident, 0));
        assert!(ResidencySnapshot::bit(&s.resident, 79));
        assert!(ResidencySnapshot::bit(&s.pinned, 41));
        assert!(ResidencySnapshot::bit(&s.speculative, 65));
        assert_eq!(s.resident.iter().map(|b| b.count_ones()).sum::<u32>(), 1);
        // Selected twice now: the hottest; once ten tokens ago: 0.95^10 / 2 of it.
        assert_eq!(s.heat[6], 255);
        assert_eq!(s.heat[5], (0.95f64.powi(10) / 2.0 * 255.0).round() as u8);
        assert_eq!(s.heat[7], 0);
        assert_eq!(s.version, 1);
    }
}
