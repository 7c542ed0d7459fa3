//! Splits a markdown file into the chunks the index searches: runs of
//! paragraphs and list items under one heading, small enough that a hit
//! points at a fact rather than a page, each with its line range.

/// A chunk grows until adding the next block would pass this, in bytes.
pub const TARGET_BYTES: usize = 480;
/// A single block longer than this is split, in bytes.
pub const MAX_BYTES: usize = 1200;

/// One piece of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// First line, 1-based.
    pub start_line: u32,
    /// Last line, 1-based, inclusive.
    pub end_line: u32,
    /// The nearest heading above the chunk, without its `#`s.
    pub heading: Option<String>,
    /// The chunk's lines, as written.
    pub text: String,
}

impl Chunk {
    /// What is indexed and embedded: the heading, then the text, so a
    /// fact filed under "Preferences" is found by that word too.
    pub fn indexed_text(&self) -> String {
        match &self.heading {
            Some(heading) => format!("{heading}\n{}", self.text),
            None => self.text.clone(),
        }
    }
}

/// A block: a paragraph, a list item with its continuation lines, a
/// heading, or a fenced code block.
struct Block {
    start: u32,
    end: u32,
    lines: Vec<String>,
}

impl Block {
    fn bytes(&self) -> usize {
        self.lines.iter().map(|l| l.len() + 1).sum()
    }
}

fn is_list_item(line: &str) -> bool {
    let trimmed = line.trim_start();
    if trimmed.starts_with("- ") || trimmed.starts_with("* ") || trimmed.starts_with("+ ") {
        return true;
    }
    let digits = trimmed.chars().take_while(char::is_ascii_digit).count();
    digits > 0 && (trimmed[digits..].starts_with(". ") || trimmed[digits..].starts_with(") "))
}

fn heading_of(line: &str) -> Option<&str> {
    let trimmed = line.trim_start();
    let hashes = trimmed.chars().take_while(|c| *c == '#').count();
    if (1..=6).contains(&hashes) {
        let rest = &trimmed[hashes..];
        if rest.is_empty() || rest.starts_with(' ') {
            return Some(rest.trim());
        }
    }
    None
}

/// Splits `text` into chunks. Blank files give none.
pub fn chunk(text: &str) -> Vec<Chunk> {
    let mut chunks = Vec::new();
    let mut heading: Option<String> = None;
    let mut current: Vec<Block> = Vec::new();
    let mut block: Option<Block> = None;
    let mut in_fence = false;

    let flush_block = |block: &mut Option<Block>,
                       current: &mut Vec<Block>,
                       chunks: &mut Vec<Chunk>,
                       heading: &Option<String>| {
        if let Some(done) = block.take() {
            let size: usize = current.iter().map(Block::bytes).sum();
            if !current.is_empty() && size + done.bytes() > TARGET_BYTES {
                emit(current, chunks, heading);
            }
            if done.bytes() > MAX_BYTES {
                emit(current, chunks, heading);
                split_long(done, chunks, heading);
            } else {
                current.push(done);
            }
        }
    };

    for (index, line) in text.lines().enumerate() {
        let number = u32::try_from(index + 1).unwrap_or(u32::MAX);
        let fence = line.trim_start().starts_with("```") || line.trim_start().starts_with("~~~");
        if in_fence {
            if let Some(open) = block.as_mut() {
                open.lines.push(line.to_owned());
                open.end = number;
            }
            if fence {
                in_fence = false;
                flush_block(&mut block, &mut current, &mut chunks, &heading);
            }
            continue;
        }
        if fence {
            flush_block(&mut block, &mut current, &mut chunks, &heading);
            in_fence = true;
            block = Some(Block {
                start: number,
                end: number,
                lines: vec![line.to_owned()],
            });
            continue;
        }
        if let Some(title) = heading_of(line) {
            flush_block(&mut block, &mut current, &mut chunks, &heading);
            emit(&mut current, &mut chunks, &heading);
            heading = (!title.is_empty()).then(|| title.to_owned());
            continue;
        }
        if line.trim().is_empty() {
            flush_block(&mut block, &mut current, &mut chunks, &heading);
            continue;
        }
        let starts_new = is_list_item(line) && !line.starts_with("  ") && !line.starts_with('\t');
        match block.as_mut() {
            Some(open) if !starts_new => {
                open.lines.push(line.to_owned());
                open.end = number;
            }
            _ => {
                flush_block(&mut block, &mut current, &mut chunks, &heading);
                block = Some(Block {
                    start: number,
                    end: number,
                    lines: vec![line.to_owned()],
                });
            }
        }
    }
    flush_block(&mut block, &mut current, &mut chunks, &heading);
    emit(&mut current, &mut chunks, &heading);
    chunks
}

