//! Writers for ggml quantization blocks: random blocks with a chosen value spread (for
//! big weight matrices, written at disk speed), and true quantization of given floats
//! (for the embedding and output matrices whose structure matters).
//!
//! Layouts follow ggml-common.h: `block_q8_0 {d: f16, qs: [i8; 32]}`,
//! `block_q4_K {d, dmin: f16, scales: [u8; 12], qs: [u8; 128]}`,
//! `block_q5_K {d, dmin: f16, scales: [u8; 12], qh: [u8; 32], qs: [u8; 128]}`,
//! `block_q6_K {ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16}`,
//! `block_mxfp4 {e: u8 (E8M0 exponent), qs: [u8; 16] (E2M1 nibbles)}`.

use epm_gguf::GgmlType;

/// A small, fast, deterministic PRNG (SplitMix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn fill(&mut self, buf: &mut [u8]) {
        let mut chunks = buf.chunks_exact_mut(8);
        for chunk in &mut chunks {
            chunk.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        let tail = chunks.into_remainder();
        let v = self.next_u64().to_le_bytes();
        let n = tail.len();
        tail.copy_from_slice(&v[..n]);
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }
    /// Uniform with mean 0 and standard deviation `std`.
    pub fn uniform(&mut self, std: f32) -> f32 {
        (self.unit() * 2.0 - 1.0) * std * 3f32.sqrt()
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// FNV-1a, to derive a per-tensor seed from its name.
pub fn name_seed(seed: u64, name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^ seed.rotate_left(17)
}

/// IEEE half from f32, round to nearest even (finite inputs; overflow saturates to inf).
pub fn f16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32;
    let man = b & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if man != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 31 {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = 1u32 << (shift - 1);
        let rounded = (m + half - 1 + ((m >> shift) & 1)) >> shift;
        return sign | rounded as u16;
    }
    let rounded = man + 0xfff + ((man >> 13) & 1);
    let (e, rounded) = if rounded & 0x80_0000 != 0 {
        (e + 1, 0)
    } else {
        (e, rounded)
    };
    if e >= 31 {
        return sign | 0x7c00;
    }
    sign | ((e as u16) << 10) | (rounded >> 13) as u16
}

/// Sub-block scale and min both 32 in the 12-byte K-quant packing (see `get_scale_min_k4`).
const K_SCALES_32: [u8; 12] = [160, 160, 160, 160, 160, 160, 160, 160, 0, 0, 0, 0];

/// Append `n_rows` rows of `row_len` random values with mean ~0 and spread `std` in `ty`.
pub fn random_rows(
    ty: GgmlType,
    row_len: u64,
    n_rows: u64,
    std: f32,
    rng: &mut Rng,
    out: &mut Vec<u8>,
) {
    let blocks = row_len / ty.block_elems() * n_rows;
    let start = out.len();
    out.resize(start + (blocks * ty.block_bytes()) as usize, 0);
    let data = &mut out[start..];
    match ty {
        GgmlType::Q4_K => {
            // q in 0..15 (sd 4.61), value = d*32*q - dmin*32, centred with dmin = 7.5 d.
            let d = std / (32.0 * 4.61);
            let (dh, mh) = (f16_bits(d).to_le_bytes(), f16_bits(7.5 * d).to_le_bytes());
            rng.fill(data);
            for b in data.chunks_exact_mut(144) {
                b[0..2].copy_from_slice(&dh);
                b[2..4].copy_from_slice(&mh);
                b[4..16].copy_from_slice(&K_SCALES_32);
            }
        }
        GgmlType::Q5_K => {
            // q in 0..31 (sd 9.23), centred with dmin = 15.5 d.
            let d = std / (32.0 * 9.23);
            let (dh, mh) = (f16_bits(d).to_le_bytes(), f16_bits(15.5 * d).to_le_bytes());
            rng.fill(data);
            for b in data.chunks_exact_mut(176) {
                b[0..2].copy_from_slice(&dh);
                b[2..4].copy_from_slice(&mh);
                b[4..16].copy_from_slice(&K_SCALES_32);
            }
        }
        GgmlType::Q6_K => {
            // value = d * scale * (q - 32), q in 0..63 (sd 18.5), scale 16.
            let dh = f16_bits(std / (16.0 * 18.5)).to_le_bytes();
            rng.fill(data);
            for b in data.chunks_exact_mut(210) {
                b[192..208].fill(16);
                b[208..210].copy_from_slice(&dh);
            }
        }
        GgmlType::Q8_0 => {
            // q uniform in -127..127 (sd 73.3).
            let dh = f16_bits(std / 73.3).to_le_bytes();
            rng.fill(data);
            for b in data.chunks_exact_mut(34) {
                b[0..2].copy_from_slice(&dh);
                for q in &mut b[2..] {
                    if *q == 0x80 {
                        *q = 0x81;
                    }
                }
            }
        }
        GgmlType::MXFP4 => {
            // Nibbles index ggml's `kvalues_mxfp4` (twice the E2M1 values, 0..12, sd 5.85),
            // scaled by 2^(e - 128): the exponent nearest to the wanted spread.
            let e = (128.0 + (std / 5.85).log2().round()).clamp(1.0, 254.0) as u8;
            rng.fill(data);
            for b in data.chunks_exact_mut(17) {
                b[0] = e;
            }
        }
        GgmlType::BF16 => {
            for v in data.chunks_exact_mut(2) {
                v.copy_from_slice(&bf16_bits(rng.uniform(std)).to_le_bytes());
            }
        }
        GgmlType::F32 => {
            for v in data.chunks_exact_mut(4) {
                v.copy_from_slice(&rng.uniform(std).to_le_bytes());
            }
        }
        GgmlType::F16 => {
            for v in data.chunks_exact_mut(2) {
                v.copy_from_slice(&f16_bits(rng.uniform(std)).to_le_bytes());
            }
        }
        other => panic!("random_rows: no writer for {other}"),
    }
}

