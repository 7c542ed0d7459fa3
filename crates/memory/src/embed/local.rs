//! all-MiniLM-L6-v2 on candle (being written).
