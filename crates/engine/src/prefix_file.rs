//! The prompt store's file for one prefix: its tokens and its sequence state in one buffer,
//! which the session writes and reads whole, past the page cache.
//!
//! Layout, little-endian: the magic `EPMQ`, the version, the token count `n` (three `u32`),
//! `n` tokens (`i32`), then the sequence's state as `llama_state_seq_get_data_ext` gives it,
//! to the end. It is llama.cpp's sequence-file layout with a state that also carries
//! llama.cpp's own state magic and sequence id, so it has a magic of its own: llama.cpp's
//! loader is not meant to read it.

/// `EPMQ`.
pub const MAGIC: u32 = u32::from_le_bytes(*b"EPMQ");
pub const VERSION: u32 = 1;
/// Magic, version and token count.
pub const HEADER_BYTES: usize = 12;
const TOKEN_BYTES: usize = std::mem::size_of::<i32>();

/// Why a buffer is not a prefix file holding the tokens expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrefixFileError {
    #[error(
        "it is not a prompt-store file of this version (magic {magic:#010x}, version {version})"
    )]
    NotOurs { magic: u32, version: u32 },
    #[error("it is {len} bytes, too short for its header and {tokens} tokens")]
    Truncated { len: usize, tokens: u64 },
    #[error("it holds other tokens than were saved")]
    OtherTokens,
}

/// The size of a file holding `tokens` tokens and a state of `state` bytes.
pub fn file_len(tokens: usize, state: usize) -> usize {
    HEADER_BYTES + tokens * TOKEN_BYTES + state
}

/// Write the header and `tokens` at the start of `buf` (sized by [`file_len`]); returns the
/// rest, where the state goes.
pub fn write_head<'a>(buf: &'a mut [u8], tokens: &[i32]) -> &'a mut [u8] {
    let (head, rest) = buf.split_at_mut(HEADER_BYTES + tokens.len() * TOKEN_BYTES);
    head[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    head[4..8].copy_from_slice(&VERSION.to_le_bytes());
    head[8..12].copy_from_slice(&(tokens.len() as u32).to_le_bytes());
    for (slot, t) in head[HEADER_BYTES..]
        .chunks_exact_mut(TOKEN_BYTES)
        .zip(tokens)
    {
        slot.copy_from_slice(&t.to_le_bytes());
    }
    rest
}

/// The state in `buf`, once its header is ours and its tokens are `tokens`.
pub fn state_holding<'a>(buf: &'a [u8], tokens: &[i32]) -> Result<&'a [u8], PrefixFileError> {
    let word = |i: usize| {
        buf.get(i..i + 4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
    };
    let (magic, version) = (word(0).unwrap_or(0), word(4).unwrap_or(0));
    if magic != MAGIC || version != VERSION {
        return Err(PrefixFileError::NotOurs { magic, version });
    }
    let count = u64::from(word(8).ok_or(PrefixFileError::Truncated {
        len: buf.len(),
        tokens: 0,
    })?);
    // The count is checked against the bytes there before anything is indexed by it.
    let room = (buf.len() - HEADER_BYTES) / TOKEN_BYTES;
    if count > room as u64 {
        return Err(PrefixFileError::Truncated {
            len: buf.len(),
            tokens: count,
        });
    }
    let (held, state) = buf[HEADER_BYTES..].split_at(count as usize * TOKEN_BYTES);
    let same = count == tokens.len() as u64
        && held
            .chunks_exact(TOKEN_BYTES)
            .zip(tokens)
            .all(|(b, &t)| i32::from_le_bytes(b.try_into().unwrap()) == t);
    if !same {
        return Err(PrefixFileError::OtherTokens);
    }
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(tokens: &[i32], state: &[u8]) -> Vec<u8> {
        let mut buf = vec![0u8; file_len(tokens.len(), state.len())];
        write_head(&mut buf, tokens).copy_from_slice(state);
        buf
    }

    #[test]
    fn a_file_gives_back_its_state_for_its_own_tokens_only() {
        let tokens = [151_644, -1, 0, 7];
        let buf = file(&tokens, b"state bytes");
        assert_eq!(buf.len(), 12 + 16 + 11);
        assert_eq!(&buf[..4], b"EPMQ");
        assert_eq!(state_holding(&buf, &tokens), Ok(&b"state bytes"[..]));
        assert_eq!(
            state_holding(&buf, &tokens[..3]),
            Err(PrefixFileError::OtherTokens)
        );
        assert_eq!(
            state_holding(&buf, &[151_644, -1, 0, 8]),
            Err(PrefixFileError::OtherTokens)
        );
        // No tokens, no state: still a file.
        assert_eq!(state_holding(&file(&[], &[]), &[]), Ok(&[][..]));
    }

    #[test]
    fn a_damaged_or_foreign_buffer_is_refused_before_it_is_indexed() {
        let tokens = [1, 2, 3];
        let buf = file(&tokens, b"s");
        for len in 0..HEADER_BYTES {
            assert!(matches!(
                state_holding(&buf[..len], &tokens),
                Err(PrefixFileError::NotOurs { .. } | PrefixFileError::Truncated { .. })
            ));
        }
        // A count larger than the bytes after the header.
        let mut lying = buf.clone();
        lying[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            state_holding(&lying, &tokens),
            Err(PrefixFileError::Truncated {
                len: buf.len(),
                tokens: u64::from(u32::MAX)
            })
        );
        // Cut inside the tokens.
        assert!(matches!(
            state_holding(&buf[..HEADER_BYTES + 5], &tokens),
            Err(PrefixFileError::Truncated { tokens: 3, .. })
        ));
        // llama.cpp's own sequence file ("ggsq", version 4), or another version of ours.
        let mut theirs = buf.clone();
        theirs[..4].copy_from_slice(&0x6767_7371u32.to_le_bytes());
        assert!(matches!(
            state_holding(&theirs, &tokens),
            Err(PrefixFileError::NotOurs { .. })
        ));
        let mut older = buf;
        older[4..8].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(
            state_holding(&older, &tokens),
            Err(PrefixFileError::NotOurs {
                magic: MAGIC,
                version: 0
            })
        );
    }
}