/// Quantize one row of floats to Q8_0 and append it.
pub fn quantize_q8_0(row: &[f32], out: &mut Vec<u8>) {
    for block in row.chunks(32) {
        let amax = block.iter().fold(0f32, |m, &x| m.max(x.abs()));
        let d = amax / 127.0;
        let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
        out.extend_from_slice(&f16_bits(d).to_le_bytes());
        for &x in block {
            out.push((x * inv).round().clamp(-127.0, 127.0) as i8 as u8);
        }
    }
}

/// Quantize one row of floats (a multiple of 256) to Q6_K and append it: per 16-value
/// sub-block an int8 scale, per 256 a f16 super-scale, 6-bit values in ggml's
/// interleaved `ql`/`qh` layout (the inverse of `dequantize_row_q6_K`).
pub fn quantize_q6_k(row: &[f32], out: &mut Vec<u8>) {
    for x in row.chunks(256) {
        let mut sub = [0f32; 16];
        for (j, s) in sub.iter_mut().enumerate() {
            *s = x[j * 16..j * 16 + 16]
                .iter()
                .fold(0f32, |m, v| m.max(v.abs()))
                / 31.0;
        }
        let max_sub = sub.iter().fold(0f32, |m, &v| m.max(v));
        let d = f16_round(max_sub / 127.0);
        let mut sc = [0i8; 16];
        let mut q = [32u8; 256];
        if d > 0.0 {
            for j in 0..16 {
                sc[j] = (sub[j] / d).round().clamp(1.0, 127.0) as i8;
                let inv_step = 1.0 / (d * f32::from(sc[j]));
                for i in j * 16..j * 16 + 16 {
                    q[i] = ((x[i] * inv_step).round_ties_even().clamp(-32.0, 31.0) + 32.0) as u8;
                }
            }
        }
        let mut ql = [0u8; 128];
        let mut qh = [0u8; 64];
        for half in 0..2 {
            let (qs, l0, h0) = (&q[half * 128..half * 128 + 128], half * 64, half * 32);
            for l in 0..32 {
                let (q1, q2, q3, q4) = (qs[l], qs[l + 32], qs[l + 64], qs[l + 96]);
                ql[l0 + l] = (q1 & 0xF) | ((q3 & 0xF) << 4);
                ql[l0 + l + 32] = (q2 & 0xF) | ((q4 & 0xF) << 4);
                qh[h0 + l] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
            }
        }
        out.extend_from_slice(&ql);
        out.extend_from_slice(&qh);
        out.extend(sc.iter().map(|&v| v as u8));
        out.extend_from_slice(&f16_bits(d).to_le_bytes());
    }
}

/// bfloat16 from f32 (the top 16 bits), rounded to nearest even (finite inputs).
pub fn bf16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

/// Append floats as BF16.
pub fn bf16_row(row: &[f32], out: &mut Vec<u8>) {
    for &x in row {
        out.extend_from_slice(&bf16_bits(x).to_le_bytes());
    }
}

/// `x` rounded through f16, so scales computed from it match what is stored.
fn f16_round(x: f32) -> f32 {
    f16_value(f16_bits(x))
}

