//! The routing trace (`generate --trace-file`, `serve --trace-file`), little-endian.
//!
//! Header (16 bytes): the magic `"EPMTRC02"`, `u32 n_expert`, `u32 n_expert_used`. Then
//! one record per routed MoE layer per ubatch, in evaluation order: `u32 layer`,
//! `u32 n_tokens`, `u32 flags` (bit 0: a decode step, else prompt), then
//! `n_tokens * n_expert_used` `u16` expert ids, token-major. A record whose layer is not
//! above the previous record's starts a new ubatch.
//!
//! Version 1 (`"EPMTRC01"`) had no flags word; the reader takes it too, counting
//! single-token ubatches as decode steps (all that `generate` produced then).

use std::io::{self, Write};

use crate::pager::Phase;

pub const MAGIC_V2: [u8; 8] = *b"EPMTRC02";
pub const MAGIC_V1: [u8; 8] = *b"EPMTRC01";
const HEADER: usize = 16;
const FLAG_DECODE: u32 = 1;

/// Appends records to a sink through a buffer reserved up front, so the hook's calls do not
/// allocate while a record fits.
pub struct TraceWriter<W: Write> {
    out: W,
    buf: Vec<u8>,
    failed: bool,
}

impl<W: Write> TraceWriter<W> {
    const CAPACITY: usize = 1 << 20;

    pub fn new(out: W, n_expert: u32, n_used: u32) -> TraceWriter<W> {
        let mut buf = Vec::with_capacity(Self::CAPACITY);
        buf.extend_from_slice(&MAGIC_V2);
        buf.extend_from_slice(&n_expert.to_le_bytes());
        buf.extend_from_slice(&n_used.to_le_bytes());
        TraceWriter {
            out,
            buf,
            failed: false,
        }
    }

    /// Whether a write to the sink has failed (the trace is then incomplete).
    pub fn failed(&self) -> bool {
        self.failed
    }

    /// Hand the buffered records to the sink and flush it.
    pub fn flush(&mut self) -> io::Result<()> {
        let r = self.write_buffer().and_then(|()| self.out.flush());
        if r.is_err() {
            self.failed = true;
        }
        r
    }

    /// Hand the buffered records to the sink without flushing it: a full buffer is
    /// written from the eval callback, where a sink's flush (an `fdatasync`) would stall
    /// compute.
    fn write_buffer(&mut self) -> io::Result<()> {
        let r = self.out.write_all(&self.buf);
        self.buf.clear();
        if r.is_err() {
            self.failed = true;
        }
        r
    }

    /// Append one record of `n_ids` ids. Allocation-free while the record fits the buffer.
    pub fn record(
        &mut self,
        layer: u32,
        phase: Phase,
        n_tokens: usize,
        ids: impl Iterator<Item = i32>,
        n_ids: usize,
    ) {
        if self.buf.len() + 12 + 2 * n_ids > Self::CAPACITY {
            let _ = self.write_buffer();
        }
        let flags = match phase {
            Phase::Decode => FLAG_DECODE,
            Phase::Prompt => 0,
        };
        self.buf.extend_from_slice(&layer.to_le_bytes());
        self.buf.extend_from_slice(&(n_tokens as u32).to_le_bytes());
        self.buf.extend_from_slice(&flags.to_le_bytes());
        for id in ids {
            self.buf.extend_from_slice(&(id as u16).to_le_bytes());
        }
    }
}

impl<W: Write> Drop for TraceWriter<W> {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TraceError {
    #[error("not an EPM routing trace (the first 8 bytes are not \"EPMTRC01\" or \"EPMTRC02\")")]
    BadMagic,
    #[error("truncated at byte {offset}: a record needs {needed} bytes, {remaining} remain")]
    Truncated {
        offset: usize,
        needed: usize,
        remaining: usize,
    },
    #[error("record at byte {offset} names expert {id}, but the header says {n_expert} experts")]
    BadExpert {
        offset: usize,
        id: u16,
        n_expert: u32,
    },
    #[error("the header says {n_used} experts used of {n_expert}: not a routing trace")]
    BadHeader { n_expert: u32, n_used: u32 },
}

/// One routed layer of one ubatch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub layer: u32,
    pub phase: Phase,
    pub n_tokens: u32,
    /// `n_tokens * n_used` ids, token-major.
    pub ids: Vec<u16>,
}

/// A whole trace, read into memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    pub n_expert: u32,
    pub n_used: u32,
    pub records: Vec<Record>,
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

impl Trace {
    /// Parse a trace; every count is checked against the bytes that remain first.
    pub fn parse(bytes: &[u8]) -> Result<Trace, TraceError> {
        let v2 = match bytes.get(..8) {
            Some(m) if m == MAGIC_V2 => true,
            Some(m) if m == MAGIC_V1 => false,
            _ => return Err(TraceError::BadMagic),
        };
        let need = |offset: usize, needed: usize| {
            let remaining = bytes.len().saturating_sub(offset);
            if needed > remaining {
                Err(TraceError::Truncated {
                    offset,
                    needed,
                    remaining,
                })
            } else {
                Ok(())
            }
        };
        need(0, HEADER)?;
        let (n_expert, n_used) = (u32_at(bytes, 8), u32_at(bytes, 12));
        if n_used == 0 || n_used > n_expert || n_expert > u32::from(u16::MAX) + 1 {
            return Err(TraceError::BadHeader { n_expert, n_used });
        }
        let fixed = if v2 { 12 } else { 8 };
        let mut off = HEADER;
        let mut records = Vec::new();
        while off < bytes.len() {
            need(off, fixed)?;
            let layer = u32_at(bytes, off);
            let n_tokens = u32_at(bytes, off + 4);
            let flags = if v2 { u32_at(bytes, off + 8) } else { 0 };
            let n_ids = (n_tokens as usize).saturating_mul(n_used as usize);
            need(off + fixed, n_ids.saturating_mul(2))?;
            let start = off + fixed;
            let mut ids = Vec::with_capacity(n_ids);
            for k in 0..n_ids {
                let id = u16::from_le_bytes([bytes[start + 2 * k], bytes[start + 2 * k + 1]]);
                if u32::from(id) >= n_expert {
                    return Err(TraceError::BadExpert {
                        offset: start + 2 * k,
                        id,
                        n_expert,
                    });
                }
                ids.push(id);
            }
            let decode = if v2 {
                flags & FLAG_DECODE != 0
            } else {
                n_tokens == 1
            };
            records.push(Record {
                layer,
                phase: if decode { Phase::Decode } else { Phase::Prompt },
                n_tokens,
                ids,
            });
            off = start + 2 * n_ids;
        }
        Ok(Trace {
            n_expert,
            n_used,
            records,
        })
    }