fn emit(current: &mut Vec<Block>, chunks: &mut Vec<Chunk>, heading: &Option<String>) {
    let (Some(first), Some(last)) = (current.first(), current.last()) else {
        return;
    };
    let (start_line, end_line) = (first.start, last.end);
    let mut text = String::new();
    for block in current.drain(..) {
        for line in block.lines {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&line);
        }
    }
    chunks.push(Chunk {
        start_line,
        end_line,
        heading: heading.clone(),
        text,
    });
}

/// A block too long for one chunk: by lines, and a single overlong line
/// at spaces (or anywhere, on a character boundary).
fn split_long(block: Block, chunks: &mut Vec<Chunk>, heading: &Option<String>) {
    let mut text = String::new();
    let mut start = block.start;
    for (offset, line) in block.lines.iter().enumerate() {
        let number = block.start + u32::try_from(offset).unwrap_or(u32::MAX);
        if !text.is_empty() && text.len() + line.len() + 1 > TARGET_BYTES {
            chunks.push(Chunk {
                start_line: start,
                end_line: number.saturating_sub(1).max(start),
                heading: heading.clone(),
                text: std::mem::take(&mut text),
            });
            start = number;
        }
        if line.len() > MAX_BYTES {
            let mut rest = line.as_str();
            while !rest.is_empty() {
                let mut end = rest.floor_char_boundary(rest.len().min(TARGET_BYTES));
                if end < rest.len()
                    && let Some(space) = rest[..end].rfind(' ')
                    && space > 0
                {
                    end = space;
                }
                chunks.push(Chunk {
                    start_line: number,
                    end_line: number,
                    heading: heading.clone(),
                    text: rest[..end].trim().to_owned(),
                });
                rest = rest[end..].trim_start();
            }
            start = number + 1;
            continue;
        }
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(line);
    }
    if !text.is_empty() {
        chunks.push(Chunk {
            start_line: start,
            end_line: block.end,
            heading: heading.clone(),
            text,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_under_headings_keep_their_lines() {
        let text = "# User\n\n## Preferences\n- likes green tea\n- cycles to work\n\n## Family\nSister: Ana, lives in Porto.\n";
        let chunks = chunk(text);
        assert_eq!(chunks.len(), 2, "{chunks:#?}");
        assert_eq!((chunks[0].start_line, chunks[0].end_line), (4, 5));
        assert_eq!(chunks[0].heading.as_deref(), Some("Preferences"));
        assert_eq!(chunks[0].text, "- likes green tea\n- cycles to work");
        assert_eq!((chunks[1].start_line, chunks[1].end_line), (8, 8));
        assert_eq!(
            chunks[1].indexed_text(),
            "Family\nSister: Ana, lives in Porto."
        );
    }

    #[test]
    fn many_items_make_several_chunks_of_whole_items() {
        let text: String = (1..=60)
            .map(|i| format!("- fact number {i} about something worth keeping\n"))
            .collect();
        let chunks = chunk(&text);
        assert!(chunks.len() > 3, "{}", chunks.len());
        let mut next = 1;
        for piece in &chunks {
            assert_eq!(piece.start_line, next, "chunks are contiguous");
            assert!(piece.text.len() <= TARGET_BYTES, "{}", piece.text.len());
            assert!(piece.text.starts_with("- fact number"));
            next = piece.end_line + 1;
        }
        assert_eq!(next, 61);
    }

    #[test]
    fn long_lines_split_on_char_boundaries() {
        let line = "héllo wörld ".repeat(300);
        let chunks = chunk(&line);
        assert!(chunks.len() > 1);
        assert!(
            chunks
                .iter()
                .all(|c| c.start_line == 1 && c.text.len() <= TARGET_BYTES)
        );
        let words: usize = chunks
            .iter()
            .map(|c| c.text.split_whitespace().count())
            .sum();
        assert_eq!(words, 600);
    }

    #[test]
    fn code_fences_stay_whole_and_blank_files_give_nothing() {
        let text = "Intro\n\n```sh\nmake\n\nmake test\n```\nAfter";
        let chunks = chunk(text);
        assert_eq!(chunks.len(), 1);
        assert!(chunks[0].text.contains("make\n\nmake test"));
        assert_eq!(chunks[0].end_line, 8);
        assert!(chunk("\n\n  \n").is_empty());
    }
}