/// The value of IEEE half bits (finite values).
pub fn f16_value(h: u16) -> f32 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((h >> 10) & 0x1f);
    let man = f32::from(h & 0x3ff);
    sign * if exp == 0 {
        man * 2f32.powi(-24)
    } else {
        (1.0 + man / 1024.0) * 2f32.powi(exp - 15)
    }
}

/// Append floats as F32.
pub fn f32_row(row: &[f32], out: &mut Vec<u8>) {
    for &x in row {
        out.extend_from_slice(&x.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(bf16_bits(1.0), 0x3f80);
        assert_eq!(bf16_bits(-2.0), 0xc000);
        // 1 + 2^-8 lies halfway between two bf16 values: ties go to the even one (1.0).
        assert_eq!(bf16_bits(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(bf16_bits(f32::from_bits(0x3f81_8000)), 0x3f82);
    }

    #[test]
    fn f16_matches_known_values() {
        assert_eq!(f16_bits(0.0), 0);
        assert_eq!(f16_bits(1.0), 0x3c00);
        assert_eq!(f16_bits(-2.0), 0xc000);
        assert_eq!(f16_bits(65504.0), 0x7bff);
        assert_eq!(f16_bits(1e6), 0x7c00);
        assert_eq!(f16_bits(5.960_464_5e-8), 0x0001);
        assert_eq!(f16_bits(0.333_333_34), 0x3555);
    }

    /// ggml's `dequantize_row_q6_K`, to check the packing.
    fn dequant_q6_k(b: &[u8]) -> Vec<f32> {
        let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
        let d = f16_value(u16::from_le_bytes([b[208], b[209]]));
        let mut y = vec![0f32; 256];
        for n in 0..2 {
            let (ql, qh, sc, y) = (
                &ql[n * 64..],
                &qh[n * 32..],
                &sc[n * 8..],
                &mut y[n * 128..],
            );
            for l in 0..32 {
                let is = l / 16;
                let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
                let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                y[l] = d * f32::from(sc[is] as i8) * q1 as f32;
                y[l + 32] = d * f32::from(sc[is + 2] as i8) * q2 as f32;
                y[l + 64] = d * f32::from(sc[is + 4] as i8) * q3 as f32;
                y[l + 96] = d * f32::from(sc[is + 6] as i8) * q4 as f32;
            }
        }
        y
    }

    #[test]
    fn q6_k_round_trips_within_quantization_error() {
        let mut rng = Rng::new(3);
        let x: Vec<f32> = (0..256).map(|_| rng.uniform(1.0)).collect();
        let mut out = Vec::new();
        quantize_q6_k(&x, &mut out);
        assert_eq!(out.len(), 210);
        let y = dequant_q6_k(&out);
        let max_err = x
            .iter()
            .zip(&y)
            .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(max_err < 0.06, "max error {max_err}");
    }

    /// ggml's `dequantize_row_mxfp4`: `kvalues_mxfp4[nibble] * 2^(e - 128)`.
    #[test]
    fn mxfp4_blocks_have_the_wanted_spread() {
        const KVALUES: [f32; 16] = [
            0., 1., 2., 3., 4., 6., 8., 12., 0., -1., -2., -3., -4., -6., -8., -12.,
        ];
        let mut out = Vec::new();
        random_rows(GgmlType::MXFP4, 4096, 8, 0.05, &mut Rng::new(3), &mut out);
        let values: Vec<f32> = out
            .chunks_exact(17)
            .flat_map(|b| {
                let d = 2f32.powi(i32::from(b[0]) - 128);
                b[1..].iter().flat_map(move |q| {
                    [
                        KVALUES[(q & 0xf) as usize] * d,
                        KVALUES[(q >> 4) as usize] * d,
                    ]
                })
            })
            .collect();
        let mean = values.iter().sum::<f32>() / values.len() as f32;
        let sd = (values.iter().map(|v| v * v).sum::<f32>() / values.len() as f32).sqrt();
        // Scales are powers of two: the spread is within a factor of sqrt(2) of the target.
        assert!(
            mean.abs() < 0.005 && (0.035..0.071).contains(&sd),
            "mean {mean} sd {sd}"
        );
    }

    #[test]
    fn random_rows_have_exact_sizes() {
        let mut rng = Rng::new(1);
        for (ty, bytes) in [
            (GgmlType::Q4_K, 144),
            (GgmlType::Q5_K, 176),
            (GgmlType::Q6_K, 210),
            (GgmlType::Q8_0, 34 * 8),
            (GgmlType::MXFP4, 17 * 8),
            (GgmlType::BF16, 512),
        ] {
            let mut out = Vec::new();
            random_rows(ty, 256, 3, 0.1, &mut rng, &mut out);
            assert_eq!(out.len(), 3 * bytes, "{ty}");
        }
    }
}