    /// The records grouped into ubatches: a record whose layer is not above the previous
    /// one starts a new ubatch.
    pub fn ubatches(&self) -> Vec<&[Record]> {
        let mut out = Vec::new();
        let mut start = 0;
        for i in 1..=self.records.len() {
            if i == self.records.len() || self.records[i].layer <= self.records[i - 1].layer {
                if i > start {
                    out.push(&self.records[start..i]);
                }
                start = i;
            }
        }
        out
    }

    /// Every MoE layer id that appears, ascending.
    pub fn layers(&self) -> Vec<u32> {
        let mut l: Vec<u32> = self.records.iter().map(|r| r.layer).collect();
        l.sort_unstable();
        l.dedup();
        l
    }
}

impl Record {
    /// The distinct experts this record selected, ascending.
    pub fn distinct(&self) -> Vec<u16> {
        let mut d = self.ids.clone();
        d.sort_unstable();
        d.dedup();
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut out = Vec::new();
        {
            let mut w = TraceWriter::new(&mut out, 8, 2);
            // A 2-token prompt ubatch over layers 0 and 1, then one decode step.
            w.record(0, Phase::Prompt, 2, [1, 2, 3, 1].into_iter(), 4);
            w.record(1, Phase::Prompt, 2, [0, 7, 7, 6].into_iter(), 4);
            w.record(0, Phase::Decode, 1, [5, 4].into_iter(), 2);
            w.record(1, Phase::Decode, 1, [2, 3].into_iter(), 2);
            assert!(!w.failed());
        }
        out
    }

    /// Counts what reaches the sink and how often it is flushed.
    #[derive(Default)]
    struct Sink {
        bytes: usize,
        flushes: usize,
    }

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.bytes += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            self.flushes += 1;
            Ok(())
        }
    }

    #[test]
    fn a_full_buffer_is_written_without_flushing_the_sink() {
        let mut sink = Sink::default();
        {
            let mut w = TraceWriter::new(&mut sink, 128, 8);
            // 3 MiB of 8-id records: the 1 MiB buffer fills and is written twice.
            let record = 12 + 2 * 8;
            for _ in 0..(3 << 20) / record {
                w.record(0, Phase::Decode, 1, 0..8, 8);
            }
            assert!(!w.failed());
        }
        assert_eq!(sink.flushes, 1, "only the writer's end flushes the sink");
        assert_eq!(sink.bytes, 16 + (3 << 20) / 28 * 28);
    }

    #[test]
    fn round_trips_and_groups_ubatches() {
        let t = Trace::parse(&sample()).unwrap();
        assert_eq!((t.n_expert, t.n_used), (8, 2));
        assert_eq!(t.records.len(), 4);
        assert_eq!(t.records[1].ids, vec![0, 7, 7, 6]);
        assert_eq!(t.records[1].distinct(), vec![0, 6, 7]);
        assert_eq!(t.records[2].phase, Phase::Decode);
        let u = t.ubatches();
        assert_eq!(u.len(), 2);
        assert_eq!(u[0].len(), 2);
        assert_eq!(t.layers(), vec![0, 1]);
    }

    #[test]
    fn reads_version_1_with_single_token_ubatches_as_decode() {
        let mut b = MAGIC_V1.to_vec();
        b.extend_from_slice(&4u32.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        for (layer, n, ids) in [(0u32, 2u32, vec![1u16, 2]), (0, 1, vec![3])] {
            b.extend_from_slice(&layer.to_le_bytes());
            b.extend_from_slice(&n.to_le_bytes());
            for id in ids {
                b.extend_from_slice(&id.to_le_bytes());
            }
        }
        let t = Trace::parse(&b).unwrap();
        assert_eq!(t.records[0].phase, Phase::Prompt);
        assert_eq!(t.records[1].phase, Phase::Decode);
    }

    #[test]
    fn rejects_bad_input_before_allocating() {
        assert_eq!(Trace::parse(b"nonsense"), Err(TraceError::BadMagic));
        let good = sample();
        let cut = &good[..good.len() - 1];
        assert!(matches!(
            Trace::parse(cut),
            Err(TraceError::Truncated { .. })
        ));
        // A record claiming 2^31 tokens fails on the byte count, not on an allocation.
        let mut huge = good[..16].to_vec();
        huge.extend_from_slice(&0u32.to_le_bytes());
        huge.extend_from_slice(&(1u32 << 31).to_le_bytes());
        huge.extend_from_slice(&0u32.to_le_bytes());
        assert!(matches!(
            Trace::parse(&huge),
            Err(TraceError::Truncated { .. })
        ));
        let mut bad = good.clone();
        bad[16 + 12] = 9; // expert 9 of 8
        assert!(matches!(
            Trace::parse(&bad),
            Err(TraceError::BadExpert { id: 9, .. })
        ));
    }
}
