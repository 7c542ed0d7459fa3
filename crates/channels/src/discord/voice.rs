//! What Discord needs to show an Ogg Opus file as a voice message: its
//! length and a waveform.
//!
//! Discord draws a voice message from the attachment's `duration_secs`
//! and `waveform` (at most 256 bytes, one per 100 ms or coarser). Both
//! are read from the Ogg stream without decoding audio: the length from
//! the last page's granule position less the pre-skip (Opus counts at
//! 48 kHz), the waveform from how many bytes the encoder spent on each
//! stretch of time. Opus spends more bits on louder, busier sound and
//! almost none on silence, so the curve follows the voice's pauses and
//! stresses; it is an outline, not a measured amplitude.

use base64::Engine as _;

/// Opus's granule clock.
const RATE: f64 = 48_000.0;
/// The most points a waveform has.
const MAX_POINTS: usize = 256;
/// The finest step Discord's own clients sample at.
const STEP_MS: f64 = 100.0;

/// A voice message's `duration_secs` and base64 `waveform`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct VoiceNote {
    pub(crate) duration_secs: f64,
    pub(crate) waveform: String,
}

/// The voice message `data` makes, or `None` when it is not an Ogg Opus
/// stream with audio in it.
pub(crate) fn voice_note(data: &[u8]) -> Option<VoiceNote> {
    let (packets, last_granule) = packets(data)?;
    let mut packets = packets.into_iter();
    let head = packets.next()?;
    if !head.starts_with(b"OpusHead") || head.len() < 19 {
        return None;
    }
    let pre_skip = u64::from(u16::from_le_bytes([head[10], head[11]]));
    // The comment header; everything after it is audio.
    if !packets.next()?.starts_with(b"OpusTags") {
        return None;
    }
    let audio: Vec<(f64, usize)> = packets
        .filter_map(|packet| Some((duration_ms(&packet)?, packet.len())))
        .collect();
    let duration_secs = last_granule.saturating_sub(pre_skip) as f64 / RATE;
    if audio.is_empty() || duration_secs <= 0.0 {
        return None;
    }
    let total_ms: f64 = audio.iter().map(|(ms, _)| ms).sum();
    let points = ((total_ms / STEP_MS).ceil() as usize).clamp(1, MAX_POINTS);
    let step = total_ms / points as f64;
    let mut bytes = vec![0.0f64; points];
    let mut at = 0.0;
    for (ms, len) in audio {
        let point = ((at / step) as usize).min(points - 1);
        bytes[point] += len as f64;
        at += ms;
    }
    let loudest = bytes.iter().copied().fold(0.0, f64::max);
    let waveform: Vec<u8> = bytes
        .iter()
        .map(|b| {
            if loudest > 0.0 {
                (b / loudest * 255.0).round() as u8
            } else {
                0
            }
        })
        .collect();
    Some(VoiceNote {
        duration_secs: (duration_secs * 1000.0).round() / 1000.0,
        waveform: base64::engine::general_purpose::STANDARD.encode(waveform),
    })
}

/// The packets of the first logical stream of an Ogg file, and its last
/// page's granule position; `None` for anything that is not Ogg.
fn packets(data: &[u8]) -> Option<(Vec<Vec<u8>>, u64)> {
    let mut packets = Vec::new();
    let mut current = Vec::new();
    let mut last_granule = 0;
    let mut serial = None;
    let mut rest = data;
    while !rest.is_empty() {
        if rest.len() < 27 || &rest[..4] != b"OggS" || rest[4] != 0 {
            return None;
        }
        let granule = u64::from_le_bytes(rest[6..14].try_into().ok()?);
        let page_serial = u32::from_le_bytes(rest[14..18].try_into().ok()?);
        let segments = usize::from(rest[26]);
        let table = rest.get(27..27 + segments)?;
        let body_len: usize = table.iter().map(|&l| usize::from(l)).sum();
        let body = rest.get(27 + segments..27 + segments + body_len)?;
        if *serial.get_or_insert(page_serial) == page_serial {
            // -1: no packet ends on this page.
            if granule != u64::MAX {
                last_granule = granule;
            }
            let mut at = 0;
            for &lacing in table {
                let lacing = usize::from(lacing);
                current.extend_from_slice(&body[at..at + lacing]);
                at += lacing;
                if lacing < 255 {
                    packets.push(std::mem::take(&mut current));
                }
            }
        }
        rest = &rest[27 + segments + body_len..];
    }
    Some((packets, last_granule))
}

