use std::collections::VecDeque;

/// The last `capacity` bytes written, and how many came before them.
#[derive(Debug, Clone)]
pub(crate) struct Ring {
    bytes: VecDeque<u8>,
    capacity: usize,
    /// Every byte ever written, kept or not.
    total: u64,
}

impl Ring {
    pub(crate) fn new(capacity: usize) -> Self {
        Ring {
            bytes: VecDeque::with_capacity(capacity.min(64 * 1024)),
            capacity,
            total: 0,
        }
    }

    pub(crate) fn push(&mut self, data: &[u8]) {
        self.total += data.len() as u64;
        if data.len() >= self.capacity {
            self.bytes.clear();
            self.bytes.extend(&data[data.len() - self.capacity..]);
            return;
        }
        let overflow = (self.bytes.len() + data.len()).saturating_sub(self.capacity);
        self.bytes.drain(..overflow);
        self.bytes.extend(data);
    }

    /// Bytes written that are no longer kept.
    pub(crate) fn dropped(&self) -> u64 {
        self.total - self.bytes.len() as u64
    }

    /// The last `max` kept bytes, and how many kept bytes precede them.
    pub(crate) fn tail(&self, max: usize) -> (Vec<u8>, usize) {
        let skip = self.bytes.len().saturating_sub(max);
        (self.bytes.iter().skip(skip).copied().collect(), skip)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_bytes_and_counts_the_rest() {
        let mut ring = Ring::new(4);
        ring.push(b"ab");
        assert_eq!((ring.tail(10), ring.dropped()), ((b"ab".to_vec(), 0), 0));
        ring.push(b"cde");
        assert_eq!((ring.tail(10), ring.dropped()), ((b"bcde".to_vec(), 0), 1));
        ring.push(b"0123456789");
        assert_eq!((ring.tail(10), ring.dropped()), ((b"6789".to_vec(), 0), 11));
        assert_eq!(ring.tail(3), (b"789".to_vec(), 1));
    }

    #[test]
    fn a_zero_capacity_keeps_nothing() {
        let mut ring = Ring::new(0);
        ring.push(b"abc");
        assert_eq!((ring.tail(10), ring.dropped()), ((Vec::new(), 0), 3));
    }
}