/// How long an Opus packet plays, from its TOC byte (RFC 6716, 3.1);
/// `None` for an empty or malformed packet.
fn duration_ms(packet: &[u8]) -> Option<f64> {
    let toc = *packet.first()?;
    let config = toc >> 3;
    let frame_ms = match config {
        0..=11 => [10.0, 20.0, 40.0, 60.0][usize::from(config % 4)],
        12..=15 => [10.0, 20.0][usize::from(config % 2)],
        _ => [2.5, 5.0, 10.0, 20.0][usize::from(config % 4)],
    };
    let frames = match toc & 0b11 {
        0 => 1,
        1 | 2 => 2,
        _ => packet.get(1)? & 0b0011_1111,
    };
    (frames > 0).then(|| frame_ms * f64::from(frames))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// One Ogg page of `packets`, each under 255 bytes.
    fn page(serial: u32, granule: u64, packets: &[&[u8]]) -> Vec<u8> {
        let mut page = b"OggS\0\0".to_vec();
        page.extend_from_slice(&granule.to_le_bytes());
        page.extend_from_slice(&serial.to_le_bytes());
        page.extend_from_slice(&[0; 8]);
        page.push(packets.len() as u8);
        page.extend(packets.iter().map(|p| p.len() as u8));
        for packet in packets {
            page.extend_from_slice(packet);
        }
        page
    }

    fn head(pre_skip: u16) -> Vec<u8> {
        let mut head = b"OpusHead\x01\x01".to_vec();
        head.extend_from_slice(&pre_skip.to_le_bytes());
        head.extend_from_slice(&48_000u32.to_le_bytes());
        head.extend_from_slice(&[0, 0, 0]);
        head
    }

    /// A 20 ms CELT frame (config 31, one frame) of `len` bytes.
    fn frame(len: usize) -> Vec<u8> {
        let mut frame = vec![31 << 3];
        frame.resize(len, 0x55);
        frame
    }

    #[test]
    fn a_second_of_speech_then_silence_is_drawn_loud_then_quiet() {
        let loud = frame(120);
        let quiet = frame(3);
        let speech: Vec<&[u8]> = std::iter::repeat_n(&loud[..], 25).collect();
        let silence: Vec<&[u8]> = std::iter::repeat_n(&quiet[..], 25).collect();
        let mut ogg = page(7, 0, &[&head(312)]);
        ogg.extend(page(7, 0, &[b"OpusTags\0\0\0\0\0\0\0\0"]));
        // Another stream's page in between is not this one's audio.
        ogg.extend(page(8, 0, &[&frame(200)]));
        ogg.extend(page(7, 24_000 + 312, &speech));
        ogg.extend(page(7, 48_000 + 312, &silence));
        let note = voice_note(&ogg).unwrap();
        assert_eq!(note.duration_secs, 1.0);
        let waveform = base64::engine::general_purpose::STANDARD
            .decode(&note.waveform)
            .unwrap();
        // One point per 100 ms: five of speech, five of silence.
        assert_eq!(waveform.len(), 10);
        assert!(waveform[..5].iter().all(|&p| p == 255), "{waveform:?}");
        assert!(waveform[5..].iter().all(|&p| p < 10), "{waveform:?}");
    }

    #[test]
    fn a_long_message_keeps_to_256_points() {
        let loud = frame(60);
        let mut ogg = page(1, 0, &[&head(0)]);
        ogg.extend(page(1, 0, &[b"OpusTags"]));
        // 60 s: 3,000 frames of 20 ms, 100 to a page.
        for n in 1..=30u64 {
            let packets: Vec<&[u8]> = std::iter::repeat_n(&loud[..], 100).collect();
            ogg.extend(page(1, n * 96_000, &packets));
        }
        let note = voice_note(&ogg).unwrap();
        assert_eq!(note.duration_secs, 60.0);
        let waveform = base64::engine::general_purpose::STANDARD
            .decode(&note.waveform)
            .unwrap();
        assert_eq!(waveform.len(), 256);
    }

    #[test]
    fn anything_but_ogg_opus_with_audio_is_not_a_voice_note() {
        let mut vorbis = page(1, 0, &[b"\x01vorbis-header-bytes"]);
        vorbis.extend(page(1, 0, &[b"OpusTags"]));
        let mut no_audio = page(1, 0, &[&head(0)]);
        no_audio.extend(page(1, 0, &[b"OpusTags"]));
        let mut cut = page(1, 0, &[&head(0)]);
        cut.truncate(cut.len() - 3);
        for (what, data) in [
            ("mp3", &b"ID3\x03\0\0\0\0\0\0"[..]),
            ("empty", b""),
            ("vorbis", &vorbis),
            ("no audio", &no_audio),
            ("cut short", &cut),
        ] {
            assert_eq!(voice_note(data), None, "{what}");
        }
    }
}
